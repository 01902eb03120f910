// Command hottext measures how much of a running service's file-backed
// memory is hot under steady load: the evidence behind the rule `gofit run`
// uses for file pages before a process starts (target.HotFileBytes).
//
//	go run ./tools/hottext -url 'http://127.0.0.1:{port}/get' -- BINARY ARGS...
//
// {port} in the URL and the arguments is replaced with a free port. The
// service is warmed up under load, its pages' referenced bits are cleared
// (/proc/PID/clear_refs), and after the measuring window /proc/PID/smaps
// says which file pages were touched again (Referenced). Output: one JSON
// line with the binary's PT_LOAD size, its resident and referenced file
// pages, and the anonymous memory.
package main

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hottext:", err)
		os.Exit(1)
	}
}

func run() error {
	urls := flag.String("url", "", "comma-separated URLs to GET in turn ({port} is replaced)")
	warm := flag.Duration("warm", 10*time.Second, "load before the referenced bits are cleared")
	window := flag.Duration("window", 20*time.Second, "load after they are cleared")
	workers := flag.Int("workers", 4, "concurrent clients")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 || *urls == "" {
		return errors.New("usage: hottext -url URL[,URL...] -- BINARY ARGS...")
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	subst := func(s string) string { return strings.ReplaceAll(s, "{port}", strconv.Itoa(port)) }
	for i := range args {
		args[i] = subst(args[i])
	}
	loadable, err := loadableBytes(args[0])
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	list := strings.Split(subst(*urls), ",")
	if err := waitReady(list[0], 30*time.Second); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	reqs, fails := 0, 0
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := &http.Client{Timeout: 5 * time.Second}
			for i := w; ctx.Err() == nil; i++ {
				resp, err := c.Get(list[i%len(list)])
				ok := err == nil
				if ok {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				mu.Lock()
				reqs++
				if !ok {
					fails++
				}
				mu.Unlock()
			}
		}(w)
	}
	time.Sleep(*warm)
	pid := cmd.Process.Pid
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("1"), 0); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	time.Sleep(*window)
	m, err := readSmaps(pid, args[0])
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	out := map[string]any{
		"binary": args[0], "pt_load_bytes": loadable, "requests": reqs, "failures": fails,
		"window_s":         window.Seconds(),
		"binary_rss_bytes": m.binRss, "binary_referenced_bytes": m.binRef,
		"file_rss_bytes": m.fileRss, "file_referenced_bytes": m.fileRef,
		"anon_rss_bytes": m.anonRss,
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

type smaps struct{ binRss, binRef, fileRss, fileRef, anonRss int64 }

// readSmaps sums Rss and Referenced over file-backed mappings (those of
// the binary itself separately) and Anonymous over all.
func readSmaps(pid int, binary string) (smaps, error) {
	var m smaps
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return m, err
	}
	defer f.Close()
	self, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	path := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping header: addr perms offset dev inode [path]
			path = ""
			if len(fields) >= 6 {
				path = fields[5]
			}
			continue
		}
		if len(fields) < 3 || fields[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		b := kb << 10
		file := strings.HasPrefix(path, "/")
		isBin := file && (path == self || path == binary)
		switch fields[0] {
		case "Rss:":
			if file {
				m.fileRss += b
			}
			if isBin {
				m.binRss += b
			}
		case "Referenced:":
			if file {
				m.fileRef += b
			}
			if isBin {
				m.binRef += b
			}
		case "Anonymous:":
			m.anonRss += b
		}
	}
	return m, sc.Err()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func waitReady(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v", url, timeout)
}

// loadableBytes is the size of the executable's PT_LOAD segments, as the
// library's target.Binary.LoadableBytes counts them: what the loader maps.
func loadableBytes(path string) (int64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	var n int64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			n += int64(min(p.Filesz, 1<<40))
		}
	}
	return n, nil
}

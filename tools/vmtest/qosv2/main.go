// Command qosv2 runs the node agent's memory-QoS experiment (`gofit node
// experiment`) on a cgroup v2 kernel in the test VM, where memory.low and
// memory.high exist, and prints its figures. `make qos-v2` runs it:
//
//	go run ./tools/vmtest/qosv2 [-timeout 30m] [-- EXPERIMENT FLAGS]
//
// Without experiment flags it uses settings sized for TCG (see vmArgs).
// TCG slows every process alike, so compare the ratios it prints, never
// the milliseconds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit/tools/vmtest"
)

// vmArgs are the experiment's host defaults (a 512 MiB node, an LS service
// with request 96 MiB and limit 256 MiB, a 512 MiB BE hog) with the load
// cut to what an emulated CPU serves: a sample request costs ~35 ms of TCG
// time instead of ~1 ms, so 10 req/s for 20 s per trial (200 requests, so
// p99 rests on the two slowest), and 6 repeats per mode for intervals.
func vmArgs() []string { return []string{"--rate", "10", "--duration", "20s", "--repeats", "6"} }

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "qos-v2:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qosv2", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 30*time.Minute, "kill the experiment (and the VM) after this")
	if err := fs.Parse(args); err != nil {
		return err
	}
	expArgs := fs.Args()
	if len(expArgs) == 0 {
		expArgs = vmArgs()
	}
	if *timeout <= 0 {
		return fmt.Errorf("-timeout %v: must be positive", *timeout)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }

	tools, err := vmtest.FindTools(ctx, logf)
	if err != nil {
		return err
	}
	cache, err := vmtest.CacheDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	version := os.Getenv("GOFIT_VM_KERNEL")
	if version == "" {
		version = vmtest.DefaultKernel
	}
	k, err := vmtest.FetchKernel(ctx, cache, version, logf)
	if err != nil {
		return err
	}
	src, err := vmtest.SourceRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gofit-qosv2-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// Static: the initramfs has no C library.
	exe := filepath.Join(tmp, "gofit")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, "./cmd/gofit")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/gofit: %w\n%s", err, out)
	}

	cmdArgs := append([]string{"node", "experiment"}, expArgs...)
	logf("kernel %s, cgroup v2, TCG; running: gofit %s (its output comes back when the VM ends)", k.Version, strings.Join(cmdArgs, " "))
	r := &vmtest.Run{Kernel: k, Tools: tools, Layout: vmtest.V2, Source: src,
		Binaries: []vmtest.Binary{{Name: "gofit", Path: exe, Dir: ".", Args: cmdArgs, Timeout: *timeout, Plain: true}}}
	start := time.Now()
	rep := r.Boot(ctx)
	logf("VM booted in %.1fs; whole run %v", rep.Boot.Seconds(), time.Since(start).Round(time.Second))
	if len(rep.Results) == 1 {
		fmt.Fprint(stdout, rep.Results[0].Output)
	}
	switch {
	case rep.Err != nil:
		return fmt.Errorf("%w; console ends:\n%s", rep.Err, lastLines(rep.Console, 20))
	case len(rep.Results) != 1 || rep.Results[0].ExitCode == -1:
		return errors.New("the experiment never finished inside the VM")
	case rep.Results[0].ExitCode != 0:
		return fmt.Errorf("gofit node experiment exited %d", rep.Results[0].ExitCode)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sampleCPU writes, every interval until stop closes, the guest's busiest
// processes over that interval to file (node-logs/cpu.log, which the host
// can follow): under TCG a step that crawls is most often a process
// spinning beside it, and this says which one.
func sampleCPU(file string, every time.Duration, stop <-chan struct{}) {
	f, err := os.Create(file)
	if err != nil {
		return
	}
	defer f.Close()
	hz := 100.0 // USER_HZ on Linux
	last, lastTotal := procTicks(), totalTicks()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now, total := procTicks(), totalTicks()
		type row struct {
			name  string
			ticks uint64
		}
		var rows []row
		for pid, p := range now {
			if q, ok := last[pid]; ok && q.name == p.name && p.ticks >= q.ticks {
				rows = append(rows, row{p.name, p.ticks - q.ticks})
			} else {
				rows = append(rows, row{p.name, p.ticks})
			}
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].ticks > rows[j].ticks })
		var b bytes.Buffer
		secs := every.Seconds()
		fmt.Fprintf(&b, "%s busy %.0f%% of the guest's CPUs:", time.Now().UTC().Format("15:04:05"), 100*busyShare(lastTotal, total))
		for _, r := range rows[:min(8, len(rows))] {
			if r.ticks == 0 {
				break
			}
			fmt.Fprintf(&b, " %s %.0f%%", r.name, 100*float64(r.ticks)/hz/secs)
		}
		b.WriteByte('\n')
		f.Write(b.Bytes())
		last, lastTotal = now, total
	}
}

type procCPU struct {
	name  string
	ticks uint64
}

// procTicks reads utime+stime of every process in /proc.
func procTicks() map[int]procCPU {
	out := map[int]procCPU{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		f := strings.Fields(s[closing+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		name := s[open+1 : closing]
		// The node's multi-call binary runs as kubelet, controller-manager,
		// scheduler and kubectl: name it by its first argument.
		if name == "kube" {
			if cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil {
				if args := strings.Split(string(cl), "\x00"); len(args) > 1 && args[1] != "" {
					name = args[1]
				}
			}
		}
		out[pid] = procCPU{name: name, ticks: u + st}
	}
	return out
}

// totalTicks is /proc/stat's cpu line: busy and all ticks.
func totalTicks() [2]uint64 {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	var busy, all uint64
	for i, fld := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(fld, 10, 64)
		all += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return [2]uint64{busy, all}
}

func busyShare(a, b [2]uint64) float64 {
	if b[1] <= a[1] {
		return 0
	}
	return float64(b[0]-a[0]) / float64(b[1]-a[1])
}

// writeRequestCounts writes the API server's request counts by
// verb, resource and code (apiserver_request_total), largest first, to file.
func (c *cluster) writeRequestCounts(file string) {
	out, _, err := c.run("get", "--raw", "/metrics")
	if err != nil {
		os.WriteFile(file, []byte(err.Error()+"\n"), 0o644)
		return
	}
	type row struct {
		n    float64
		line string
	}
	var rows []row
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "apiserver_request_total{") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		n, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		rows = append(rows, row{n, l[:i]})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].n > rows[j].n })
	var b bytes.Buffer
	for _, r := range rows {
		fmt.Fprintf(&b, "%10.0f %s\n", r.n, r.line)
	}
	os.WriteFile(file, b.Bytes(), 0o644)
}

package nongo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
)

// build builds examples/offheap with cgo on or off.
func build(t *testing.T, dir string, cgo bool) string {
	t.Helper()
	out := filepath.Join(dir, fmt.Sprintf("offheap-cgo%v", cgo))
	cmd := exec.Command("go", "build", "-o", out, "github.com/gofit-dev/gofit/examples/offheap")
	cmd.Env = append(os.Environ(), fmt.Sprintf("CGO_ENABLED=%d", map[bool]int{true: 1}[cgo]))
	if b, err := cmd.CombinedOutput(); err != nil {
		if cgo {
			t.Skipf("skipping the cgo cases: cannot build with cgo: %v: %s", err, b)
		}
		t.Fatalf("go build: %v: %s", err, b)
	}
	return out
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// accuracyCase runs examples/offheap with off MiB outside its heap, in a
// real cgroup of its own, drives load until it has collected, and measures
// it from outside as `gofit inspect --pid` and the lab do.
func accuracyCase(t *testing.T, bin, via string, off int64) (Measurement, error) {
	g := cgtest.NewGroup(t)
	addr := freePort(t)
	cmd := g.Command(bin, "-addr", addr, "-via", via, "-offheap-mib", fmt.Sprint(off), "-live-mib", "32")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return Measurement{}, err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string) error {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for get("/work") != nil {
		if time.Now().After(deadline) {
			return Measurement{}, fmt.Errorf("not ready within 20s: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := ClearRefs("/", cmd.Process.Pid); err != nil {
		return Measurement{}, err
	}
	began := time.Now()
	for range 600 {
		if err := get("/work"); err != nil {
			return Measurement{}, err
		}
	}
	ev, err := ReadProcess("/", cmd.Process.Pid)
	if err != nil {
		return Measurement{}, err
	}
	ev.ClearedRefs, ev.Window = true, time.Since(began)
	rt, err := FetchRuntime(context.Background(), "http://"+addr+"/debug/vars")
	if err != nil {
		return Measurement{}, err
	}
	ev.Runtime = &rt
	st, err := g.MemoryStats()
	if err != nil {
		return Measurement{}, err
	}
	ev.KernelBytes = int64(min(st.Kernel, 1<<60))
	return Estimate(ev)
}

// errorBound is the accuracy gofit promises: 8 MiB or 10%, whichever is
// larger.
func errorBound(known int64) int64 { return max(8<<20, known/10) }

// A service with a known off-heap size, mapped with mmap (static binary)
// or allocated with cgo's malloc, measured from outside in a real cgroup:
// the anonymous memory found outside the Go heap is within the bound of
// it. The log is the accuracy table of docs/results/nongo.md (go test -v
// -run TestAccuracy ./cmd/gofit/internal/nongo). About 15 s.
func TestAccuracy(t *testing.T) {
	dir := t.TempDir()
	bins := map[string]string{"mmap": build(t, dir, false)}
	for _, via := range []string{"mmap", "malloc"} {
		for _, mib := range []int64{0, 16, 48, 128} {
			t.Run(fmt.Sprintf("%s-%dMiB", via, mib), func(t *testing.T) {
				if via == "malloc" && bins[via] == "" {
					bins[via] = build(t, dir, true)
				}
				m, err := accuracyCase(t, bins[via], via, mib)
				if err != nil {
					t.Fatal(err)
				}
				known := mib << 20
				diff := m.AnonBytes - known
				mdiff := "-"
				if m.MetricsAnonBytes != nil {
					mdiff = fmt.Sprintf("%+.1f", float64(*m.MetricsAnonBytes-known)/(1<<20))
				}
				t.Logf("| %s | %d | %s | %.1f | %+.1f | %s | %.1f | %.1f | %d |", via, mib, m.Method, float64(m.AnonBytes)/(1<<20), float64(diff)/(1<<20), mdiff,
					float64(m.KernelBytes)/(1<<20), float64(m.HotFile)/(1<<20), m.GCs)
				if diff < -errorBound(known) || diff > errorBound(known) {
					t.Errorf("%s %d MiB: measured %.1f MiB outside the Go heap (%s), off by more than %d MiB", via, mib, float64(m.AnonBytes)/(1<<20), m.Method, errorBound(known)>>20)
				}
			})
		}
	}
}

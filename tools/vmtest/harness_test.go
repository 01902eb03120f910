package vmtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// bootEnv gives a kernel and tools for harness tests, or skips as TestVM does.
func bootEnv(t *testing.T) (*Kernel, *Tools) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the VM in -short mode")
	}
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("skipping: the test VM boots an amd64 Linux kernel; this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	ctx := context.Background()
	tools, err := FindTools(ctx, t.Logf)
	if errors.Is(err, ErrCannot) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cache, err := CacheDir()
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(cache, 0o755)
	version := os.Getenv("GOFIT_VM_KERNEL")
	if version == "" {
		version = DefaultKernel
	}
	k, err := FetchKernel(ctx, cache, version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return k, tools
}

func script(t *testing.T, name, body string, timeout time.Duration) Binary {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Binary{Name: name, Path: p, Dir: ".", Timeout: timeout}
}

// A binary that hangs is killed at its timeout and counts as failed; the
// others still run and report; an exit status comes back as it was.
func TestHarnessReportsHangAndStatus(t *testing.T) {
	k, tools := bootEnv(t)
	r := &Run{Kernel: k, Tools: tools, Layout: V2, Source: t.TempDir(), Binaries: []Binary{
		script(t, "hang", "echo started; sleep 1000", time.Second),
		script(t, "fail", "echo failing; exit 3", 10*time.Second),
		script(t, "pass", `test "$(cat /sys/fs/cgroup/vmtest.service/cgroup.procs | wc -l)" -ge 1 && grep -q '^0::/vmtest.service$' /proc/self/cgroup`, 10*time.Second),
	}}
	rep := r.Boot(context.Background())
	if rep.Err != nil {
		t.Fatalf("boot: %v\n%s", rep.Err, rep.Console)
	}
	got := map[string]Result{}
	for _, res := range rep.Results {
		got[res.Name] = res
	}
	if h := got["hang"]; h.ExitCode == 0 || h.ExitCode == -1 || !strings.Contains(h.Output, "started") || h.Seconds < 1 {
		t.Errorf("hanging binary: %+v, want killed after 1s with a non-zero status", h)
	}
	if f := got["fail"]; f.ExitCode != 3 || !strings.Contains(f.Output, "failing") {
		t.Errorf("failing binary: %+v, want status 3 and its output", f)
	}
	if p := got["pass"]; p.ExitCode != 0 {
		t.Errorf("binary in vmtest.service: %+v, want status 0", p)
	}
	t.Logf("boot %.1fs, whole run %.1fs", rep.Boot.Seconds(), rep.Wall.Seconds())
}

// A VM that outlives its limit is killed and reported; the binaries that
// never reported count as not finished (-1), never as passed.
func TestHarnessKillsHungVM(t *testing.T) {
	k, tools := bootEnv(t)
	r := &Run{Kernel: k, Tools: tools, Layout: Hybrid, Source: t.TempDir(), Limit: 12 * time.Second, Binaries: []Binary{
		script(t, "stuck", "sleep 1000", 10*time.Minute),
	}}
	start := time.Now()
	rep := r.Boot(context.Background())
	if rep.Err == nil || !strings.Contains(rep.Err.Error(), "did not finish") {
		t.Errorf("a stuck VM: err %v, want a timeout", rep.Err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("killing the stuck VM took %v", took)
	}
	if len(rep.Results) != 1 || rep.Results[0].ExitCode != -1 {
		t.Errorf("results %+v, want one that never finished (-1)", rep.Results)
	}
}

package target

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/affinity"
)

func TestRead(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("skipping: no path to this test binary: %v", err)
	}
	b, err := Read(exe)
	if err != nil || b.GoVersion != runtime.Version() || b.LoadableBytes <= 0 {
		t.Fatalf("Read(test binary) = %+v, %v", b, err)
	}
	// Before it runs the binary's size budgets nothing: the plan is the
	// ratio unless the user declares non-Go memory (issue 15).
	in := b.Input(cgroup.Limits{}, 3, nil, fit.NonGo{Anon: 48 << 20})
	if in.GoVersion != b.GoVersion || in.DefaultGODEBUG != b.DefaultGODEBUG || in.NonGo != (fit.NonGo{Anon: 48 << 20}) || in.CPUs != 3 {
		t.Errorf("Input: %+v; want the runtime filled in, the declared non-Go and the CPUs kept", in)
	}

	script := filepath.Join(t.TempDir(), "run.sh")
	os.WriteFile(script, []byte("#!/bin/sh\nexec true\n"), 0o755)
	if b, err := Read(script); !errors.Is(err, ErrNotELF) || b != (Binary{}) {
		t.Errorf("Read(script) = %+v, %v; want ErrNotELF", b, err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing")); err == nil || errors.Is(err, ErrNotELF) {
		t.Errorf("Read(missing) = %v; want an error other than ErrNotELF", err)
	}
	if s := Self(); s.GoVersion != runtime.Version() {
		t.Errorf("Self() = %+v", s)
	}
}

// Input is the one way gofit builds the policy's input for a binary: an
// unknown CPU count becomes the affinity mask's, and the limits' CPU
// request, the environment, the runtime and the non-Go memory all arrive.
func TestInput(t *testing.T) {
	b := Binary{GoVersion: "go1.26.1", DefaultGODEBUG: "updatemaxprocs=0"}
	l := cgroup.Limits{CPU: cgroup.CPULimits{Shares: 2048}, Memory: cgroup.MemoryLimits{Max: 1 << 30}}
	vars := map[string]string{"GOGC": "200"}
	in := b.Input(l, 0, vars, fit.NonGo{Anon: 1 << 20})
	if in.CPUs != affinity.CPUs() || in.CPUs <= 0 {
		t.Errorf("CPUs %d; want the affinity mask's %d", in.CPUs, affinity.CPUs())
	}
	if in.CPURequest != l.CPU.RequestCores() || in.CPURequest != 2 {
		t.Errorf("CPU request %g; want 2 (cpu.shares 2048)", in.CPURequest)
	}
	if in.Limits != l || in.Vars["GOGC"] != "200" || in.GoVersion != "go1.26.1" || in.DefaultGODEBUG != "updatemaxprocs=0" ||
		in.NonGo != (fit.NonGo{Anon: 1 << 20}) || in.Running != nil {
		t.Errorf("Input %+v", in)
	}
}

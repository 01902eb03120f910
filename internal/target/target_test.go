package target

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/gofit-dev/gofit/fit"
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
	in := fit.Input{NonGo: fit.NonGo{Anon: 48 << 20}}
	b.Describe(&in)
	if in.GoVersion != b.GoVersion || in.DefaultGODEBUG != b.DefaultGODEBUG || in.NonGo != (fit.NonGo{Anon: 48 << 20}) {
		t.Errorf("Describe: %+v; want the runtime filled in and the declared non-Go kept", in)
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

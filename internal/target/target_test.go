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
	var in fit.Input
	b.Describe(&in)
	if in.GoVersion != b.GoVersion || in.NonGo != fit.BinaryNonGo(b.LoadableBytes) || in.NonGo.HotFile > fit.HotFileAllowance {
		t.Errorf("Describe: %+v", in)
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

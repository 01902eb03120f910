// Package target reads what gofit needs to know about a Go executable
// before it runs: the Go version and GODEBUG defaults built into it, which
// decide what its runtime does with GOMAXPROCS by itself, and the size of
// what the loader maps from it, which bounds the page cache it charges.
// Binary.Input builds the policy's input for it.
//
// It is public because two of gofit's modules use it: the library (for the
// process it runs in) and the gofit command (gofit run and gofit inspect,
// for the binary they start or look at, and the lab, for its target). A
// service using gofit's library has no need of it.
package target

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/affinity"
)

// ErrNotELF is wrapped by Read's error for a file that is not an ELF
// executable (a shell script, say).
var ErrNotELF = errors.New("not an ELF executable")

// Binary is what Read learns about an executable.
type Binary struct {
	// GoVersion and DefaultGODEBUG are empty for a binary that is not Go.
	GoVersion      string
	DefaultGODEBUG string
	// LoadableBytes is the size of the file's PT_LOAD segments: the most
	// page cache its own mappings can charge (most of it cold).
	LoadableBytes int64
}

// Read inspects the executable at path. For a file that is not ELF the
// error wraps ErrNotELF; the Binary is then empty.
func Read(path string) (Binary, error) {
	var b Binary
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return b, fmt.Errorf("%s: %w: %v", path, ErrNotELF, err)
		}
		return b, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			b.LoadableBytes += int64(min(p.Filesz, 1<<40)) // a corrupt header cannot overflow the sum
		}
	}
	if bi, err := buildinfo.ReadFile(path); err == nil {
		b.GoVersion = bi.GoVersion
		b.DefaultGODEBUG = setting(bi, "DefaultGODEBUG")
	}
	return b, nil
}

// Self describes the running binary: its Go runtime's version and built-in
// GODEBUG defaults (LoadableBytes is left 0: in-process gofit measures).
func Self() Binary {
	b := Binary{GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.DefaultGODEBUG = setting(bi, "DefaultGODEBUG")
	}
	return b
}

func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// Input is the policy's input for a process of b under limits l: one
// that may run on cpus CPUs (0: as many as the calling thread's affinity
// mask allows, which a process started from it inherits), with vars as its
// Go runtime's environment and nonGo the non-Go memory known for it. b
// tells the policy about its runtime; before the process runs nothing is
// measured, and the size of its loadable segments says little about the
// text it will touch (fit's FileBudgetFloor notes the measurements), so
// nonGo is what the user declares or, in-process, what gofit measures.
// Running, for the in-process plan, is the caller's to add.
func (b Binary) Input(l cgroup.Limits, cpus int, vars map[string]string, nonGo fit.NonGo) fit.Input {
	if cpus == 0 {
		cpus = affinity.CPUs()
	}
	in := fit.NewInput(l, cpus, vars)
	in.GoVersion, in.DefaultGODEBUG = b.GoVersion, b.DefaultGODEBUG
	in.NonGo = nonGo
	return in
}

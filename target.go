package gofit

import (
	"debug/buildinfo"
	"debug/elf"
	"fmt"

	"github.com/gofit-dev/gofit/fit"
)

// kernelAllowance is what gofit budgets for kernel memory charged to a
// small service's cgroup (page tables, socket buffers, slab) when it cannot
// measure it, as `gofit run` cannot before the process starts.
const kernelAllowance = 2 << 20

// TargetInput adapts in for another binary about to be started: its Go
// version and built-in GODEBUG defaults decide what its runtime would do
// alone, and its loadable size bounds the page cache it pulls into the
// cgroup. A file that is not a Go binary gets an unknown Go version.
func TargetInput(in fit.Input, path string) (fit.Input, error) {
	in.GoVersion, in.DefaultGODEBUG = "", ""
	if bi, err := buildinfo.ReadFile(path); err == nil {
		in.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			if s.Key == "DefaultGODEBUG" {
				in.DefaultGODEBUG = s.Value
			}
		}
	}
	size, err := LoadableSize(path)
	if err != nil {
		return in, err
	}
	in.Unmanaged = size + kernelAllowance
	return in, nil
}

// LoadableSize is the number of bytes of path that the loader maps from the
// file (its PT_LOAD segments): the most page cache it can charge by running.
func LoadableSize(path string) (int64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, fmt.Errorf("%s: not an ELF executable: %w", path, err)
	}
	defer f.Close()
	var n uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			n += p.Filesz
		}
	}
	return int64(n), nil
}

// TargetEnv is what `gofit run` adds to the environment of the binary at
// path: the plan's variables, except GOMAXPROCS when the target's runtime
// would choose the same by itself (the variable would stop it following
// CPU changes). in describes the container; see SelfInput.
func TargetEnv(in fit.Input, path string, opts fit.Options) (map[string]string, fit.Plan) {
	tin, err := TargetInput(in, path)
	if err != nil {
		tin.Unmanaged = 0 // not ELF (a script, say): plan without the page-cache estimate
	}
	p := fit.Compute(tin, opts)
	env := PlanEnv(p)
	if p.RuntimeGOMAXPROCS == p.GOMAXPROCS && !p.GOMAXPROCSFromEnv {
		delete(env, "GOMAXPROCS")
		p.Reasons = append(p.Reasons, fmt.Sprintf("GOMAXPROCS not set: the Go runtime already chooses %d by itself", p.GOMAXPROCS))
	}
	return env, p
}

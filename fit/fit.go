// Package fit is gofit's one policy: from a container's limits to the Go
// runtime settings that fit it (GOMAXPROCS, GOMEMLIMIT, GOGC), each with
// the reason for it, and warnings for settings that fight the limits.
//
// It is pure: no I/O, no clock, no globals. The runtime library, `gofit run`,
// `gofit inspect` and the lab all call Compute, so they always agree.
package fit

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gofit-dev/gofit/cgroup"
)

// Input is what the policy looks at.
type Input struct {
	Limits cgroup.Limits

	// CPUs is the number of CPUs the process may run on (its affinity mask,
	// which already reflects the cpuset). 0 means unknown.
	CPUs int

	// Env holds the Go runtime variables as the target will see them;
	// absent keys are unset. Keys: GOMAXPROCS, GOMEMLIMIT, GOGC, GODEBUG.
	Env map[string]string

	// GoVersion is the target's Go runtime version ("go1.26.1"), and
	// DefaultGODEBUG the GODEBUG defaults built into it from its go.mod
	// ("containermaxprocs=0,..."). Both decide what Go's runtime would pick
	// for GOMAXPROCS on its own. Empty means unknown: assume a runtime that
	// does not read cgroups.
	GoVersion      string
	DefaultGODEBUG string

	// Unmanaged is memory the cgroup charges that the Go runtime does not
	// manage and GOMEMLIMIT therefore does not bound: the binary's page
	// cache, kernel memory, cgo allocations. 0 means unmeasured; the memory
	// ratio alone then sets the headroom.
	Unmanaged int64
}

// Rounding says how a fractional CPU limit becomes GOMAXPROCS.
type Rounding int

const (
	// Floor rounds down (at least 1): never plan more parallelism than the
	// quota pays for, so a burst cannot spend the period's quota early.
	Floor Rounding = iota
	// Ceil rounds up, as Go's runtime does: more parallelism, more risk of
	// throttling.
	Ceil
)

// Options tune the policy. The zero value is the default.
type Options struct {
	// MemoryRatio is the share of the effective memory limit given to
	// GOMEMLIMIT when nothing better is known. 0 means DefaultMemoryRatio.
	MemoryRatio float64
	Rounding    Rounding
	// GOGC is "" to leave GOGC alone (the default), or a value such as
	// "off" or "200" to set together with GOMEMLIMIT: the "use the memory
	// you pay for" mode. It is only applied when a GOMEMLIMIT is planned.
	GOGC string
}

// DefaultMemoryRatio leaves 10% of the limit for memory outside the Go heap.
const DefaultMemoryRatio = 0.9

// Plan is the outcome.
type Plan struct {
	GOMAXPROCS int
	GOMEMLIMIT int64  // bytes, 0 for none
	GOGC       string // "" means leave it alone

	// RuntimeGOMAXPROCS is what Go's runtime would choose on its own, and
	// RuntimeFollowsCgroup whether that choice tracks the cgroup (Go ≥ 1.25
	// without GOMAXPROCS set and without containermaxprocs=0).
	RuntimeGOMAXPROCS    int
	RuntimeFollowsCgroup bool

	// GOMAXPROCSFromEnv and GOMEMLIMITFromEnv are set when an explicit
	// environment variable decided the value.
	GOMAXPROCSFromEnv bool
	GOMEMLIMITFromEnv bool

	Reasons  []string
	Warnings []string
}

func (p *Plan) reason(format string, a ...any) {
	p.Reasons = append(p.Reasons, fmt.Sprintf(format, a...))
}
func (p *Plan) warn(format string, a ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, a...))
}

// Compute turns limits into a plan.
func Compute(in Input, opt Options) Plan {
	var p Plan
	planCPU(&p, in, opt)
	planMemory(&p, in, opt)
	return p
}

func planCPU(p *Plan, in Input, opt Options) {
	cpu := in.Limits.CPU
	cpus := in.CPUs
	if cpu.CPUSet > 0 && (cpus == 0 || cpu.CPUSet < cpus) {
		cpus = cpu.CPUSet
	}
	if cpus <= 0 {
		cpus = 1
		p.warn("the number of usable CPUs is unknown; assuming 1")
	}

	// What gofit would choose.
	want := cpus
	switch {
	case cpu.Quota > 0:
		n := int(math.Floor(cpu.Quota + 1e-9))
		how := "rounded down"
		if opt.Rounding == Ceil {
			n, how = int(math.Ceil(cpu.Quota-1e-9)), "rounded up"
		}
		n = max(n, 1)
		if n < cpus {
			want = n
			p.reason("GOMAXPROCS=%d: CPU limit %s cores set on %s, %s", n, fmtCores(cpu.Quota), cpu.QuotaGroup, how)
		} else {
			p.reason("GOMAXPROCS=%d: the %d usable CPUs, fewer than the CPU limit of %s cores", cpus, cpus, fmtCores(cpu.Quota))
		}
	default:
		p.reason("GOMAXPROCS=%d: no CPU limit; %d usable CPUs", cpus, cpus)
	}

	// What Go's runtime would choose on its own.
	env, envSet := in.Env["GOMAXPROCS"]
	p.RuntimeGOMAXPROCS, p.RuntimeFollowsCgroup = runtimeDefault(in, cpus)

	p.GOMAXPROCS = want
	if envSet {
		n, err := strconv.Atoi(strings.TrimSpace(env))
		if err != nil || n < 1 {
			p.warn("GOMAXPROCS=%q is not a positive integer; Go's runtime ignores it", env)
		} else {
			p.GOMAXPROCS, p.GOMAXPROCSFromEnv = n, true
			p.RuntimeGOMAXPROCS, p.RuntimeFollowsCgroup = n, false
			p.Reasons[len(p.Reasons)-1] = fmt.Sprintf("GOMAXPROCS=%d: set in the environment, which wins (gofit would choose %d)", n, want)
			if cpu.Quota > 0 && float64(n) > math.Ceil(cpu.Quota-1e-9) {
				p.warn("GOMAXPROCS=%d from the environment is above the CPU limit of %s cores: %d threads spend each period's quota in %.0f%% of the period, then the whole process is throttled",
					n, fmtCores(cpu.Quota), n, 100*cpu.Quota/float64(n))
			}
			return
		}
	}
	if p.RuntimeGOMAXPROCS != want {
		switch {
		case !p.RuntimeFollowsCgroup:
			p.reason("Go's runtime alone would use %d (it does not read cgroup limits here: %s)", p.RuntimeGOMAXPROCS, whyNotAware(in))
		case cpu.Quota > 0 && cpu.LeafQuota != cpu.Quota:
			p.reason("Go's runtime alone would use %d: it reads only the leaf cgroup %s, not the tighter limit on %s", p.RuntimeGOMAXPROCS, cpu.Group, cpu.QuotaGroup)
		case cpu.Quota > 0 && cpu.Quota < 2 && p.RuntimeGOMAXPROCS == 2:
			p.reason("Go's runtime alone would use 2: it never goes below 2 for a CPU limit")
		case opt.Rounding == Floor && cpu.Quota > 0:
			p.reason("Go's runtime alone would use %d: it rounds the limit up", p.RuntimeGOMAXPROCS)
		default:
			p.reason("Go's runtime alone would use %d", p.RuntimeGOMAXPROCS)
		}
	}
	if cpu.Quota > 0 && cpu.Quota < 1 && p.RuntimeFollowsCgroup && p.RuntimeGOMAXPROCS >= 2 {
		p.warn("CPU limit %s cores is below 1 core but Go's runtime default is %d: %d threads spend each period's quota in %.0f%% of it",
			fmtCores(cpu.Quota), p.RuntimeGOMAXPROCS, p.RuntimeGOMAXPROCS, 100*cpu.Quota/float64(p.RuntimeGOMAXPROCS))
	}
}

// runtimeDefault mirrors Go's own GOMAXPROCS default: from Go 1.25, unless
// GODEBUG containermaxprocs=0, min(CPUs, max(2, ceil(leaf limit))).
func runtimeDefault(in Input, cpus int) (int, bool) {
	if !runtimeReadsCgroup(in) {
		return cpus, false
	}
	leaf := in.Limits.CPU.LeafQuota
	if leaf <= 0 {
		return cpus, true
	}
	return min(cpus, max(2, int(math.Ceil(leaf-1e-9)))), true
}

func runtimeReadsCgroup(in Input) bool {
	if !AtLeast(in.GoVersion, 1, 25) {
		return false
	}
	v, ok := godebug(in.Env["GODEBUG"], "containermaxprocs")
	if !ok {
		v, ok = godebug(in.DefaultGODEBUG, "containermaxprocs")
	}
	return !ok || v != "0"
}

func whyNotAware(in Input) string {
	if !AtLeast(in.GoVersion, 1, 25) {
		if in.GoVersion == "" {
			return "its Go version is unknown"
		}
		return in.GoVersion + " predates Go 1.25"
	}
	return "GODEBUG containermaxprocs=0, which a go.mod at go 1.24 or lower implies"
}

// godebug finds key in a comma-separated GODEBUG list; the last one wins.
func godebug(list, key string) (string, bool) {
	val, found := "", false
	for _, kv := range strings.Split(list, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// AtLeast reports whether a Go version string such as "go1.25.3" or
// "go1.26rc1" is at least major.minor.
func AtLeast(goVersion string, major, minor int) bool {
	v, ok := strings.CutPrefix(goVersion, "go")
	if !ok {
		return false
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi := leadingInt(parts[1])
	if err1 != nil || mi < 0 {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func leadingInt(s string) int {
	n, i := 0, 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int(s[i]-'0')
	}
	if i == 0 {
		return -1
	}
	return n
}

// Memory headroom beyond the ratio, when unmanaged memory is measured: a
// margin of 1/32 of the limit, at least 1 MiB, for growth between refreshes.
const (
	minMargin = 1 << 20
	// The heap gets at least this share of the limit, however much else the
	// cgroup holds; below it gofit warns that the container is too small.
	minHeapShare = 0.25
	// Below this a Go program cannot start: its runtime alone needs more.
	minGoMemory = 4 << 20
)

func planMemory(p *Plan, in Input, opt Options) {
	mem := in.Limits.Memory
	eff := mem.Effective()
	ratio := opt.MemoryRatio
	if ratio <= 0 || ratio >= 1 {
		ratio = DefaultMemoryRatio
	}

	envLimit, envSet := in.Env["GOMEMLIMIT"]
	if envSet {
		v, err := ParseMemLimit(envLimit)
		if err != nil {
			p.warn("GOMEMLIMIT=%q: %v; Go's runtime will refuse to start", envLimit, err)
		} else {
			p.GOMEMLIMIT, p.GOMEMLIMITFromEnv = v, true
			if v == 0 {
				p.reason("GOMEMLIMIT=off: set in the environment, which wins")
			} else {
				p.reason("GOMEMLIMIT=%s: set in the environment, which wins", FormatBytes(v))
			}
			if eff > 0 && (v == 0 || v >= eff) {
				p.warn("GOMEMLIMIT=%s from the environment is at or above the memory limit of %s: the heap will not shrink before the cgroup reclaims the binary's own pages or kills the process",
					envLimit, FormatBytes(eff))
			}
		}
	}

	if !p.GOMEMLIMITFromEnv {
		switch {
		case eff == 0:
			p.reason("GOMEMLIMIT unset: no memory limit")
		default:
			src := mem.MaxGroup
			kind := "memory.max"
			if mem.Version == 1 {
				kind = "memory limit"
			}
			if mem.High > 0 && (mem.Max == 0 || mem.High < mem.Max) {
				src, kind = mem.HighGroup, "memory.high"
			}
			limit := int64(float64(eff) * ratio)
			why := fmt.Sprintf("%.0f%% of the %s %s on %s", ratio*100, kind, FormatBytes(eff), src)
			if in.Unmanaged > 0 {
				margin := max(int64(minMargin), eff/32)
				if m := eff - in.Unmanaged - margin; m < limit {
					limit = m
					why = fmt.Sprintf("the %s %s on %s, less %s the runtime does not manage (page cache, kernel, cgo) and a %s margin",
						kind, FormatBytes(eff), src, FormatBytes(in.Unmanaged), FormatBytes(margin))
				}
			}
			if floor := int64(float64(eff) * minHeapShare); limit < floor {
				p.warn("the memory limit %s leaves little for the Go heap: %s is charged outside it; raise the limit", FormatBytes(eff), FormatBytes(in.Unmanaged))
				limit = floor
				why = fmt.Sprintf("%.0f%% of the %s %s, the least gofit gives the heap", minHeapShare*100, kind, FormatBytes(eff))
			}
			if eff < minGoMemory {
				p.warn("the memory limit %s is too small to run a Go program", FormatBytes(eff))
			}
			limit = max(min(limit, eff-1), 1) // never at or above the limit, never "none"
			p.GOMEMLIMIT = limit
			p.reason("GOMEMLIMIT=%s: %s", FormatBytes(limit), why)
		}
	}

	gogc, gogcSet := in.Env["GOGC"]
	switch {
	case gogcSet:
		if strings.TrimSpace(gogc) == "off" && p.GOMEMLIMIT == 0 {
			p.warn("GOGC=off without GOMEMLIMIT: the heap grows until the process is killed")
		}
	case opt.GOGC != "" && p.GOMEMLIMIT > 0:
		p.GOGC = opt.GOGC
		p.reason("GOGC=%s: collect less often and let GOMEMLIMIT bound the heap (use the memory you pay for)", opt.GOGC)
	case opt.GOGC != "":
		p.reason("GOGC left alone: GOGC=%s needs a GOMEMLIMIT and there is none", opt.GOGC)
	}
}

func fmtCores(c float64) string { return strconv.FormatFloat(c, 'f', -1, 64) }

// ParseMemLimit parses a GOMEMLIMIT value as Go's runtime does: an integer
// number of bytes with an optional B, KiB, MiB, GiB or TiB suffix, or "off"
// (returned as 0).
func ParseMemLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return 0, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	num := s
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("not a byte count (want e.g. 900MiB, 1GiB, 943718400 or off)")
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("too large")
	}
	return v * mult, nil
}

// FormatBytes renders bytes in the largest binary unit that keeps it exact
// to one decimal, as people write memory limits: "100MiB", "1.5GiB".
func FormatBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return trimFloat(float64(b)/(1<<30)) + "GiB"
	case b >= 1<<20:
		return trimFloat(float64(b)/(1<<20)) + "MiB"
	case b >= 1<<10:
		return trimFloat(float64(b)/(1<<10)) + "KiB"
	}
	return strconv.FormatInt(b, 10) + "B"
}

func trimFloat(f float64) string { return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) }

// EnvValue renders a GOMEMLIMIT for an environment variable: exact bytes,
// so that what the runtime gets is what the plan says.
func EnvValue(bytes int64) string { return strconv.FormatInt(bytes, 10) }

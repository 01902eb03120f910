// Package fit is gofit's one policy: from a container's limits to the Go
// runtime settings that fit it (GOMAXPROCS, GOMEMLIMIT, GOGC), each with
// the reason for it, and warnings for settings that fight the limits.
//
// It is pure: no I/O, no clock, no globals. It takes everything it looks at
// as input, including what Go's runtime will do by itself, and returns the
// whole decision, so that its callers apply it without second-guessing:
//
//   - in-process (the runtime library): Input.Running describes the running
//     runtime; Plan.GOMAXPROCSAction says whether to set GOMAXPROCS, hand it
//     back to the runtime or leave it alone.
//   - before exec (`gofit run`, the lab): Input.Running is nil; Plan.Export
//     and Plan.Unset say how to change the child's environment.
//   - with no process at all (the admission webhook): Policy.PlanContainer
//     takes a container's limits from its pod spec; Plan.Export is the env.
package fit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gofit-dev/gofit/cgroup"
)

// Input is what the policy looks at for a process in a cgroup.
type Input struct {
	Limits cgroup.Limits

	// CPUs is the number of CPUs the process may run on (its affinity mask,
	// which already reflects the cpuset). 0 means unknown.
	CPUs int

	// Vars holds the Go runtime's environment variables as the process sees
	// them (or will see them once started); absent keys are unset. Keys:
	// GOMAXPROCS, GOMEMLIMIT, GOGC, GODEBUG and MarkerVar.
	Vars map[string]string

	// GoVersion is the target's Go runtime version ("go1.26.1"), and
	// DefaultGODEBUG the GODEBUG defaults built into it from its go.mod
	// ("containermaxprocs=0,updatemaxprocs=0,..."). Both decide what Go's
	// runtime does with GOMAXPROCS on its own. Empty means unknown: assume a
	// runtime that does not read cgroups.
	GoVersion      string
	DefaultGODEBUG string

	// Unmanaged is memory charged to the cgroup on the process's behalf
	// that the Go runtime does not manage and GOMEMLIMIT therefore does not
	// bound: the binary's mapped file pages, kernel memory, cgo
	// allocations. 0 means unmeasured; the memory ratio alone then sets the
	// headroom.
	Unmanaged int64

	// Running describes the Go runtime of the running process the plan is
	// applied to in-process. Nil means a process about to be started with
	// Vars as its environment: the plan then lists the variables to export.
	Running *Running
}

// Running is the state of a running Go runtime that gofit manages in-process.
type Running struct {
	// GOMAXPROCS is runtime.GOMAXPROCS(0) now.
	GOMAXPROCS int
	// Managed is true while gofit has set GOMAXPROCS itself (which turns
	// the runtime's own updates off) and not handed it back.
	Managed bool
	// CanHandBack is true when runtime.SetDefaultGOMAXPROCS exists in the
	// running binary (built with Go ≥ 1.25).
	CanHandBack bool
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
	// GOMEMLIMIT when nothing better is known. 0 means DefaultMemoryRatio;
	// otherwise it must pass ValidMemoryRatio.
	MemoryRatio float64
	Rounding    Rounding
	// GOGC is "" to leave GOGC alone (the default), or a value that passes
	// ValidGOGC ("off", "200") to set together with GOMEMLIMIT: the "use the
	// memory you pay for" mode. It is only applied when a GOMEMLIMIT is
	// planned.
	GOGC string
}

// DefaultMemoryRatio leaves 10% of the limit for memory outside the Go heap.
const DefaultMemoryRatio = 0.9

// ErrBadOption is wrapped by the errors of New, ValidMemoryRatio and ValidGOGC.
var ErrBadOption = errors.New("bad option")

// ValidMemoryRatio accepts a ratio strictly between 0 and 1. NaN and the
// infinities fail, as do 0 and 1: a GOMEMLIMIT of nothing or of the whole
// limit is never what anyone wants.
func ValidMemoryRatio(r float64) error {
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 || r >= 1 {
		return fmt.Errorf("%w: memory ratio %g: want a number between 0 and 1, such as 0.9", ErrBadOption, r)
	}
	return nil
}

// ValidGOGC accepts "off" or a positive integer percentage such as "200",
// written as Go's runtime parses it.
func ValidGOGC(v string) error {
	if v == "off" {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 32); err != nil || n <= 0 || strconv.FormatInt(n, 10) != v {
		return fmt.Errorf("%w: GOGC %q: want off or a positive integer such as 200", ErrBadOption, v)
	}
	return nil
}

// Policy is the validated policy. The zero value uses the default options.
type Policy struct {
	opt Options
}

// New validates opt and returns the policy it describes.
func New(opt Options) (Policy, error) {
	if opt.MemoryRatio != 0 {
		if err := ValidMemoryRatio(opt.MemoryRatio); err != nil {
			return Policy{}, err
		}
	}
	if opt.Rounding != Floor && opt.Rounding != Ceil {
		return Policy{}, fmt.Errorf("%w: rounding %d: want fit.Floor or fit.Ceil", ErrBadOption, opt.Rounding)
	}
	if opt.GOGC != "" {
		if err := ValidGOGC(opt.GOGC); err != nil {
			return Policy{}, err
		}
	}
	return Policy{opt: opt}, nil
}

// Options are the policy's options, with defaults filled in.
func (p Policy) Options() Options {
	o := p.opt
	if o.MemoryRatio == 0 {
		o.MemoryRatio = DefaultMemoryRatio
	}
	return o
}

// Action is what to do with GOMAXPROCS in-process.
type Action int

const (
	// Leave GOMAXPROCS as it is: it already equals the plan, or an
	// environment variable decides it, or nothing runs in-process.
	Leave Action = iota
	// Set calls runtime.GOMAXPROCS(Plan.GOMAXPROCS), taking over from the
	// runtime's own updates.
	Set
	// HandBack calls runtime.SetDefaultGOMAXPROCS: the runtime's own value
	// equals the plan and it keeps it current by itself.
	HandBack
)

func (a Action) String() string {
	switch a {
	case Set:
		return "set"
	case HandBack:
		return "hand back"
	}
	return "leave"
}

// Plan is the outcome: the values, and how to apply them.
type Plan struct {
	// GOMAXPROCS is the value the process should run with; 0 means no
	// opinion (PlanContainer without a CPU limit).
	GOMAXPROCS int
	GOMEMLIMIT int64  // bytes, 0 for none
	GOGC       string // "" means leave it alone

	// RuntimeGOMAXPROCS is what Go's runtime would choose on its own (0 when
	// unknown), and RuntimeFollowsCgroup whether it keeps that choice
	// current as the cgroup's CPU limit changes (Go ≥ 1.25 with
	// containermaxprocs and updatemaxprocs on, and no GOMAXPROCS of the
	// user's in the environment).
	RuntimeGOMAXPROCS    int
	RuntimeFollowsCgroup bool

	// GOMAXPROCSFromEnv and GOMEMLIMITFromEnv are set when the user's own
	// environment variable decided the value (not one gofit exported).
	GOMAXPROCSFromEnv bool
	GOMEMLIMITFromEnv bool

	// GOMAXPROCSAction is what to do in-process (Leave outside it).
	GOMAXPROCSAction Action

	// Export and Unset change the environment of a process about to start:
	// set each variable in Export, replacing any value it has, and remove
	// each in Unset. Empty in-process.
	Export map[string]string
	Unset  []string

	// GOMAXPROCSReason and GOMEMLIMITReason say in a word where each value
	// comes from; Reasons says it in sentences.
	GOMAXPROCSReason Reason
	GOMEMLIMITReason Reason
	Reasons          []string

	// Warnings are settings that fight the limits; WarningCodes[i] is the
	// code of Warnings[i].
	Warnings     []string
	WarningCodes []Warning
}

// Reason is a fixed code for where a planned value comes from.
type Reason string

// The reasons. The set is fixed, so it can label metrics.
const (
	ReasonCPULimit  Reason = "cpu_limit"  // GOMAXPROCS: the CPU limit, rounded
	ReasonCPUs      Reason = "cpus"       // GOMAXPROCS: the usable CPUs (no limit, or a limit above them)
	ReasonEnv       Reason = "env"        // the user's own environment variable
	ReasonNoLimit   Reason = "no_limit"   // no limit: nothing planned
	ReasonRatio     Reason = "ratio"      // GOMEMLIMIT: the memory ratio of the limit
	ReasonUnmanaged Reason = "unmanaged"  // GOMEMLIMIT: the limit less unmanaged memory and a margin
	ReasonHeapFloor Reason = "heap_floor" // GOMEMLIMIT: the quarter of the limit the heap always gets
	ReasonTooSmall  Reason = "too_small"  // GOMEMLIMIT: the limit is too small for any
)

// Reasons lists every Reason.
var Reasons = []Reason{ReasonCPULimit, ReasonCPUs, ReasonEnv, ReasonNoLimit, ReasonRatio, ReasonUnmanaged, ReasonHeapFloor, ReasonTooSmall}

// Warning is a fixed code for a warning.
type Warning string

// The warnings. The set is fixed, so it can label metrics.
const (
	WarnCPUsUnknown            Warning = "cpus_unknown"
	WarnGOMAXPROCSInvalid      Warning = "gomaxprocs_env_invalid"
	WarnGOMAXPROCSAboveLimit   Warning = "gomaxprocs_env_above_limit"
	WarnRuntimeAboveLimit      Warning = "runtime_gomaxprocs_above_limit"
	WarnGOMEMLIMITInvalid      Warning = "gomemlimit_env_invalid"
	WarnGOMEMLIMITAtLimit      Warning = "gomemlimit_env_at_limit"
	WarnHeapSqueezed           Warning = "heap_squeezed"
	WarnLimitTooSmall          Warning = "memory_limit_too_small"
	WarnGOGCOffWithoutMemLimit Warning = "gogc_off_without_gomemlimit"
)

// Warnings lists every Warning.
var Warnings = []Warning{WarnCPUsUnknown, WarnGOMAXPROCSInvalid, WarnGOMAXPROCSAboveLimit, WarnRuntimeAboveLimit,
	WarnGOMEMLIMITInvalid, WarnGOMEMLIMITAtLimit, WarnHeapSqueezed, WarnLimitTooSmall, WarnGOGCOffWithoutMemLimit}

func (p *Plan) reason(format string, a ...any) {
	p.Reasons = append(p.Reasons, fmt.Sprintf(format, a...))
}

// warnUserAboveLimit warns when the user's GOMAXPROCS=n runs more threads
// than a CPU limit of cores allows: 2 at 1.5 cores (what a resourceFieldRef
// on limits.cpu gives) burns each period's quota in 75% of it. 1 is never
// above a limit, since no lower value exists, and neither is what the
// policy itself would choose (want: 2 at 1.5 cores with Ceil rounding).
func (p *Plan) warnUserAboveLimit(n, want int, cores float64) {
	if cores > 0 && n > 1 && n > want && float64(n) > cores+1e-9 {
		p.warn(WarnGOMAXPROCSAboveLimit, "GOMAXPROCS=%d from the environment is above the CPU limit of %s cores: %d threads spend each period's quota in %.0f%% of the period, then the whole process is throttled",
			n, fmtCores(cores), n, 100*cores/float64(n))
	}
}

func (p *Plan) warn(code Warning, format string, a ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, a...))
	p.WarningCodes = append(p.WarningCodes, code)
}

// Plan turns a process's limits and runtime into the whole decision.
func (pol Policy) Plan(in Input) Plan {
	opt := pol.Options()
	vars := readVars(in.Vars)
	var p Plan
	planCPU(&p, in, vars, opt)
	planMemory(&p, in.Limits.Memory, in.Unmanaged, vars, opt)
	planGOGC(&p, vars, opt)
	if in.Running != nil {
		p.GOMAXPROCSAction = procsAction(p, in.Running, vars)
	} else {
		export(&p, vars)
	}
	return p
}

func planCPU(p *Plan, in Input, vars vars, opt Options) {
	cpu := in.Limits.CPU
	cpus := in.CPUs
	if cpu.CPUSet > 0 && (cpus == 0 || cpu.CPUSet < cpus) {
		cpus = cpu.CPUSet
	}
	if cpus <= 0 {
		cpus = 1
		p.warn(WarnCPUsUnknown, "the number of usable CPUs is unknown; assuming 1")
	}

	// What gofit would choose.
	want, why := cpus, ReasonCPUs
	switch {
	case cpu.Quota > 0:
		n, how := roundCores(cpu.Quota, opt.Rounding)
		if n < cpus {
			want, why = n, ReasonCPULimit
			p.reason("GOMAXPROCS=%d: CPU limit %s cores set on %s, %s", n, fmtCores(cpu.Quota), cpu.QuotaGroup, how)
		} else {
			p.reason("GOMAXPROCS=%d: the %d usable CPUs, fewer than the CPU limit of %s cores", cpus, cpus, fmtCores(cpu.Quota))
		}
	default:
		p.reason("GOMAXPROCS=%d: no CPU limit; %d usable CPUs", cpus, cpus)
	}

	// What Go's runtime would choose on its own.
	rt := runtimeModel(in, vars, cpus)
	p.RuntimeGOMAXPROCS, p.RuntimeFollowsCgroup = rt.procs, rt.follows
	p.GOMAXPROCS, p.GOMAXPROCSReason = want, why

	if v := vars.procs; v.set && !v.gofits {
		if v.valid {
			n := int(v.n)
			p.GOMAXPROCS, p.GOMAXPROCSFromEnv, p.GOMAXPROCSReason = n, true, ReasonEnv
			p.Reasons[len(p.Reasons)-1] = fmt.Sprintf("GOMAXPROCS=%d: set in the environment, which wins (gofit would choose %d)", n, want)
			p.warnUserAboveLimit(n, want, cpu.Quota)
			return
		}
		p.warn(WarnGOMAXPROCSInvalid, "GOMAXPROCS=%q is not a positive integer; Go's runtime ignores it", v.raw)
	}
	if p.RuntimeGOMAXPROCS != want {
		switch {
		case !rt.cgroupAware:
			p.reason("Go's runtime alone would use %d (it does not read cgroup limits here: %s)", p.RuntimeGOMAXPROCS, whyNotAware(in, vars))
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
	if rt.cgroupAware && !rt.follows {
		p.reason("Go's runtime sizes GOMAXPROCS from the cgroup once but does not follow changes (%s)", whyNoUpdates(in, vars))
	}
	if cpu.Quota > 0 && cpu.Quota < 1 && rt.cgroupAware && p.RuntimeGOMAXPROCS >= 2 {
		p.warn(WarnRuntimeAboveLimit, "CPU limit %s cores is below 1 core but Go's runtime default is %d: %d threads spend each period's quota in %.0f%% of it",
			fmtCores(cpu.Quota), p.RuntimeGOMAXPROCS, p.RuntimeGOMAXPROCS, 100*cpu.Quota/float64(p.RuntimeGOMAXPROCS))
	}
}

// maxProcs bounds a GOMAXPROCS computed from a limit, so that absurd limits
// cannot overflow the conversion to int.
const maxProcs = math.MaxInt32

// roundCores turns a CPU limit in cores into a GOMAXPROCS of at least 1.
func roundCores(cores float64, r Rounding) (int, string) {
	// Limits come from integer quota/period, so a tiny epsilon absorbs the
	// division's error without moving a genuine fraction.
	cores = min(cores, maxProcs)
	if r == Ceil {
		return max(int(math.Ceil(cores-1e-9)), 1), "rounded up"
	}
	return max(int(math.Floor(cores+1e-9)), 1), "rounded down"
}

// procsAction decides what to do with GOMAXPROCS in a running process. The
// rule: leave GOMAXPROCS alone only while its current value equals the
// plan; hand it back to the runtime when the runtime's own choice equals
// the plan and the runtime keeps it current; otherwise set it.
func procsAction(p Plan, r *Running, vars vars) Action {
	if p.GOMAXPROCSFromEnv {
		return Leave // the user's explicit choice
	}
	// A GOMAXPROCS that gofit exported before exec made the runtime stop
	// following, just as a runtime.GOMAXPROCS call does.
	managed := r.Managed || vars.procs.set && vars.procs.gofits && vars.procs.valid
	if managed && r.CanHandBack && p.RuntimeFollowsCgroup && p.RuntimeGOMAXPROCS == p.GOMAXPROCS {
		return HandBack
	}
	if r.GOMAXPROCS != p.GOMAXPROCS {
		return Set
	}
	return Leave
}

// goRuntime is what Go's runtime does with GOMAXPROCS on its own.
type goRuntime struct {
	procs       int  // the value it picks
	cgroupAware bool // it reads the leaf cgroup's CPU limit (containermaxprocs)
	follows     bool // it re-reads and updates (updatemaxprocs) without a GOMAXPROCS of the user's
}

// runtimeModel mirrors Go's own GOMAXPROCS default: from Go 1.25, unless
// GODEBUG containermaxprocs=0, min(CPUs, max(2, ceil(leaf limit))), kept
// current unless updatemaxprocs=0 or the user set GOMAXPROCS. The value
// is what the runtime picks at start-up and after SetDefaultGOMAXPROCS.
func runtimeModel(in Input, vars vars, cpus int) goRuntime {
	var rt goRuntime
	rt.cgroupAware = AtLeast(in.GoVersion, 1, 25) && godebugOn(in, vars, "containermaxprocs")
	rt.procs = cpus
	if leaf := in.Limits.CPU.LeafQuota; rt.cgroupAware && leaf > 0 {
		rt.procs = min(cpus, max(2, int(math.Ceil(min(leaf, maxProcs)-1e-9))))
	}
	userProcs := vars.procs.set && vars.procs.valid && !vars.procs.gofits
	rt.follows = rt.cgroupAware && godebugOn(in, vars, "updatemaxprocs") && !userProcs
	if userProcs {
		rt.procs = int(vars.procs.n)
	}
	return rt
}

// godebugOn reports whether a GODEBUG setting that defaults to on since
// Go 1.25 is on: the environment's GODEBUG wins over the binary's defaults.
func godebugOn(in Input, vars vars, key string) bool {
	v, ok := godebug(vars.godebug, key)
	if !ok {
		v, ok = godebug(in.DefaultGODEBUG, key)
	}
	return !ok || v != "0"
}

func whyNotAware(in Input, vars vars) string {
	if !AtLeast(in.GoVersion, 1, 25) {
		if in.GoVersion == "" {
			return "its Go version is unknown"
		}
		return in.GoVersion + " predates Go 1.25"
	}
	if _, ok := godebug(vars.godebug, "containermaxprocs"); ok {
		return "GODEBUG containermaxprocs=0 in the environment"
	}
	return "GODEBUG containermaxprocs=0, which a go.mod at go 1.24 or lower implies"
}

func whyNoUpdates(in Input, vars vars) string {
	if vars.procs.set && vars.procs.valid {
		return "GOMAXPROCS is set in the environment"
	}
	if _, ok := godebug(vars.godebug, "updatemaxprocs"); ok {
		return "GODEBUG updatemaxprocs=0 in the environment"
	}
	return "GODEBUG updatemaxprocs=0, which a go.mod at go 1.24 or lower implies"
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
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9' && n < 1e6; i++ {
		n = n*10 + int(s[i]-'0')
	}
	if i == 0 {
		return -1
	}
	return n
}

// Memory headroom beyond the ratio, when unmanaged memory is known: a
// margin of 1/32 of the limit, at least 1 MiB, for growth between refreshes.
const (
	minMargin = 1 << 20
	// The heap gets at least this share of the limit, however much else the
	// cgroup holds; below it gofit warns that the container is too small.
	minHeapShare = 0.25
	// MinMemoryLimit is the smallest memory limit gofit plans a GOMEMLIMIT
	// for: below it a Go program cannot run (its runtime alone needs more),
	// and a quarter of it would be a meaningless GOMEMLIMIT.
	MinMemoryLimit = 4 << 20
)

func planMemory(p *Plan, mem cgroup.MemoryLimits, unmanaged int64, vars vars, opt Options) {
	eff := mem.Effective()
	if v := vars.memlimit; v.set && !v.gofits {
		if !v.valid {
			p.warn(WarnGOMEMLIMITInvalid, "GOMEMLIMIT=%q is not a byte count (want e.g. 900MiB, 1GiB, 943718400 or off): Go's runtime refuses to start with it", v.raw)
		} else {
			p.GOMEMLIMIT, p.GOMEMLIMITFromEnv, p.GOMEMLIMITReason = v.n, true, ReasonEnv
			if v.n == 0 {
				p.reason("GOMEMLIMIT=off: set in the environment, which wins")
			} else {
				p.reason("GOMEMLIMIT=%s: set in the environment, which wins", FormatBytes(v.n))
			}
			if eff > 0 && (v.n == 0 || v.n >= eff) {
				p.warn(WarnGOMEMLIMITAtLimit, "GOMEMLIMIT=%s from the environment is at or above the memory limit of %s: the heap will not shrink before the cgroup reclaims the binary's own pages or kills the process",
					v.raw, FormatBytes(eff))
			}
			return
		}
	}
	if eff == 0 {
		p.GOMEMLIMITReason = ReasonNoLimit
		p.reason("GOMEMLIMIT unset: no memory limit")
		return
	}
	src, kind := mem.MaxGroup, "memory limit"
	if mem.Version == 2 {
		kind = "memory.max"
	}
	if mem.High > 0 && (mem.Max == 0 || mem.High < mem.Max) {
		src, kind = mem.HighGroup, "memory.high"
	}
	if eff < MinMemoryLimit {
		p.GOMEMLIMITReason = ReasonTooSmall
		p.warn(WarnLimitTooSmall, "the memory limit %s is too small to run a Go program", FormatBytes(eff))
		p.reason("GOMEMLIMIT unset: the %s %s on %s is below the %s gofit needs to plan one", kind, FormatBytes(eff), src, FormatBytes(MinMemoryLimit))
		return
	}
	limit := int64(float64(eff) * opt.MemoryRatio)
	p.GOMEMLIMITReason = ReasonRatio
	why := fmt.Sprintf("%.0f%% of the %s %s on %s", opt.MemoryRatio*100, kind, FormatBytes(eff), src)
	if unmanaged > 0 {
		margin := max(int64(minMargin), eff/32)
		if m := eff - min(unmanaged, eff) - margin; m < limit {
			limit, p.GOMEMLIMITReason = m, ReasonUnmanaged
			why = fmt.Sprintf("the %s %s on %s, less %s the runtime does not manage (mapped files, kernel, cgo) and a %s margin",
				kind, FormatBytes(eff), src, FormatBytes(unmanaged), FormatBytes(margin))
		}
	}
	if floor := int64(float64(eff) * minHeapShare); limit < floor {
		p.warn(WarnHeapSqueezed, "the memory limit %s leaves little for the Go heap: %s is charged outside it; raise the limit", FormatBytes(eff), FormatBytes(unmanaged))
		limit, p.GOMEMLIMITReason = floor, ReasonHeapFloor
		why = fmt.Sprintf("%.0f%% of the %s %s, the least gofit gives the heap", minHeapShare*100, kind, FormatBytes(eff))
	}
	// The ratio is below 1 and the floor a quarter, so limit is in
	// [eff/4, eff) already; the clamp keeps that promise explicit.
	p.GOMEMLIMIT = min(limit, eff-1)
	p.reason("GOMEMLIMIT=%s: %s", FormatBytes(p.GOMEMLIMIT), why)
}

func planGOGC(p *Plan, vars vars, opt Options) {
	g := vars.gogc
	switch {
	case g.set && !g.gofits:
		if g.raw == "off" && p.GOMEMLIMIT == 0 {
			p.warn(WarnGOGCOffWithoutMemLimit, "GOGC=off without GOMEMLIMIT: the heap grows until the process is killed")
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
// (returned as 0). The runtime treats an empty GOMEMLIMIT as unset; that is
// for the caller to decide, so "" is an error here.
func ParseMemLimit(s string) (int64, error) {
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

// FormatMemLimit renders a GOMEMLIMIT for the environment: exact bytes, so
// that what the runtime gets is what the plan says.
func FormatMemLimit(bytes int64) string { return strconv.FormatInt(bytes, 10) }

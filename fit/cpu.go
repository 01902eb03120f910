package fit

import (
	"fmt"
	"go/version"
	"math"
	"strings"
)

// cpuFacts is what the GOMAXPROCS policy looks at, from a running
// container's cgroups (Plan) or from a pod spec (PlanContainer).
type cpuFacts struct {
	quota      float64 // the tightest CPU limit in cores, 0 for none
	quotaWhere string  // where that limit is set, for the reasons: "set on /pod", "in container app"
	leaf       float64 // the leaf cgroup's own limit: all Go's runtime reads
	request    float64 // the CPU request in cores, 0 for none or unknown
	// cpus is the number of CPUs the process may run on; 0 when it cannot
	// be known (a pod spec: the node is not chosen yet), which caps nothing.
	cpus int

	goVersion, defaultGODEBUG string
}

// planCPU decides GOMAXPROCS. Without a CPU limit it is the usable CPUs,
// or, opted in, the CPU request times Options.CPURequestFactor; from a pod
// spec without either it is left to Go's runtime on the node.
func planCPU(p *Plan, c cpuFacts, vars vars, opt Options) {
	const name = "GOMAXPROCS"
	capped := func(n int) int {
		if c.cpus > 0 {
			return min(n, c.cpus)
		}
		return n
	}
	want, why := c.cpus, ReasonCPUs
	switch {
	case c.quota > 0:
		n, how := roundCores(c.quota, opt.Rounding)
		if c.cpus == 0 || n < c.cpus {
			want, why = n, ReasonCPULimit
			p.reason(name, why, "GOMAXPROCS=%d: CPU limit %s cores %s, %s", n, fmtCores(c.quota), c.quotaWhere, how)
		} else {
			p.reason(name, why, "GOMAXPROCS=%d: the %d usable CPUs, fewer than the CPU limit of %s cores", c.cpus, c.cpus, fmtCores(c.quota))
		}
	case opt.CPURequestFactor > 0 && c.request > 0:
		n := requestProcs(c.request, opt)
		want, why = capped(n), ReasonCPURequest
		capNote := ""
		if want < n {
			capNote = fmt.Sprintf(", capped at the %d usable CPUs", c.cpus)
		}
		p.reason(name, why, "GOMAXPROCS=%d: no CPU limit; CPU request %s cores × %s, at least %d%s (opted in: bursts above the request are not used)",
			want, fmtCores(c.request), fmtCores(opt.CPURequestFactor), opt.minRequestProcs(), capNote)
	case c.cpus > 0:
		p.reason(name, why, "GOMAXPROCS=%d: no CPU limit; %d usable CPUs", c.cpus, c.cpus)
	default:
		want, why = 0, ReasonNoLimit
		p.reason(name, why, "GOMAXPROCS unset: no CPU limit; Go's runtime sizes it on the node")
	}

	// What Go's runtime would choose on its own.
	rt := runtimeModel(c, vars)
	p.RuntimeGOMAXPROCS, p.RuntimeFollowsCgroup = rt.procs, rt.follows
	p.GOMAXPROCS, p.GOMAXPROCSReason = want, why

	if v := vars.procs; v.set && !v.gofits {
		if v.valid {
			n := int(v.n)
			p.GOMAXPROCS, p.GOMAXPROCSFromEnv, p.GOMAXPROCSReason = n, true, ReasonEnv
			text := fmt.Sprintf("GOMAXPROCS=%d: set in the environment, which wins", n)
			if want > 0 {
				text += fmt.Sprintf(" (gofit would choose %d)", want)
			}
			p.Reasons[len(p.Reasons)-1] = Note{Var: name, Code: string(ReasonEnv), Text: text}
			p.warnUserAboveLimit(n, want, c.quota)
			return
		}
		p.warn(WarnGOMAXPROCSInvalid, "GOMAXPROCS=%q is not a positive integer; Go's runtime ignores it", v.raw)
	}
	if want > 0 && p.RuntimeGOMAXPROCS > 0 && p.RuntimeGOMAXPROCS != want {
		r := ReasonRuntime
		switch {
		case !rt.cgroupAware:
			p.reason(name, r, "Go's runtime alone would use %d (it does not read cgroup limits here: %s)", p.RuntimeGOMAXPROCS, whyNotAware(c, vars))
		case c.quota > 0 && c.leaf != c.quota:
			p.reason(name, r, "Go's runtime alone would use %d: it reads only the leaf cgroup, not the tighter limit %s", p.RuntimeGOMAXPROCS, c.quotaWhere)
		case c.quota > 0 && c.quota < 2 && p.RuntimeGOMAXPROCS == 2:
			p.reason(name, r, "Go's runtime alone would use 2: it never goes below 2 for a CPU limit")
		case opt.Rounding == Floor && c.quota > 0:
			p.reason(name, r, "Go's runtime alone would use %d: it rounds the limit up", p.RuntimeGOMAXPROCS)
		default:
			p.reason(name, r, "Go's runtime alone would use %d", p.RuntimeGOMAXPROCS)
		}
	}
	if want > 0 && rt.cgroupAware && !rt.follows {
		p.reason(name, ReasonRuntime, "Go's runtime sizes GOMAXPROCS from the cgroup once but does not follow changes (%s)", whyNoUpdates(vars))
	}
	if c.quota > 0 && c.quota < 1 && rt.cgroupAware && p.RuntimeGOMAXPROCS >= 2 {
		p.warn(WarnRuntimeAboveLimit, "CPU limit %s cores is below 1 core but Go's runtime default is %d: %d threads spend each period's quota in %.0f%% of it",
			fmtCores(c.quota), p.RuntimeGOMAXPROCS, p.RuntimeGOMAXPROCS, 100*c.quota/float64(p.RuntimeGOMAXPROCS))
	}
}

// requestProcs is max(minimum, ceil(request × factor)), bounded.
func requestProcs(request float64, opt Options) int {
	x := min(request*opt.CPURequestFactor, maxProcs)
	return max(opt.minRequestProcs(), int(math.Ceil(x-1e-9)))
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
	procs       int  // the value it picks, 0 when unknown (the node's CPUs, from a pod spec)
	cgroupAware bool // it reads the leaf cgroup's CPU limit (containermaxprocs)
	follows     bool // it re-reads and updates (updatemaxprocs) without a GOMAXPROCS of the user's
}

// cgroupAwareGo is the first Go release whose runtime sizes GOMAXPROCS
// from the cgroup's CPU limit.
const cgroupAwareGo = "go1.25"

// readsCgroups reports whether a Go release reads the cgroup's CPU limit.
// Build info writes experiments after a space ("go1.25.1 X:boringcrypto"),
// which go/version does not strip.
func readsCgroups(goVersion string) bool {
	v, _, _ := strings.Cut(goVersion, " ")
	return version.Compare(v, cgroupAwareGo) >= 0
}

// runtimeModel mirrors Go's own GOMAXPROCS default: from Go 1.25, unless
// GODEBUG containermaxprocs=0, min(CPUs, max(2, ceil(leaf limit))), kept
// current unless updatemaxprocs=0 or the user set GOMAXPROCS. The value
// is what the runtime picks at start-up and after SetDefaultGOMAXPROCS.
func runtimeModel(c cpuFacts, vars vars) goRuntime {
	var rt goRuntime
	rt.cgroupAware = readsCgroups(c.goVersion) && godebugOn(c, vars, "containermaxprocs")
	rt.procs = c.cpus
	if rt.cgroupAware && c.leaf > 0 {
		rt.procs = max(2, int(math.Ceil(min(c.leaf, maxProcs)-1e-9)))
		if c.cpus > 0 {
			rt.procs = min(c.cpus, rt.procs)
		}
	}
	userProcs := vars.procs.set && vars.procs.valid && !vars.procs.gofits
	rt.follows = rt.cgroupAware && godebugOn(c, vars, "updatemaxprocs") && !userProcs
	if userProcs {
		rt.procs = int(vars.procs.n)
	}
	return rt
}

// godebugOn reports whether a GODEBUG setting that defaults to on since
// Go 1.25 is on: the environment's GODEBUG wins over the binary's defaults.
func godebugOn(c cpuFacts, vars vars, key string) bool {
	v, ok := godebug(vars.godebug, key)
	if !ok {
		v, ok = godebug(c.defaultGODEBUG, key)
	}
	return !ok || v != "0"
}

func whyNotAware(c cpuFacts, vars vars) string {
	if !readsCgroups(c.goVersion) {
		if c.goVersion == "" {
			return "its Go version is unknown"
		}
		return c.goVersion + " predates Go 1.25"
	}
	if _, ok := godebug(vars.godebug, "containermaxprocs"); ok {
		return "GODEBUG containermaxprocs=0 in the environment"
	}
	return "GODEBUG containermaxprocs=0, which a go.mod at go 1.24 or lower implies"
}

func whyNoUpdates(vars vars) string {
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

package fit

import (
	"math"

	"github.com/gofit-dev/gofit/cgroup"
)

// Container is what the admission webhook knows about a container before
// any process runs: the limits in its pod spec and the environment it sets.
// Nothing about the node enters: not its CPU count, not its cgroups.
type Container struct {
	// CPULimit is resources.limits.cpu in cores; 0 for none.
	CPULimit float64
	// MemoryLimit is resources.limits.memory in bytes; 0 for none.
	MemoryLimit int64
	// NonGo is the memory the container charges outside the Go heap (the
	// binary's mapped pages, kernel memory, cgo); 0 means DefaultNonGo.
	NonGo int64
	// Vars holds the container's environment variables with literal
	// values (GOMAXPROCS, GOMEMLIMIT, GOGC, GODEBUG, MarkerVar); a user's
	// value wins over the plan, as it does everywhere.
	Vars map[string]string
}

// DefaultNonGo is the allowance PlanContainer makes for memory outside the
// Go heap when the caller knows no better: the mapped text of a typical
// service binary (about 14 MiB) plus 2 MiB of kernel memory. It only
// lowers GOMEMLIMIT below the memory ratio in containers under about
// 180 MiB; above that the ratio leaves more room.
const DefaultNonGo = 16 << 20

// containerGroup names the source of a pod-spec limit in reasons.
const containerGroup = "the container's resources.limits"

// PlanContainer is the policy for a container that is not running yet,
// from its pod spec alone (the admission webhook's entry point):
//
//   - GOMAXPROCS = floor(CPULimit), at least 1 (Options.Rounding Ceil rounds
//     up); none without a CPU limit, so the Go runtime sizes it on the node.
//   - GOMEMLIMIT = min(ratio × MemoryLimit, MemoryLimit − NonGo − margin),
//     never below a quarter of the limit and always below it; none without
//     a memory limit or under MinMemoryLimit.
//   - GOGC only in the opt-in mode (Options.GOGC), with a GOMEMLIMIT.
//
// The user's own GOMAXPROCS, GOMEMLIMIT and GOGC in Vars win. Plan.Export
// is the environment to add to the container (MarkerVar included, so that
// the runtime library inside can take the values over as limits change);
// Plan.Unset the variables to remove.
func (pol Policy) PlanContainer(c Container) Plan {
	opt := pol.Options()
	vars := readVars(c.Vars)
	var p Plan

	cores := c.CPULimit
	if math.IsNaN(cores) || cores < 0 {
		cores = 0
	}
	want := 0
	if cores > 0 {
		n, how := roundCores(cores, opt.Rounding)
		want, p.GOMAXPROCSReason = n, ReasonCPULimit
		p.reason("GOMAXPROCS=%d: CPU limit %s cores in %s, %s", n, fmtCores(cores), containerGroup, how)
	} else {
		p.GOMAXPROCSReason = ReasonNoLimit
		p.reason("GOMAXPROCS unset: no CPU limit; Go's runtime sizes it on the node")
	}
	p.GOMAXPROCS = want
	if v := vars.procs; v.set && !v.gofits {
		if v.valid {
			p.GOMAXPROCS, p.GOMAXPROCSFromEnv, p.GOMAXPROCSReason = int(v.n), true, ReasonEnv
			p.Reasons[0] = "GOMAXPROCS=" + v.raw + ": set in the environment, which wins"
			p.warnUserAboveLimit(int(v.n), want, cores)
		} else {
			p.warn(WarnGOMAXPROCSInvalid, "GOMAXPROCS=%q is not a positive integer; Go's runtime ignores it", v.raw)
		}
	}

	nonGo := c.NonGo
	if nonGo <= 0 {
		nonGo = DefaultNonGo
	}
	mem := cgroup.MemoryLimits{Max: max(c.MemoryLimit, 0), MaxGroup: containerGroup}
	planMemory(&p, mem, nonGo, vars, opt)
	planGOGC(&p, vars, opt)
	export(&p, vars)
	return p
}

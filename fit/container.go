package fit

import (
	"math"

	"github.com/gofit-dev/gofit/cgroup"
)

// Container is what the admission webhook knows about a container before
// any process runs: the limits in its pod spec, the environment it sets,
// and what the caller assumes about the image. Nothing about the node
// enters: not its CPU count, not its cgroups.
type Container struct {
	// CPULimit is the tightest CPU limit in cores (the container's or the
	// pod's); 0 for none. LeafCPULimit is the container's own, the only one
	// Go's runtime reads (0 for none).
	CPULimit     float64
	LeafCPULimit float64
	// CPURequest is resources.requests.cpu in cores; 0 for none. Only
	// Options.CPURequestFactor uses it, when there is no CPU limit.
	CPURequest float64
	// MemoryLimit is the tightest memory limit in bytes; 0 for none.
	MemoryLimit int64
	// CPUSource and MemorySource name where each limit is set, for the
	// reasons ("container app", "the pod"); empty means the container's
	// resources.limits.
	CPUSource, MemorySource string
	// NonGo is the memory the container charges outside the Go heap that
	// cannot be reclaimed (cgo, off-heap caches, kernel memory, the hot
	// part of the binary's pages), as the user declares it; 0 or less means
	// none is known and GOMEMLIMIT is the memory ratio.
	NonGo int64
	// Vars holds the container's environment variables as its Go runtime
	// will see them, with literal values (GOMAXPROCS, GOMEMLIMIT, GOGC,
	// GODEBUG, MarkerVar); a user's value wins over the plan, as it does
	// everywhere, and wrong values are warned about.
	Vars map[string]string
	// GoVersion is the Go release the caller assumes the image was built
	// with ("go1.25"): it decides whether Go's runtime reads the CPU limit
	// itself (and never goes below 2 for it). Empty means unknown: a
	// runtime that does not read cgroups.
	GoVersion string
}

// PlanContainer is the policy for a container that is not running yet,
// from its pod spec alone (the admission webhook's entry point):
//
//   - GOMAXPROCS = floor(CPULimit), at least 1 (Options.Rounding Ceil rounds
//     up); without a CPU limit, opted in, from CPURequest; otherwise none,
//     so the Go runtime sizes it on the node.
//   - GOMEMLIMIT = min(ratio × MemoryLimit, MemoryLimit − NonGo − margin),
//     never below a quarter of the limit and always below it; none without
//     a memory limit or under MinMemoryLimit.
//   - GOGC only in the opt-in mode (Options.GOGC), with a GOMEMLIMIT.
//
// The user's own GOMAXPROCS, GOMEMLIMIT and GOGC in Vars win. Plan.Export
// is the environment to add to the container (MarkerVar included, so that
// the runtime library inside can take the values over as limits change);
// Plan.Unset the variables to remove. Plan.Warnings are the container's
// mistakes as Vars and GoVersion describe them.
func (pol Policy) PlanContainer(c Container) Plan {
	opt := pol.Options()
	vars := readVars(c.Vars)
	var p Plan
	clean := func(x float64) float64 {
		if math.IsNaN(x) || x < 0 {
			return 0
		}
		return x
	}
	where := func(src string) string {
		if src == "" {
			return "in the container's resources.limits"
		}
		return "set on " + src
	}
	planCPU(&p, cpuFacts{
		quota: clean(c.CPULimit), quotaWhere: where(c.CPUSource), leaf: clean(c.LeafCPULimit),
		request: clean(c.CPURequest), goVersion: c.GoVersion,
	}, vars, opt)

	// A declared allowance is taken as memory that cannot be reclaimed;
	// without one nothing is known before the process runs, and the plan
	// is the ratio.
	nonGo := NonGo{Anon: max(c.NonGo, 0)}
	group := c.MemorySource
	if group == "" {
		group = "the container's resources.limits"
	}
	mem := cgroup.MemoryLimits{Max: max(c.MemoryLimit, 0), MaxGroup: group}
	planMemory(&p, mem, nonGo, vars, opt)
	planGOGC(&p, vars, opt)
	// GoVersion is an assumption about the image: GOMAXPROCS is exported
	// even where that runtime would choose the same by itself.
	export(&p, vars, false)
	return p
}

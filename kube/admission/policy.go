package admission

// This is the only file that calls the fit package: the rest of the webhook
// sees limits in, values and reasons out. fit's API may change under it; only
// this file then needs to follow.

import (
	"strconv"
	"strings"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

// assumedCPUs stands in for the node's CPU count, which the webhook cannot
// know and which must play no part: fit caps GOMAXPROCS at the usable CPUs
// (and warns when they are unknown), so the webhook passes a count no CPU
// limit reaches. The plan then follows the pod's limits alone, never the
// CPUs of the machine the webhook itself runs on.
const assumedCPUs = 1 << 16

// assumedGoVersion is the runtime the webhook assumes a container runs: it
// cannot see inside the image. Go ≥ 1.25 reads the CPU limit on its own and
// never goes below 2, which is what the sub-core warning is about.
const assumedGoVersion = "go1.25"

// limits are a container's effective limits as the pod spec sets them.
type limits struct {
	CPUMilli     int64 // tightest CPU limit (container or pod level), 0 for none
	LeafCPUMilli int64 // the container's own CPU limit, all Go's runtime reads
	Memory       int64 // tightest memory limit in bytes, 0 for none
	CPUSource    string
	MemorySource string
}

// planned is what the policy would set for a container with no Go runtime
// variables of its own. An empty value means none.
type planned struct {
	GOMAXPROCS        string
	GOMAXPROCSReasons []string
	GOMEMLIMIT        string
	GOMEMLIMITReasons []string
}

func (l limits) input(env map[string]string, nonGo int64) fit.Input {
	in := fit.Input{
		CPUs:      assumedCPUs,
		Vars:      env,
		GoVersion: assumedGoVersion,
		Unmanaged: nonGo,
	}
	if l.CPUMilli > 0 {
		in.Limits.CPU.Quota = float64(l.CPUMilli) / 1000
		in.Limits.CPU.QuotaGroup = l.CPUSource
		in.Limits.CPU.LeafQuota = float64(l.LeafCPUMilli) / 1000
	}
	if l.Memory > 0 {
		in.Limits.Memory = cgroup.MemoryLimits{Version: 2, Max: l.Memory, MaxGroup: l.MemorySource}
	}
	return in
}

// plan asks fit what it would set for these limits. Each variable is planned
// only where its limit exists: with no CPU limit fit would fall back to the
// (assumed) CPU count, which means nothing in a pod spec.
func plan(l limits, nonGo int64, pol fit.Policy) planned {
	p := pol.PlanContainer(fit.Container{
		CPULimit:    float64(l.CPUMilli) / 1000,
		MemoryLimit: l.Memory,
		NonGo:       nonGo,
	})
	var out planned
	for _, r := range p.Reasons {
		// fit's reasons name the variable they explain first; the ones
		// about Go's own default belong to GOMAXPROCS.
		if strings.HasPrefix(r, "GOMEMLIMIT") || strings.HasPrefix(r, "GOGC") {
			out.GOMEMLIMITReasons = append(out.GOMEMLIMITReasons, r)
		} else {
			out.GOMAXPROCSReasons = append(out.GOMAXPROCSReasons, r)
		}
	}
	if l.CPUMilli > 0 {
		out.GOMAXPROCS = strconv.Itoa(p.GOMAXPROCS)
	} else {
		out.GOMAXPROCSReasons = nil
	}
	if l.Memory > 0 && p.GOMEMLIMIT > 0 {
		out.GOMEMLIMIT = fit.FormatMemLimit(p.GOMEMLIMIT)
	} else {
		out.GOMEMLIMITReasons = nil
	}
	return out
}

// mistakes are fit's warnings for a container whose Go runtime will see env
// (GOMAXPROCS, GOMEMLIMIT, GOGC, GODEBUG as known): a GOMAXPROCS above the
// CPU limit, a GOMEMLIMIT at or above the memory limit, GOGC=off with no
// memory limit, a sub-core limit Go alone would run at GOMAXPROCS=2, and
// malformed values.
func mistakes(l limits, env map[string]string, nonGo int64, pol fit.Policy) []string {
	return pol.Plan(l.input(env, nonGo)).Warnings
}

package admission

// This is the only file that calls the fit package: the rest of the webhook
// sees limits in, values and reasons out. fit's API may change under it; only
// this file then needs to follow.

import (
	"strconv"

	"github.com/gofit-dev/gofit/fit"
)

// DefaultGoVersion is the Go release NewMutator assumes an image was built
// with, as WithGoVersion can say otherwise: the webhook cannot see inside
// an image, and this is the oldest release the Go team still supports.
// From it on, Go's runtime reads the CPU limit on its own and never goes
// below 2, which is what the sub-core warning is about.
const DefaultGoVersion = "go1.25"

// planner is fit's policy as one pod gets it, with the Go release assumed
// for its images ("" for unknown).
type planner struct {
	pol       fit.Policy
	goVersion string
}

// limits are a container's effective limits as the pod spec sets them.
type limits struct {
	CPUMilli     int64 // tightest CPU limit (container or pod level), 0 for none
	LeafCPUMilli int64 // the container's own CPU limit, all Go's runtime reads
	// CPURequestMilli is the container's CPU request, used only without a
	// CPU limit and when the policy opts in (fit.Options.CPURequestFactor).
	CPURequestMilli int64
	Memory          int64 // tightest memory limit in bytes, 0 for none
	CPUSource       string
	MemorySource    string
}

// planned is what the policy would set for a container with no Go runtime
// variables of its own. An empty value means none.
type planned struct {
	GOMAXPROCS        string
	GOMAXPROCSReasons []string
	GOMEMLIMIT        string
	GOMEMLIMITReasons []string
}

// container is the pod spec's view of a container for fit: its limits,
// the environment its Go runtime will see, and the Go release assumed.
func (l limits) container(env map[string]string, nonGo int64, goVersion string) fit.Container {
	return fit.Container{
		CPULimit:     float64(l.CPUMilli) / 1000,
		LeafCPULimit: float64(l.LeafCPUMilli) / 1000,
		CPURequest:   float64(l.CPURequestMilli) / 1000,
		CPUSource:    l.CPUSource,
		MemoryLimit:  l.Memory,
		MemorySource: l.MemorySource,
		NonGo:        nonGo,
		Vars:         env,
		GoVersion:    goVersion,
	}
}

// plan asks fit what it would set for these limits. Each variable is planned
// only where its limit exists: with no CPU limit fit would fall back to the
// (assumed) CPU count, which means nothing in a pod spec.
func plan(l limits, nonGo int64, pl planner) planned {
	p := pl.pol.PlanContainer(l.container(nil, nonGo, pl.goVersion))
	var out planned
	// fit's notes name their variable; GOGC goes with GOMEMLIMIT, as it
	// is only ever set beside it.
	out.GOMAXPROCSReasons = fit.Texts(fit.NotesFor(p.Reasons, "GOMAXPROCS"))
	out.GOMEMLIMITReasons = append(fit.Texts(fit.NotesFor(p.Reasons, "GOMEMLIMIT")), fit.Texts(fit.NotesFor(p.Reasons, "GOGC"))...)
	if p.GOMAXPROCS > 0 && (p.GOMAXPROCSReason == fit.ReasonCPULimit || p.GOMAXPROCSReason == fit.ReasonCPURequest) {
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
func mistakes(l limits, env map[string]string, nonGo int64, pl planner) []string {
	return fit.Texts(pl.pol.PlanContainer(l.container(env, nonGo, pl.goVersion)).Warnings)
}

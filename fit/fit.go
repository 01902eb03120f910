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
	"github.com/gofit-dev/gofit/cgroup"
)

// Input is what the policy looks at for a process in a cgroup.
type Input struct {
	Limits cgroup.Limits

	// CPUs is the number of CPUs the process may run on (its affinity mask,
	// which already reflects the cpuset). 0 means unknown.
	CPUs int

	// CPURequest is the container's CPU request in cores, as the cgroup's
	// CPU weight shows it (cgroup.CPULimits.RequestCores); 0 for none or
	// unknown. Only Options.CPURequestFactor uses it.
	CPURequest float64

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

	// NonGo is memory charged to the cgroup on the process's behalf that
	// the Go runtime does not manage and GOMEMLIMIT therefore does not
	// bound, in its parts. Zero means unmeasured; the memory ratio alone
	// then sets the headroom.
	NonGo NonGo

	// Running describes the Go runtime of the running process the plan is
	// applied to in-process. Nil means a process about to be started with
	// Vars as its environment: the plan then lists the variables to export.
	Running *Running
}

// NewInput is the input for a process under limits l that may run on cpus
// CPUs (0: unknown), with vars as its Go runtime's environment. The CPU
// request is the one l's CPU shares or weight encode, as the kubelet
// writes it. gofit builds every input through target.Binary.Input, which
// adds an unknown CPU count's fallback, the runtime (GoVersion,
// DefaultGODEBUG) and the non-Go memory; the in-process plan adds Running.
func NewInput(l cgroup.Limits, cpus int, vars map[string]string) Input {
	return Input{Limits: l, CPUs: cpus, CPURequest: l.CPU.RequestCores(), Vars: vars}
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
	// comes from; Reasons says it in notes, each naming its variable, with a
	// Reason as its code.
	GOMAXPROCSReason Reason
	GOMEMLIMITReason Reason
	Reasons          []Note

	// Warnings are settings that fight the limits, each with a Warning as
	// its code.
	Warnings []Note
}

// Plan turns a process's limits and runtime into the whole decision.
func (pol Policy) Plan(in Input) Plan {
	opt := pol.Options()
	vars := readVars(in.Vars)
	var p Plan
	planCPU(&p, in.cpuFacts(&p), vars, opt)
	planMemory(&p, in.Limits.Memory, in.NonGo, vars, opt)
	planGOGC(&p, vars, opt)
	if in.Running != nil {
		p.GOMAXPROCSAction = procsAction(p, in.Running, vars)
	} else {
		export(&p, vars, true)
	}
	return p
}

// cpuFacts are a running container's CPU facts; an unknown CPU count is
// warned about and taken as 1.
func (in Input) cpuFacts(p *Plan) cpuFacts {
	cpu := in.Limits.CPU
	cpus := in.CPUs
	if cpu.CPUSet > 0 && (cpus == 0 || cpu.CPUSet < cpus) {
		cpus = cpu.CPUSet
	}
	if cpus <= 0 {
		cpus = 1
		p.warn(WarnCPUsUnknown, "the number of usable CPUs is unknown; assuming 1")
	}
	return cpuFacts{
		quota: cpu.Quota, quotaWhere: "set on " + cpu.QuotaGroup, leaf: cpu.LeafQuota,
		request: in.CPURequest, cpus: cpus,
		goVersion: in.GoVersion, defaultGODEBUG: in.DefaultGODEBUG,
	}
}

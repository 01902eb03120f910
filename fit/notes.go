package fit

import "fmt"

// Note is one statement a plan makes: which variable it is about, a code
// from a fixed set, and a sentence for people. The webhook, the runtime
// library, `gofit run` and `gofit inspect` all show the same notes, so they
// branch on Var and Code, never on the text.
type Note struct {
	// Var is the variable the note is about: GOMAXPROCS, GOMEMLIMIT or GOGC.
	Var string `json:"var"`
	// Code is a Reason (in Plan.Reasons) or a Warning (in Plan.Warnings).
	Code string `json:"code"`
	Text string `json:"text"`
}

// String is the sentence.
func (n Note) String() string { return n.Text }

// Reason is a fixed code for where a planned value comes from.
type Reason string

// The reasons. The set is fixed, so it can label metrics.
const (
	ReasonCPULimit   Reason = "cpu_limit"   // GOMAXPROCS: the CPU limit, rounded
	ReasonCPUs       Reason = "cpus"        // GOMAXPROCS: the usable CPUs (no limit, or a limit above them)
	ReasonCPURequest Reason = "cpu_request" // GOMAXPROCS: the CPU request times a factor (opt-in, no limit)
	ReasonEnv        Reason = "env"         // the user's own environment variable
	ReasonNoLimit    Reason = "no_limit"    // no limit: nothing planned
	ReasonRatio      Reason = "ratio"       // GOMEMLIMIT: the memory ratio of the limit
	ReasonUnmanaged  Reason = "unmanaged"   // GOMEMLIMIT: the limit less unmanaged memory and a margin
	ReasonHeapFloor  Reason = "heap_floor"  // GOMEMLIMIT: the quarter of the limit the heap always gets
	ReasonTooSmall   Reason = "too_small"   // GOMEMLIMIT: the limit is too small for any
	ReasonRuntime    Reason = "runtime"     // GOMAXPROCS: what Go's runtime does on its own (an explanation, never a value's reason)
	ReasonOptIn      Reason = "opt_in"      // GOGC: set by the "use the memory you pay for" option
)

// Reasons lists every Reason, in a new slice.
func Reasons() []Reason {
	return []Reason{ReasonCPULimit, ReasonCPUs, ReasonCPURequest, ReasonEnv, ReasonNoLimit, ReasonRatio,
		ReasonUnmanaged, ReasonHeapFloor, ReasonTooSmall, ReasonRuntime, ReasonOptIn}
}

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

// Warnings lists every Warning, in a new slice.
func Warnings() []Warning {
	return []Warning{WarnCPUsUnknown, WarnGOMAXPROCSInvalid, WarnGOMAXPROCSAboveLimit, WarnRuntimeAboveLimit,
		WarnGOMEMLIMITInvalid, WarnGOMEMLIMITAtLimit, WarnHeapSqueezed, WarnLimitTooSmall, WarnGOGCOffWithoutMemLimit}
}

// warningVar is the variable each warning is about.
var warningVar = map[Warning]string{
	WarnCPUsUnknown: "GOMAXPROCS", WarnGOMAXPROCSInvalid: "GOMAXPROCS", WarnGOMAXPROCSAboveLimit: "GOMAXPROCS",
	WarnRuntimeAboveLimit: "GOMAXPROCS", WarnGOMEMLIMITInvalid: "GOMEMLIMIT", WarnGOMEMLIMITAtLimit: "GOMEMLIMIT",
	WarnHeapSqueezed: "GOMEMLIMIT", WarnLimitTooSmall: "GOMEMLIMIT", WarnGOGCOffWithoutMemLimit: "GOGC",
}

// NotesFor are the notes about one variable, in order.
func NotesFor(notes []Note, name string) []Note {
	var out []Note
	for _, n := range notes {
		if n.Var == name {
			out = append(out, n)
		}
	}
	return out
}

// Texts are the notes' sentences.
func Texts(notes []Note) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		out[i] = n.Text
	}
	return out
}

func (p *Plan) reason(name string, code Reason, format string, a ...any) {
	p.Reasons = append(p.Reasons, Note{Var: name, Code: string(code), Text: fmt.Sprintf(format, a...)})
}

func (p *Plan) warn(code Warning, format string, a ...any) {
	p.Warnings = append(p.Warnings, Note{Var: warningVar[code], Code: string(code), Text: fmt.Sprintf(format, a...)})
}

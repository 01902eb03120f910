package fit

import (
	"slices"
	"strconv"
	"strings"
)

// MarkerVar is the environment variable in which gofit records the Go
// runtime variables it exported for a process (`gofit run`, the admission
// webhook), as a comma-separated list such as "GOMAXPROCS=2,GOMEMLIMIT=943718400".
// A variable whose value still equals its entry there is gofit's choice, not
// the user's: the runtime library inside the process takes it over and keeps
// following the limits, where it would leave a user's explicit value alone.
const MarkerVar = "GOFIT_RUN"

// The Go runtime variables the policy reads and may export, in export order.
var goVars = []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC"}

// VarNames are the environment variables the policy reads (Input.Vars), in
// a new slice.
func VarNames() []string { return []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", MarkerVar} }

// varState is one Go runtime variable as Go's runtime would read it.
type varState struct {
	raw    string
	set    bool  // present and not empty: the runtime treats empty as unset
	valid  bool  // the runtime accepts the value
	n      int64 // the value (GOMAXPROCS, GOMEMLIMIT bytes with 0 for off)
	gofits bool  // gofit exported this exact value (MarkerVar)
}

type vars struct {
	procs, memlimit, gogc varState
	godebug               string
	marker                map[string]string // MarkerVar's entries
	markerSet             bool
}

func readVars(env map[string]string) vars {
	var v vars
	v.godebug = env["GODEBUG"]
	if m, ok := env[MarkerVar]; ok {
		v.markerSet = true
		v.marker = parseMarker(m)
	}
	state := func(name string) varState {
		raw, ok := env[name]
		s := varState{raw: raw, set: ok && raw != ""}
		if mv, ok := v.marker[name]; ok && s.set && mv == raw {
			s.gofits = true
		}
		return s
	}
	v.procs = state("GOMAXPROCS")
	if n, err := strconv.ParseInt(v.procs.raw, 10, 32); err == nil && n > 0 {
		v.procs.valid, v.procs.n = true, n
	}
	v.memlimit = state("GOMEMLIMIT")
	if n, err := ParseMemLimit(v.memlimit.raw); err == nil {
		v.memlimit.valid, v.memlimit.n = true, n
	}
	v.gogc = state("GOGC")
	if _, err := strconv.ParseInt(v.gogc.raw, 10, 32); err == nil || v.gogc.raw == "off" {
		v.gogc.valid = true
	}
	// Go's runtime uses 100 for a GOGC it cannot parse: as good as unset.
	v.gogc.set = v.gogc.set && v.gogc.valid
	return v
}

func parseMarker(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, val, ok := strings.Cut(kv, "="); ok {
			m[k] = val
		}
	}
	return m
}

// export fills Export and Unset for a process about to start. GOMAXPROCS
// is left out when the runtime is known (knownRuntime: the binary was read,
// not assumed) to choose the same value by itself.
func export(p *Plan, v vars, knownRuntime bool) {
	p.Export = map[string]string{}
	if !p.GOMAXPROCSFromEnv && p.GOMAXPROCS > 0 {
		if knownRuntime && p.RuntimeGOMAXPROCS == p.GOMAXPROCS {
			// Setting it would only switch the runtime's own updates off.
			p.reason("GOMAXPROCS", ReasonRuntime, "GOMAXPROCS not exported: the Go runtime already chooses %d by itself", p.GOMAXPROCS)
		} else {
			p.Export["GOMAXPROCS"] = strconv.Itoa(p.GOMAXPROCS)
		}
	}
	if !p.GOMEMLIMITFromEnv && p.GOMEMLIMIT > 0 {
		p.Export["GOMEMLIMIT"] = FormatMemLimit(p.GOMEMLIMIT)
	}
	if p.GOGC != "" {
		p.Export["GOGC"] = p.GOGC
	}
	var marks []string
	for _, name := range goVars {
		if val, ok := p.Export[name]; ok {
			marks = append(marks, name+"="+val)
			continue
		}
		// A value an earlier gofit exported that this plan does not want.
		if s := v.state(name); s.gofits {
			p.Unset = append(p.Unset, name)
		}
	}
	switch {
	case len(marks) > 0:
		p.Export[MarkerVar] = strings.Join(marks, ",")
	case v.markerSet:
		p.Unset = append(p.Unset, MarkerVar)
	}
}

func (v vars) state(name string) varState {
	switch name {
	case "GOMAXPROCS":
		return v.procs
	case "GOMEMLIMIT":
		return v.memlimit
	}
	return v.gogc
}

// Environ applies the plan's Export and Unset to environ (KEY=value
// entries, as from os.Environ) for a process about to start. Every
// variable the plan names appears at most once in the result, whatever
// duplicates environ had: Go reads the first of duplicates, so appending
// would leave the old value in force.
func (p Plan) Environ(environ []string) []string {
	out := make([]string, 0, len(environ)+len(p.Export))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := p.Export[k]; ok || slices.Contains(p.Unset, k) {
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(p.Export))
	for k := range p.Export {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+p.Export[k])
	}
	return out
}

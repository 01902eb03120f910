package fit

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/cgroup"
)

func TestNewRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{
		{MemoryRatio: math.NaN()}, {MemoryRatio: math.Inf(1)}, {MemoryRatio: math.Inf(-1)},
		{MemoryRatio: 1}, {MemoryRatio: 1.5}, {MemoryRatio: -0.1},
		{Rounding: 7}, {GOGC: "-5"}, {GOGC: "lots"}, {GOGC: "0"}, {GOGC: "+50"}, {GOGC: "99999999999"},
	} {
		if _, err := New(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("New(%+v) = %v, want ErrBadOption", o, err)
		}
	}
	for _, o := range []Options{{}, {MemoryRatio: 0.5, Rounding: Ceil, GOGC: "off"}, {GOGC: "200"}} {
		if _, err := New(o); err != nil {
			t.Errorf("New(%+v) = %v", o, err)
		}
	}
	if err := ValidMemoryRatio(math.NaN()); err == nil || !strings.Contains(err.Error(), "memory ratio") {
		t.Errorf("ValidMemoryRatio(NaN) = %v", err)
	}
}

// In-process, GOMAXPROCS is left alone only while it equals the plan.
func TestGOMAXPROCSAction(t *testing.T) {
	const go126 = "go1.26.1"
	in := func(cores float64, godebug, defGODEBUG string, r Running, vars ...string) Input {
		v := map[string]string{"GODEBUG": godebug}
		for i := 0; i+1 < len(vars); i += 2 {
			v[vars[i]] = vars[i+1]
		}
		return Input{Limits: cgroup.Limits{CPU: cpuLimit(cores, cores, 0)}, CPUs: 8, Vars: v, GoVersion: go126, DefaultGODEBUG: defGODEBUG, Running: &r}
	}
	for _, tc := range []struct {
		name string
		in   Input
		want Action
	}{
		{"runtime follows and agrees", in(2, "", "", Running{GOMAXPROCS: 2, CanHandBack: true}), Leave},
		{"runtime follows but is not there yet", in(4, "", "", Running{GOMAXPROCS: 2, CanHandBack: true}), Set},
		{"runtime sized once, limit grew", in(4, "containermaxprocs=1", "containermaxprocs=0,updatemaxprocs=0", Running{GOMAXPROCS: 2, CanHandBack: true}), Set},
		{"managed, runtime would follow and agree: hand back", in(4, "", "", Running{GOMAXPROCS: 1, Managed: true, CanHandBack: true}), HandBack},
		{"managed, runtime would not follow: keep setting", in(4, "containermaxprocs=1", "containermaxprocs=0,updatemaxprocs=0", Running{GOMAXPROCS: 1, Managed: true, CanHandBack: true}), Set},
		{"managed and right, runtime would not follow", in(4, "containermaxprocs=1", "containermaxprocs=0,updatemaxprocs=0", Running{GOMAXPROCS: 4, Managed: true, CanHandBack: true}), Leave},
		{"managed, cannot hand back", in(4, "", "", Running{GOMAXPROCS: 4, Managed: true}), Leave},
		{"sub-core: runtime says 2", in(0.5, "", "", Running{GOMAXPROCS: 2, CanHandBack: true}), Set},
		{"user env wins", in(1, "", "", Running{GOMAXPROCS: 8, CanHandBack: true}, "GOMAXPROCS", "8"), Leave},
		{"gofit run's env: hand back so the runtime follows again", in(2, "", "", Running{GOMAXPROCS: 2, CanHandBack: true}, "GOMAXPROCS", "2", MarkerVar, "GOMAXPROCS=2"), HandBack},
		{"gofit run's env is stale: set", in(4, "", "", Running{GOMAXPROCS: 2}, "GOMAXPROCS", "2", MarkerVar, "GOMAXPROCS=2"), Set},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{}.Plan(tc.in)
			if p.GOMAXPROCSAction != tc.want {
				t.Errorf("action %v, want %v (plan %d, runtime %d follows %v)", p.GOMAXPROCSAction, tc.want, p.GOMAXPROCS, p.RuntimeGOMAXPROCS, p.RuntimeFollowsCgroup)
			}
			if len(p.Export) != 0 || len(p.Unset) != 0 {
				t.Errorf("in-process plan exports %v, unsets %v", p.Export, p.Unset)
			}
		})
	}
}

func TestExport(t *testing.T) {
	const mib = 1 << 20
	lim := cgroup.Limits{CPU: cpuLimit(1, 1, 0), Memory: cgroup.MemoryLimits{Version: 2, Max: 100 * mib}}
	for _, tc := range []struct {
		name    string
		goVer   string
		cores   float64
		vars    map[string]string
		environ []string
		export  map[string]string
		unset   []string
		child   []string // the child's environment
	}{
		{name: "plain", goVer: "go1.24.3",
			export:  map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": "94371840", MarkerVar: "GOMAXPROCS=1,GOMEMLIMIT=94371840"},
			environ: []string{"HOME=/root"},
			child:   []string{"HOME=/root", MarkerVar + "=GOMAXPROCS=1,GOMEMLIMIT=94371840", "GOMAXPROCS=1", "GOMEMLIMIT=94371840"}},
		{name: "invalid GOMAXPROCS and empty GOMEMLIMIT are replaced, not duplicated", goVer: "go1.24.3",
			vars:    map[string]string{"GOMAXPROCS": "abc", "GOMEMLIMIT": ""},
			export:  map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": "94371840", MarkerVar: "GOMAXPROCS=1,GOMEMLIMIT=94371840"},
			environ: []string{"GOMAXPROCS=abc", "GOMEMLIMIT=", "GOMAXPROCS=7"},
			child:   []string{MarkerVar + "=GOMAXPROCS=1,GOMEMLIMIT=94371840", "GOMAXPROCS=1", "GOMEMLIMIT=94371840"}},
		{name: "the user's values stay", goVer: "go1.24.3",
			vars:    map[string]string{"GOMAXPROCS": "3", "GOMEMLIMIT": "50MiB"},
			export:  map[string]string{},
			environ: []string{"GOMAXPROCS=3", "GOMEMLIMIT=50MiB"},
			child:   []string{"GOMAXPROCS=3", "GOMEMLIMIT=50MiB"}},
		{name: "runtime agrees: GOMAXPROCS not exported; an outer gofit's value removed", goVer: "go1.26.1", cores: 4,
			vars:    map[string]string{"GOMAXPROCS": "4", "GODEBUG": "containermaxprocs=1", MarkerVar: "GOMAXPROCS=4"},
			export:  map[string]string{"GOMEMLIMIT": "94371840", MarkerVar: "GOMEMLIMIT=94371840"},
			unset:   []string{"GOMAXPROCS"},
			environ: []string{"GOMAXPROCS=4", MarkerVar + "=GOMAXPROCS=4"},
			child:   []string{MarkerVar + "=GOMEMLIMIT=94371840", "GOMEMLIMIT=94371840"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lim
			if tc.cores > 0 {
				l.CPU = cpuLimit(tc.cores, tc.cores, 0)
			}
			p := Policy{}.Plan(Input{Limits: l, CPUs: 8, Vars: tc.vars, GoVersion: tc.goVer})
			if !equalMaps(p.Export, tc.export) || !slices.Equal(p.Unset, tc.unset) {
				t.Errorf("export %v unset %v, want %v %v", p.Export, p.Unset, tc.export, tc.unset)
			}
			if got := p.Environ(tc.environ); !slices.Equal(got, tc.child) {
				t.Errorf("child environment %q, want %q", got, tc.child)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The webhook's entry point: pod limits only, the host plays no part.
func TestPlanContainer(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name     string
		c        Container
		opt      Options
		procs    int
		memlimit int64
		export   map[string]string
		warning  string
	}{
		{name: "quarter core", c: Container{CPULimit: 0.25, MemoryLimit: 1024 * mib}, procs: 1, memlimit: 1024 * mib * 9 / 10,
			export: map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": "966367641", MarkerVar: "GOMAXPROCS=1,GOMEMLIMIT=966367641"}},
		{name: "2.5 cores floor", c: Container{CPULimit: 2.5}, procs: 2, export: map[string]string{"GOMAXPROCS": "2", MarkerVar: "GOMAXPROCS=2"}},
		{name: "2.5 cores ceil", c: Container{CPULimit: 2.5}, opt: Options{Rounding: Ceil}, procs: 3, export: map[string]string{"GOMAXPROCS": "3", MarkerVar: "GOMAXPROCS=3"}},
		{name: "more cores than any host here", c: Container{CPULimit: 96}, procs: 96, export: map[string]string{"GOMAXPROCS": "96", MarkerVar: "GOMAXPROCS=96"}},
		{name: "no limits: nothing", c: Container{}, export: map[string]string{}},
		{name: "small container without a declaration: the ratio", c: Container{MemoryLimit: 64 * mib}, memlimit: 64 * mib * 9 / 10,
			export: map[string]string{"GOMEMLIMIT": "60397977", MarkerVar: "GOMEMLIMIT=60397977"}},
		{name: "small container: a declared allowance lowers GOMEMLIMIT", c: Container{MemoryLimit: 64 * mib, NonGo: 10 * mib}, memlimit: 64*mib - 10*mib - 2*mib,
			export: map[string]string{"GOMEMLIMIT": "54525952", MarkerVar: "GOMEMLIMIT=54525952"}},
		{name: "explicit allowance", c: Container{MemoryLimit: 64 * mib, NonGo: 4 * mib}, memlimit: 64 * mib * 9 / 10,
			export: map[string]string{"GOMEMLIMIT": "60397977", MarkerVar: "GOMEMLIMIT=60397977"}},
		{name: "memory limit 1 byte: none", c: Container{MemoryLimit: 1}, export: map[string]string{}, warning: "too small"},
		{name: "tiny: the ratio", c: Container{MemoryLimit: 8 * mib}, memlimit: 8 * mib * 9 / 10, export: map[string]string{"GOMEMLIMIT": "7549747", MarkerVar: "GOMEMLIMIT=7549747"}},
		{name: "tiny with a declared allowance: a quarter", c: Container{MemoryLimit: 8 * mib, NonGo: 10 * mib}, memlimit: 2 * mib, export: map[string]string{"GOMEMLIMIT": "2097152", MarkerVar: "GOMEMLIMIT=2097152"}, warning: "leaves little"},
		{name: "user's GOMAXPROCS wins", c: Container{CPULimit: 0.5, Vars: map[string]string{"GOMAXPROCS": "4"}}, procs: 4, export: map[string]string{}, warning: "above the CPU limit"},
		// resourceFieldRef limits.cpu rounds 1500m up to 2: above the limit.
		{name: "resourceFieldRef rounding up", c: Container{CPULimit: 1.5, Vars: map[string]string{"GOMAXPROCS": "2"}}, procs: 2, export: map[string]string{}, warning: "GOMAXPROCS=2 from the environment is above the CPU limit of 1.5 cores"},
		{name: "NaN limit is no limit", c: Container{CPULimit: math.NaN()}, export: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, tc.opt).PlanContainer(tc.c)
			if p.GOMAXPROCS != tc.procs || p.GOMEMLIMIT != tc.memlimit || !equalMaps(p.Export, tc.export) {
				t.Errorf("GOMAXPROCS %d GOMEMLIMIT %d export %v; want %d %d %v\nreasons %q", p.GOMAXPROCS, p.GOMEMLIMIT, p.Export, tc.procs, tc.memlimit, tc.export, p.Reasons)
			}
			checkNotes(t, p, "", tc.warning)
			checkMemLimit(t, p, tc.c.MemoryLimit)
			checkNoteCodes(t, p)
		})
	}
}

// PlanContainer warns about a container's own mistakes from its spec and
// the Go release assumed, with no stand-in CPU count or process input.
func TestPlanContainerWarnings(t *testing.T) {
	const go125 = "go1.25"
	for _, tc := range []struct {
		name    string
		c       Container
		code    Warning // "" means no warnings
		reason  string
		procs   int
		runtime int
	}{
		{name: "sub-core limit: Go 1.25 alone would run 2", c: Container{CPULimit: 0.5, LeafCPULimit: 0.5, GoVersion: go125},
			code: WarnRuntimeAboveLimit, reason: "never goes below 2", procs: 1, runtime: 2},
		{name: "sub-core limit, Go unknown: nothing to warn about", c: Container{CPULimit: 0.5, LeafCPULimit: 0.5}, procs: 1},
		{name: "sub-core limit, gofit's GOMAXPROCS=1 in the env: no warning", c: Container{CPULimit: 0.5, LeafCPULimit: 0.5, GoVersion: go125,
			Vars: map[string]string{"GOMAXPROCS": "1"}}, procs: 1, runtime: 1},
		{name: "pod limit tighter than the container's", c: Container{CPULimit: 1, LeafCPULimit: 4, CPUSource: "the pod", GoVersion: go125},
			reason: "reads only the leaf cgroup", procs: 1, runtime: 4},
		{name: "GOMEMLIMIT at the limit", c: Container{MemoryLimit: 256 << 20, Vars: map[string]string{"GOMEMLIMIT": "256MiB"}}, code: WarnGOMEMLIMITAtLimit},
		{name: "GOGC=off without a memory limit", c: Container{Vars: map[string]string{"GOGC": "off"}}, code: WarnGOGCOffWithoutMemLimit},
		{name: "bad GOMAXPROCS", c: Container{CPULimit: 2, Vars: map[string]string{"GOMAXPROCS": "two"}}, code: WarnGOMAXPROCSInvalid, procs: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, Options{}).PlanContainer(tc.c)
			checkNoteCodes(t, p)
			var codes []Warning
			for _, w := range p.Warnings {
				codes = append(codes, Warning(w.Code))
			}
			if tc.code == "" && len(codes) > 0 || tc.code != "" && !slices.Contains(codes, tc.code) {
				t.Errorf("warnings %v, want %q", p.Warnings, tc.code)
			}
			if tc.reason != "" && !contains(p.Reasons, tc.reason) {
				t.Errorf("reasons %v, want one with %q", p.Reasons, tc.reason)
			}
			if p.GOMAXPROCS != tc.procs || p.RuntimeGOMAXPROCS != tc.runtime {
				t.Errorf("GOMAXPROCS %d, runtime %d; want %d, %d", p.GOMAXPROCS, p.RuntimeGOMAXPROCS, tc.procs, tc.runtime)
			}
		})
	}
}

// Each note names the variable it is about, so callers split them without
// reading the text.
func TestNotesNameTheirVariable(t *testing.T) {
	p := mustPolicy(t, Options{GOGC: "off"}).PlanContainer(Container{CPULimit: 0.5, LeafCPULimit: 0.5, MemoryLimit: 256 << 20, GoVersion: "go1.26"})
	checkNoteCodes(t, p)
	for _, name := range []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC"} {
		notes := NotesFor(p.Reasons, name)
		if len(notes) == 0 {
			t.Errorf("no reason about %s in %v", name, p.Reasons)
		}
		for _, n := range notes {
			if !strings.Contains(n.Text, name) && n.Code != string(ReasonRuntime) {
				t.Errorf("note %+v is filed under %s", n, name)
			}
		}
	}
	if got := NotesFor(p.Reasons, "GOMAXPROCS")[0]; got.Code != string(ReasonCPULimit) {
		t.Errorf("first GOMAXPROCS note %+v, want code %s", got, ReasonCPULimit)
	}
}

// GOMAXPROCS from the CPU request when there is no CPU limit (opt-in):
// max(min, ceil(request × factor)), capped at the usable CPUs.
func TestGOMAXPROCSFromRequest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opt     Options
		cpu     cgroup.CPULimits
		request float64
		cpus    int
		env     map[string]string
		want    int
		reason  Reason
	}{
		{name: "off by default: all CPUs", request: 0.5, cpus: 64, want: 64, reason: ReasonCPUs},
		{name: "500m, factor 1: the minimum of 2", opt: Options{CPURequestFactor: 1}, request: 0.5, cpus: 64, want: 2, reason: ReasonCPURequest},
		{name: "500m, factor 1, minimum 1", opt: Options{CPURequestFactor: 1, CPURequestMin: 1}, request: 0.5, cpus: 64, want: 1, reason: ReasonCPURequest},
		{name: "3.2 cores × 1.5 = 4.8: 5", opt: Options{CPURequestFactor: 1.5}, request: 3.2, cpus: 64, want: 5, reason: ReasonCPURequest},
		{name: "capped at the CPUs", opt: Options{CPURequestFactor: 2}, request: 6, cpus: 8, want: 8, reason: ReasonCPURequest},
		{name: "a limit wins over the request", opt: Options{CPURequestFactor: 2}, cpu: cgroup.CPULimits{Quota: 3, LeafQuota: 3, QuotaGroup: "/ctr"}, request: 0.5, cpus: 64, want: 3, reason: ReasonCPULimit},
		{name: "no request: all CPUs", opt: Options{CPURequestFactor: 1}, cpus: 16, want: 16, reason: ReasonCPUs},
		{name: "the user's GOMAXPROCS wins", opt: Options{CPURequestFactor: 1}, request: 0.5, cpus: 64, env: map[string]string{"GOMAXPROCS": "6"}, want: 6, reason: ReasonEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, tc.opt).Plan(Input{Limits: cgroup.Limits{CPU: tc.cpu}, CPUs: tc.cpus, CPURequest: tc.request, Vars: tc.env, GoVersion: "go1.26.0"})
			if p.GOMAXPROCS != tc.want || p.GOMAXPROCSReason != tc.reason {
				t.Errorf("GOMAXPROCS %d (%s), want %d (%s); %v", p.GOMAXPROCS, p.GOMAXPROCSReason, tc.want, tc.reason, p.Reasons)
			}
			checkNoteCodes(t, p)
		})
	}
	// From a pod spec: the node's CPUs are unknown, so nothing caps it.
	p := mustPolicy(t, Options{CPURequestFactor: 1}).PlanContainer(Container{CPURequest: 3.5})
	if p.GOMAXPROCS != 4 || p.GOMAXPROCSReason != ReasonCPURequest || p.Export["GOMAXPROCS"] != "4" {
		t.Errorf("container with a 3500m request: GOMAXPROCS %d (%s), export %v", p.GOMAXPROCS, p.GOMAXPROCSReason, p.Export)
	}
	for _, o := range []Options{{CPURequestFactor: -1}, {CPURequestFactor: math.NaN()}, {CPURequestFactor: 17}, {CPURequestFactor: 1, CPURequestMin: 3}} {
		if _, err := New(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("New(%+v) = %v, want ErrBadOption", o, err)
		}
	}
}

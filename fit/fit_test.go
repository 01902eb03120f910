package fit

import (
	"slices"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/cgroup"
)

func cpuLimit(quota, leaf float64, cpuset int) cgroup.CPULimits {
	return cgroup.CPULimits{Version: 2, Group: "/pod/ctr", Quota: quota, QuotaGroup: "/pod", LeafQuota: leaf, CPUSet: cpuset}
}

func TestGOMAXPROCS(t *testing.T) {
	const go126, go124 = "go1.26.1", "go1.24.3"
	for _, tc := range []struct {
		name        string
		cpu         cgroup.CPULimits
		cpus        int
		env         map[string]string
		goVersion   string
		defGODEBUG  string
		opt         Options
		want        int
		wantRuntime int
		follows     bool
		reason      string // substring of some reason
		warning     string // substring of some warning; "" means no warnings
	}{
		{name: "no limit uses the CPUs", cpu: cpuLimit(0, 0, 0), cpus: 8, goVersion: go126, want: 8, wantRuntime: 8, follows: true, reason: "no CPU limit"},
		{name: "floor of 2.5", cpu: cpuLimit(2.5, 2.5, 0), cpus: 8, goVersion: go126, want: 2, wantRuntime: 3, follows: true, reason: "rounds the limit up"},
		{name: "ceil option", cpu: cpuLimit(2.5, 2.5, 0), cpus: 8, goVersion: go126, opt: Options{Rounding: Ceil}, want: 3, wantRuntime: 3, follows: true},
		{name: "sub-core limit: at least 1, Go picks 2", cpu: cpuLimit(0.5, 0.5, 0), cpus: 4, goVersion: go126, want: 1, wantRuntime: 2, follows: true,
			reason: "never goes below 2", warning: "below 1 core"},
		{name: "tighter ancestor", cpu: cpuLimit(1, 4, 0), cpus: 8, goVersion: go126, want: 1, wantRuntime: 4, follows: true, reason: "reads only the leaf"},
		{name: "cpuset caps", cpu: cpuLimit(6, 6, 2), cpus: 8, goVersion: go126, want: 2, wantRuntime: 2, follows: true, reason: "2 usable CPUs"},
		{name: "affinity caps", cpu: cpuLimit(6, 6, 0), cpus: 3, goVersion: go126, want: 3, wantRuntime: 3, follows: true},
		{name: "old Go ignores cgroups", cpu: cpuLimit(1, 1, 0), cpus: 8, goVersion: go124, want: 1, wantRuntime: 8, follows: false, reason: "predates Go 1.25"},
		{name: "go.mod 1.24 default GODEBUG", cpu: cpuLimit(1, 1, 0), cpus: 8, goVersion: go126, defGODEBUG: "containermaxprocs=0,updatemaxprocs=0", want: 1, wantRuntime: 8, reason: "containermaxprocs=0"},
		{name: "GODEBUG env overrides the default", cpu: cpuLimit(1, 1, 0), cpus: 8, goVersion: go126, defGODEBUG: "containermaxprocs=0",
			env: map[string]string{"GODEBUG": "containermaxprocs=1"}, want: 1, wantRuntime: 2, follows: true},
		// A main module at go 1.24 run with GODEBUG=containermaxprocs=1: the
		// runtime sizes GOMAXPROCS from the cgroup once, then never again.
		{name: "containermaxprocs on, updatemaxprocs off by default", cpu: cpuLimit(4, 4, 0), cpus: 8, goVersion: go126, defGODEBUG: "containermaxprocs=0,updatemaxprocs=0",
			env: map[string]string{"GODEBUG": "containermaxprocs=1"}, want: 4, wantRuntime: 4, follows: false, reason: "does not follow changes"},
		{name: "updatemaxprocs off in the env", cpu: cpuLimit(4, 4, 0), cpus: 8, goVersion: go126,
			env: map[string]string{"GODEBUG": "updatemaxprocs=0"}, want: 4, wantRuntime: 4, follows: false, reason: "updatemaxprocs=0 in the environment"},
		{name: "gofit's own exported GOMAXPROCS is not the user's", cpu: cpuLimit(4, 4, 0), cpus: 8, goVersion: go126,
			env: map[string]string{"GOMAXPROCS": "2", MarkerVar: "GOMAXPROCS=2"}, want: 4, wantRuntime: 4, follows: true},
		{name: "a changed marked value is the user's", cpu: cpuLimit(4, 4, 0), cpus: 8, goVersion: go126,
			env: map[string]string{"GOMAXPROCS": "3", MarkerVar: "GOMAXPROCS=2"}, want: 3, wantRuntime: 3, reason: "set in the environment"},
		{name: "empty GOMAXPROCS is unset", cpu: cpuLimit(4, 4, 0), cpus: 8, goVersion: go126, env: map[string]string{"GOMAXPROCS": ""}, want: 4, wantRuntime: 4, follows: true},
		{name: "absurd limit does not overflow", cpu: cpuLimit(1e300, 1e300, 0), cpus: 8, goVersion: go126, want: 8, wantRuntime: 8, follows: true},
		{name: "env wins and warns above the limit", cpu: cpuLimit(0.5, 0.5, 0), cpus: 8, goVersion: go126, env: map[string]string{"GOMAXPROCS": "8"},
			want: 8, wantRuntime: 8, reason: "set in the environment", warning: "GOMAXPROCS=8 from the environment is above the CPU limit of 0.5 cores"},
		{name: "env within the limit: no warning", cpu: cpuLimit(4, 4, 0), cpus: 8, goVersion: go126, env: map[string]string{"GOMAXPROCS": "4"}, want: 4, wantRuntime: 4},
		{name: "bad env value ignored", cpu: cpuLimit(2, 2, 0), cpus: 8, goVersion: go126, env: map[string]string{"GOMAXPROCS": "lots"}, want: 2, wantRuntime: 2, follows: true,
			warning: "not a positive integer"},
		{name: "unknown CPUs", cpu: cpuLimit(0, 0, 0), cpus: 0, goVersion: go126, want: 1, wantRuntime: 1, follows: true, warning: "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, tc.opt).Plan(Input{Limits: cgroup.Limits{CPU: tc.cpu}, CPUs: tc.cpus, Vars: tc.env, GoVersion: tc.goVersion, DefaultGODEBUG: tc.defGODEBUG})
			if p.GOMAXPROCS != tc.want || p.RuntimeGOMAXPROCS != tc.wantRuntime || p.RuntimeFollowsCgroup != tc.follows {
				t.Errorf("GOMAXPROCS %d runtime %d follows %v; want %d, %d, %v\nreasons %q", p.GOMAXPROCS, p.RuntimeGOMAXPROCS, p.RuntimeFollowsCgroup,
					tc.want, tc.wantRuntime, tc.follows, p.Reasons)
			}
			checkNotes(t, p, tc.reason, tc.warning)
		})
	}
}

func TestGOMEMLIMIT(t *testing.T) {
	const mib = 1 << 20
	mem := func(max, high int64) cgroup.MemoryLimits {
		return cgroup.MemoryLimits{Version: 2, Group: "/pod/ctr", Max: max, MaxGroup: "/pod", High: high, HighGroup: "/pod/ctr"}
	}
	for _, tc := range []struct {
		name    string
		mem     cgroup.MemoryLimits
		nonGo   NonGo
		env     map[string]string
		opt     Options
		want    int64
		gogc    string
		reason  string
		warning string
	}{
		{name: "no limit", mem: mem(0, 0), want: 0, reason: "no memory limit"},
		{name: "90% of max", mem: mem(100*mib, 0), want: 90 * mib, reason: "90% of the memory.max 100MiB on /pod"},
		{name: "high is tighter", mem: mem(200*mib, 100*mib), want: 90 * mib, reason: "memory.high"},
		{name: "only high", mem: mem(0, 100*mib), want: 90 * mib},
		{name: "custom ratio", mem: mem(100*mib, 0), opt: Options{MemoryRatio: 0.75}, want: 75 * mib},
		{name: "small container: unmanaged memory beats the ratio", mem: mem(64*mib, 0), nonGo: NonGo{Anon: 12 * mib}, want: 64*mib - 12*mib - 2*mib, reason: "the Go runtime does not manage"},
		{name: "big container: ratio already leaves room", mem: mem(1024*mib, 0), nonGo: NonGo{Anon: 20 * mib}, want: 1024 * mib * 9 / 10},
		{name: "tiny container: heap keeps a quarter", mem: mem(32*mib, 0), nonGo: NonGo{Anon: 30 * mib}, want: 8 * mib, warning: "leaves little for the Go heap"},
		{name: "env wins", mem: mem(100*mib, 0), env: map[string]string{"GOMEMLIMIT": "80MiB"}, want: 80 * mib, reason: "set in the environment"},
		{name: "env at the limit warns", mem: mem(100*mib, 0), env: map[string]string{"GOMEMLIMIT": "100MiB"}, want: 100 * mib, warning: "at or above the memory limit"},
		{name: "env off warns under a limit", mem: mem(100*mib, 0), env: map[string]string{"GOMEMLIMIT": "off"}, want: 0, warning: "at or above"},
		{name: "bad env", mem: mem(100*mib, 0), env: map[string]string{"GOMEMLIMIT": "lots"}, want: 90 * mib, warning: "refuses to start"},
		{name: "empty env is unset, as Go treats it", mem: mem(100*mib, 0), env: map[string]string{"GOMEMLIMIT": ""}, want: 90 * mib, reason: "90%"},
		{name: "gofit's own exported GOMEMLIMIT is replanned", mem: mem(100*mib, 0), env: map[string]string{"GOMEMLIMIT": "1000", MarkerVar: "GOMEMLIMIT=1000"}, want: 90 * mib},
		{name: "memory.max=1 gives no GOMEMLIMIT", mem: mem(1, 0), want: 0, reason: "below the 4MiB", warning: "too small to run"},
		{name: "just under the minimum", mem: mem(4*mib-1, 0), want: 0, warning: "too small to run"},
		{name: "at the minimum", mem: mem(4*mib, 0), want: 4 * mib * 9 / 10},
		{name: "unmanaged above the limit", mem: mem(64*mib, 0), nonGo: NonGo{Anon: 1 << 40, Kernel: 1 << 62, HotFile: 1 << 62}, want: 16 * mib, warning: "leaves little"},
		{name: "use what you pay for", mem: mem(100*mib, 0), opt: Options{GOGC: "off"}, want: 90 * mib, gogc: "off", reason: "GOGC=off"},
		{name: "GOGC needs a limit", mem: mem(0, 0), opt: Options{GOGC: "off"}, want: 0, reason: "GOGC left alone"},
		{name: "GOGC=off without a limit warns", mem: mem(0, 0), env: map[string]string{"GOGC": "off"}, want: 0, warning: "grows until"},
		{name: "GOGC env is left alone", mem: mem(100*mib, 0), env: map[string]string{"GOGC": "50"}, opt: Options{GOGC: "off"}, want: 90 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, tc.opt).Plan(Input{Limits: cgroup.Limits{Memory: tc.mem}, CPUs: 1, Vars: tc.env, NonGo: tc.nonGo})
			if p.GOMEMLIMIT != tc.want || p.GOGC != tc.gogc {
				t.Errorf("GOMEMLIMIT %d GOGC %q, want %d %q; reasons %q", p.GOMEMLIMIT, p.GOGC, tc.want, tc.gogc, p.Reasons)
			}
			if eff := tc.mem.Effective(); eff > 0 && p.GOMEMLIMIT >= eff && tc.env["GOMEMLIMIT"] == "" {
				t.Errorf("GOMEMLIMIT %d at or above the limit %d", p.GOMEMLIMIT, eff)
			}
			checkNotes(t, p, tc.reason, tc.warning)
		})
	}
}

func TestParseMemLimit(t *testing.T) {
	for in, want := range map[string]int64{"off": 0, "943718400": 943718400, "900MiB": 900 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40, "10KiB": 10 << 10, "5B": 5} {
		if got, err := ParseMemLimit(in); err != nil || got != want {
			t.Errorf("ParseMemLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1G", "-1", "MiB", "99999999999TiB", " 100MiB", "100MiB "} {
		if _, err := ParseMemLimit(bad); err == nil {
			t.Errorf("ParseMemLimit(%q) succeeded", bad)
		}
	}
}

// Which Go versions read cgroup limits: go/version's order, with
// GOEXPERIMENT suffixes and unknown strings handled.
func TestCgroupAwareGoVersions(t *testing.T) {
	for v, want := range map[string]bool{"go1.25.0": true, "go1.26rc1": true, "go1.25rc1": true, "go1.24.9": false, "go2.0": true,
		"go1.25.1 X:boringcrypto": true, "devel +abc": false, "": false, "go1": false} {
		if got := runtimeModel(cpuFacts{goVersion: v, leaf: 1, cpus: 8}, readVars(nil)).cgroupAware; got != want {
			t.Errorf("Go %q reads cgroups: %v, want %v", v, got, want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for b, want := range map[int64]string{100 << 20: "100MiB", 1536 << 20: "1.5GiB", 512: "512B", 94371840: "90MiB"} {
		if got := FormatBytes(b); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", b, got, want)
		}
	}
}

func FuzzCompute(f *testing.F) {
	f.Add(0.5, 0.5, 2, int64(100<<20), int64(0), int64(0), "8", "100MiB")
	f.Add(0.0, 0.0, 0, int64(0), int64(0), int64(1<<30), "", "")
	f.Fuzz(func(t *testing.T, quota, leaf float64, cpus int, max, high, unmanaged int64, envProcs, envMem string) {
		if quota < 0 || leaf < 0 || max < 0 || high < 0 || unmanaged < 0 || quota > 1e6 || leaf > 1e6 || cpus > 1<<16 {
			t.Skip()
		}
		in := Input{Limits: cgroup.Limits{CPU: cgroup.CPULimits{Quota: quota, LeafQuota: leaf}, Memory: cgroup.MemoryLimits{Max: max, High: high}},
			CPUs: cpus, Vars: map[string]string{}, GoVersion: "go1.26.0", NonGo: NonGo{Anon: unmanaged, Kernel: unmanaged, HotFile: unmanaged}}
		if envProcs != "" {
			in.Vars["GOMAXPROCS"] = envProcs
		}
		if envMem != "" {
			in.Vars["GOMEMLIMIT"] = envMem
		}
		p := Policy{}.Plan(in)
		if p.GOMAXPROCS < 1 {
			t.Fatalf("GOMAXPROCS %d", p.GOMAXPROCS)
		}
		checkMemLimit(t, p, in.Limits.Memory.Effective())
		c := Policy{}.PlanContainer(Container{CPULimit: quota, MemoryLimit: max, NonGo: unmanaged, Vars: in.Vars})
		if quota > 0 && !c.GOMAXPROCSFromEnv && c.GOMAXPROCS < 1 {
			t.Fatalf("container GOMAXPROCS %d for %g cores", c.GOMAXPROCS, quota)
		}
		checkMemLimit(t, c, max)
	})
}

// checkMemLimit asserts the promise the README makes: a planned
// GOMEMLIMIT is at least a quarter of the limit and below it.
func checkMemLimit(t *testing.T, p Plan, eff int64) {
	t.Helper()
	if p.GOMEMLIMITFromEnv || p.GOMEMLIMIT == 0 {
		return
	}
	if eff <= 0 || p.GOMEMLIMIT >= eff || p.GOMEMLIMIT < eff/4 {
		t.Fatalf("GOMEMLIMIT %d for limit %d", p.GOMEMLIMIT, eff)
	}
}

func mustPolicy(t *testing.T, o Options) Policy {
	t.Helper()
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkNotes asserts that some reason mentions reason (unless empty) and
// that some warning mentions warning, or that there are no warnings.
func checkNotes(t *testing.T, p Plan, reason, warning string) {
	t.Helper()
	if reason != "" && !contains(p.Reasons, reason) {
		t.Errorf("no reason mentions %q: %q", reason, p.Reasons)
	}
	if warning == "" && len(p.Warnings) > 0 {
		t.Errorf("unexpected warnings %q", p.Warnings)
	}
	if warning != "" && !contains(p.Warnings, warning) {
		t.Errorf("no warning mentions %q: %q", warning, p.Warnings)
	}
}

// checkNoteCodes asserts that every note names a variable and carries a
// code from the fixed sets.
func checkNoteCodes(t *testing.T, p Plan) {
	t.Helper()
	for _, n := range p.Reasons {
		if n.Var == "" || !slices.Contains(Reasons(), Reason(n.Code)) || n.Text == "" {
			t.Errorf("reason note %+v: want a variable, a Reason code and a text", n)
		}
	}
	for _, n := range p.Warnings {
		if n.Var == "" || !slices.Contains(Warnings(), Warning(n.Code)) || n.Text == "" {
			t.Errorf("warning note %+v: want a variable, a Warning code and a text", n)
		}
	}
}

func contains(list []Note, sub string) bool {
	for _, s := range list {
		if strings.Contains(s.Text, sub) {
			return true
		}
	}
	return false
}

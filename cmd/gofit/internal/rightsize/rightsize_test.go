package rightsize

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/experiment"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/fleet"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/fit"
)

const mib = 1 << 20

var (
	t0  = time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	web = fleet.Workload{Namespace: "shop", Kind: "Deployment", Name: "web"}
)

// unfitted is the Deployment: GOMAXPROCS=2 at 250m, no
// GOMEMLIMIT, memory four times what it needs.
func unfitted() fleet.Container {
	return fleet.Container{Workload: web, Container: "app",
		Observed: fleet.Observed{Requests: fleet.Resources{CPU: 0.25, Memory: 128 * mib}, Limits: fleet.Resources{CPU: 0.25, Memory: 128 * mib}},
		Findings: []fleet.Finding{{Code: fleet.CodeGOMAXPROCSAboveLimit}, {Code: fleet.CodeGOMEMLIMITUnset}, {Code: fleet.CodeOverProvisioned}},
		Gofit: fleet.Recommendation{CPURequest: 0.2, CPULimit: 0.3, Memory: 32 * mib, GOMAXPROCS: 1, GOMEMLIMIT: 24 * mib,
			Env: map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": fmt.Sprint(24 * mib)}, Reasons: []string{"memory 32MiB: ..."}}}
}

func TestModeOf(t *testing.T) {
	for _, tc := range []struct {
		w, ns     map[string]string
		want      Mode
		where     string
		errSubstr string
	}{
		{nil, nil, Off, "", ""},
		{map[string]string{KeyMode: "auto"}, map[string]string{KeyMode: "recommend"}, Auto, "workload", ""},
		{nil, map[string]string{KeyMode: "trial"}, Trial, "namespace", ""},
		{map[string]string{KeyMode: "off"}, map[string]string{KeyMode: "auto"}, Off, "workload", ""},
		{map[string]string{KeyMode: "Auto!"}, nil, Off, "workload", `workload gofit.dev/rightsize: "Auto!" is not a mode`},
	} {
		m, where, err := ModeOf(tc.w, tc.ns)
		if tc.errSubstr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errSubstr) {
				t.Errorf("ModeOf(%v, %v): error %v, want %q", tc.w, tc.ns, err, tc.errSubstr)
			}
			continue
		}
		if err != nil || m != tc.want || where != tc.where {
			t.Errorf("ModeOf(%v, %v) = %s from %q, %v; want %s from %q", tc.w, tc.ns, m, where, err, tc.want, tc.where)
		}
	}
}

func TestPolicyCheckNamesTheFlag(t *testing.T) {
	if err := DefaultPolicy().Check(); err != nil {
		t.Fatalf("default policy: %v", err)
	}
	for flag, change := range map[string]func(*Policy){
		"--share":          func(p *Policy) { p.Share = 0.75 },
		"--min-pods":       func(p *Policy) { p.MinPods = 0 },
		"--saving":         func(p *Policy) { p.Saving = 1 },
		"--trial-duration": func(p *Policy) { p.Duration = 0 },
		"--backoff":        func(p *Policy) { p.Backoff = -time.Hour },
		"--max-trials":     func(p *Policy) { p.PerCluster = 0 },
	} {
		p := DefaultPolicy()
		change(&p)
		if err := p.Check(); err == nil || !strings.HasPrefix(err.Error(), flag) {
			t.Errorf("%s out of range: error %v, want it to start with the flag", flag, err)
		}
	}
}

func TestPlanFrom(t *testing.T) {
	c := unfitted()
	c.Observed.Limits.Memory = 256 * mib // Burstable: requests below limits
	p := PlanFrom(web, []fleet.Container{c}, 0)
	if !p.Ready() {
		t.Fatalf("plan not ready: %v", p.Missing)
	}
	if want := []string{fleet.CodeGOMAXPROCSAboveLimit, fleet.CodeGOMEMLIMITUnset}; !slices.Equal(p.Fixes, want) {
		t.Errorf("fixes %v, want %v (over_provisioned is a saving, not a fix)", p.Fixes, want)
	}
	got := p.Proposed["app"]
	if got.Requests != (fleet.Resources{CPU: 0.2, Memory: 32 * mib}) || got.Limits != (fleet.Resources{CPU: 0.3, Memory: 32 * mib}) || got.Env["GOMAXPROCS"] != "1" {
		t.Errorf("proposed %+v", got)
	}
	if math.Abs(p.CPUSaving-0.2) > 1e-9 || math.Abs(p.MemorySaving-0.75) > 1e-9 {
		t.Errorf("savings cpu %v memory %v, want 0.2 and 0.75", p.CPUSaving, p.MemorySaving)
	}

	// A lab floor above the plan raises memory, and GOMEMLIMIT by as much.
	f := PlanFrom(web, []fleet.Container{c}, 48*mib)
	if got := f.Proposed["app"]; got.Limits.Memory != 48*mib || got.Env["GOMEMLIMIT"] != fmt.Sprint(40*mib) {
		t.Errorf("with a 48MiB floor: %+v, want memory 48MiB and GOMEMLIMIT 40MiB", got)
	}
	if f.Hash() == p.Hash() {
		t.Error("plans with different settings share a hash")
	}
	if !strings.Contains(strings.Join(f.Reasons, "\n"), KeyFloor) {
		t.Errorf("reasons do not say the floor raised memory: %q", f.Reasons)
	}

	// Where the plan carries gofit's marker (GOFIT_RUN: the values gofit
	// chose, which the runtime library then follows as the limits move),
	// the raised GOMEMLIMIT is in it too: a marker that still named the
	// old value would make the library take the new one for the user's,
	// and leave it alone on every resize after the promotion.
	marked := unfitted()
	marked.Gofit.Env[fit.MarkerVar] = fmt.Sprintf("GOMAXPROCS=1,GOMEMLIMIT=%d", 24*mib)
	m := PlanFrom(web, []fleet.Container{marked}, 48*mib).Proposed["app"].Env
	if want := fmt.Sprintf("GOMAXPROCS=1,GOMEMLIMIT=%d", 40*mib); m[fit.MarkerVar] != want || m["GOMEMLIMIT"] != fmt.Sprint(40*mib) {
		t.Errorf("with a 48MiB floor: env %v, want %s=%s", m, fit.MarkerVar, want)
	}

	// A container without enough data leaves no plan.
	thin := unfitted()
	thin.Gofit.Missing = []string{"30 minutes of data"}
	if q := PlanFrom(web, []fleet.Container{thin}, 0); q.Ready() || len(q.Missing) != 1 {
		t.Errorf("plan from thin data: ready %v, missing %q", q.Ready(), q.Missing)
	}
	if q := PlanFrom(fleet.Workload{Namespace: "shop", Kind: "Deployment", Name: "other"}, []fleet.Container{unfitted()}, 0); q.Ready() {
		t.Error("a plan for a workload the analysis does not have")
	}
}

func TestWorth(t *testing.T) {
	c := unfitted()
	c.Findings = nil
	c.Gofit.CPURequest, c.Gofit.Memory = 0.24, 120*mib
	p := PlanFrom(web, []fleet.Container{c}, 0)
	if ok, why := p.Worth(0.15); ok {
		t.Errorf("a plan saving 4%% and 6%% with no finding is worth a trial: %s", why)
	}
	c.Gofit.Memory = 100 * mib
	if ok, why := PlanFrom(web, []fleet.Container{c}, 0).Worth(0.15); !ok {
		t.Errorf("a plan saving 22%% of memory is not worth a trial: %s", why)
	}
}

func pods(n int) []Pod {
	var out []Pod
	for i := range n {
		out = append(out, Pod{Name: fmt.Sprintf("web-%d", i), Node: fmt.Sprintf("node-%d", i%2), Ready: true})
	}
	return out
}

// TestLifecycle walks one workload through the loop: a trial on one of
// four pods, harm, the back-off, a second trial, promotion.
func TestLifecycle(t *testing.T) {
	pol := DefaultPolicy()
	plan := PlanFrom(web, []fleet.Container{unfitted()}, 0)
	in := Input{Now: t0, Mode: Auto, Plan: plan, Pods: pods(4), Policy: pol}

	a := Next(in)
	if a.Kind != StartTrial || len(a.Pods) != 1 || a.Next.Phase != Trialling || a.Next.Plan != plan.Hash() || a.Next.Proposed["app"].Env["GOMAXPROCS"] != "1" {
		t.Fatalf("first look: %+v", a)
	}
	in.Status = a.Next

	in.Now = t0.Add(30 * time.Minute)
	in.Judgement = &Judgement{}
	if a := Next(in); a.Kind != Wait {
		t.Errorf("mid-trial with no harm: %+v, want wait", a)
	}
	// A plan computed during the trial (it reads the trial's own pods) is
	// not the one judged.
	in.Plan = PlanFrom(web, []fleet.Container{unfitted()}, 64*mib)
	if a := Next(in); a.Kind != Wait {
		t.Errorf("mid-trial with a new plan: %+v, want wait (the trial keeps its plan)", a)
	}
	in.Plan = plan

	in.Judgement = &Judgement{Harmful: true, Reasons: []string{"restarts 3 vs 0"}}
	a = Next(in)
	if a.Kind != Rollback || !slices.Equal(a.Pods, in.Status.Pods) || a.Next.Phase != Stopped || !strings.Contains(a.Why, "restarts 3 vs 0") {
		t.Fatalf("harm: %+v", a)
	}
	in.Status, in.Judgement = a.Next, nil

	in.Now = in.Now.Add(24 * time.Hour)
	if a := Next(in); a.Kind != Wait || !strings.Contains(a.Why, "no new trial before") {
		t.Errorf("a day after harm: %+v, want the back-off", a)
	}
	// Nor is another plan (a plan over a sliding window drifts a little
	// at every look): the back-off is the workload's.
	other := PlanFrom(web, []fleet.Container{unfitted()}, 64*mib)
	if a := Next(Input{Now: in.Now, Mode: Auto, Plan: other, Status: in.Status, Pods: pods(4), Policy: pol}); a.Kind != Wait {
		t.Errorf("a different plan during the back-off: %+v, want a wait", a)
	}

	in.Now = in.Now.Add(pol.Backoff)
	a = Next(in)
	if a.Kind != StartTrial {
		t.Fatalf("after the back-off: %+v", a)
	}
	in.Status = a.Next
	in.Now = in.Now.Add(pol.Duration)
	in.Judgement = &Judgement{Promote: true, Reasons: []string{"p99_seconds same", "cpu_seconds_per_request better"}}
	in.Resize = Resize{Applied: true}
	a = Next(in)
	if a.Kind != Promote || a.Next.Phase != Promoted || a.Next.Proposed["app"].Limits.Memory != 32*mib {
		t.Fatalf("judged good in auto: %+v", a)
	}
	in.Status, in.Judgement = a.Next, nil
	if a := Next(in); a.Kind != None {
		t.Errorf("the promoted plan again: %+v, want none", a)
	}
	// A new plan waits until the history is mostly the promoted pods'.
	in.Plan = other
	if a := Next(in); a.Kind != Wait || !strings.Contains(a.Why, "no new trial before") {
		t.Errorf("a new plan right after a promotion: %+v, want a wait", a)
	}
}

func TestTrialEnds(t *testing.T) {
	pol := DefaultPolicy()
	plan := PlanFrom(web, []fleet.Container{unfitted()}, 0)
	start := Next(Input{Now: t0, Mode: Trial, Plan: plan, Pods: pods(4), Policy: pol})
	if start.Kind != StartTrial {
		t.Fatalf("start: %+v", start)
	}
	after := t0.Add(pol.Duration)
	good := &Judgement{Promote: true}
	for _, tc := range []struct {
		name  string
		in    func(*Input)
		kind  Kind
		phase Phase
	}{
		{"passed in mode trial", func(in *Input) { in.Judgement = good }, Pass, Passed},
		{"judged good, resize never applied", func(in *Input) { in.Judgement, in.Resize = good, Resize{} }, EndTrial, Stopped},
		{"resize infeasible", func(in *Input) {
			in.Resize, in.Now = Resize{Infeasible: "pod web-0: Node didn't have enough capacity"}, t0.Add(time.Minute)
		}, Rollback, Stopped},
		{"not good enough", func(in *Input) { in.Judgement = &Judgement{Reasons: []string{"p99_seconds undecided"}} }, EndTrial, Stopped},
		{"never judged", func(in *Input) {}, EndTrial, Stopped},
		{"kill switch", func(in *Input) { in.Policy.Paused, in.Now = true, t0.Add(time.Minute) }, Rollback, Idle},
		{"opted out", func(in *Input) { in.Mode, in.Now = Off, t0.Add(time.Minute) }, Rollback, Idle},
		{"down to recommend", func(in *Input) { in.Mode, in.Now = Recommend, t0.Add(time.Minute) }, Rollback, Idle},
		{"pods gone", func(in *Input) { in.Pods, in.Now = pods(4)[2:], t0.Add(time.Minute) }, EndTrial, Idle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Now: after, Mode: Trial, Plan: plan, Status: start.Next, Pods: pods(4), Policy: pol, Resize: Resize{Applied: true}}
			tc.in(&in)
			a := Next(in)
			if a.Kind != tc.kind || a.Next.Phase != tc.phase {
				t.Errorf("%+v: want %s to phase %q", a, tc.kind, tc.phase)
			}
			if (a.Kind == Rollback || a.Kind == EndTrial) && tc.name != "pods gone" && !slices.Equal(a.Pods, start.Pods) {
				t.Errorf("puts back %v, want the trial's %v", a.Pods, start.Pods)
			}
		})
	}
}

func TestNoTrial(t *testing.T) {
	pol := DefaultPolicy()
	plan := PlanFrom(web, []fleet.Container{unfitted()}, 0)
	paused := pol
	paused.Paused = true
	for _, tc := range []struct {
		name string
		in   Input
		kind Kind
		why  string
	}{
		{"not opted in", Input{Mode: Off, Plan: plan, Pods: pods(4), Policy: pol}, None, "not opted in"},
		{"one pod: no control", Input{Mode: Auto, Plan: plan, Pods: pods(1), Policy: pol}, Wait, "as many again for the control"},
		{"namespace full", Input{Mode: Auto, Plan: plan, Pods: pods(4), Policy: pol, Load: Load{Namespace: 1, Cluster: 1}}, Wait, "trials in the namespace"},
		{"cluster full", Input{Mode: Auto, Plan: plan, Pods: pods(4), Policy: pol, Load: Load{Cluster: 3}}, Wait, "in the cluster already"},
		{"kill switch", Input{Mode: Auto, Plan: plan, Pods: pods(4), Policy: paused}, Wait, "kill switch"},
		{"no plan", Input{Mode: Auto, Plan: Plan{Missing: []string{"container app: 30 minutes of data"}}, Pods: pods(4), Policy: pol}, Wait, "30 minutes"},
		{"recommend", Input{Mode: Recommend, Plan: plan, Pods: pods(4), Policy: pol}, DoRecommend, "answers gomaxprocs_above_limit"},
		{"recommended already", Input{Mode: Recommend, Plan: plan, Pods: pods(4), Policy: pol, Status: Status{Phase: Recommended, Plan: plan.Hash()}}, None, "already recommended"},
		{"rolling out", Input{Mode: Auto, Plan: plan, Pods: pods(4), Policy: pol, Blocked: "rolling out (2 of 4 pods updated, 5 in all)"}, Wait, "rolling out"},
		{"the whole pod's class would change", Input{Mode: Auto, Plan: plan, Pods: pods(4), Policy: pol,
			NotInPlace: "it moves the pods (with their other containers) from QoS class Burstable to Guaranteed"}, DoRecommend, "not tried: it moves the pods (with their other containers)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Now = t0
			a := Next(tc.in)
			if a.Kind != tc.kind || !strings.Contains(a.Why, tc.why) {
				t.Errorf("%+v: want %s saying %q", a, tc.kind, tc.why)
			}
			if a.Kind != StartTrial && len(a.Pods) > 0 {
				t.Errorf("touches pods %v", a.Pods)
			}
		})
	}
}

func TestPick(t *testing.T) {
	pol := DefaultPolicy()
	ps := pods(8)
	ps[0].Ready = false
	got, err := Pick(ps, pol)
	if err != nil {
		t.Fatal(err)
	}
	// 7 ready: a quarter is 1; with 8 ready it is 2, one on each node.
	if len(got) != 1 || got[0] == "web-0" {
		t.Errorf("pick of 7 ready: %v", got)
	}
	ps[0].Ready = true
	got, _ = Pick(ps, pol)
	if len(got) != 2 || got[0] != "web-0" || got[1] != "web-1" {
		t.Errorf("pick of 8 ready: %v, want one per node", got)
	}
	rev := slices.Clone(ps)
	slices.Reverse(rev)
	again, _ := Pick(rev, pol)
	if !slices.Equal(got, again) {
		t.Errorf("pick depends on the pods' order: %v then %v", got, again)
	}
	pol.MinPods = 2
	if _, err := Pick(pods(3), pol); err == nil {
		t.Error("a trial of 2 pods from 3 leaves fewer in the control")
	}
}

// TestGuaranteedStaysGuaranteed: a pod's QoS class cannot change in
// place; a Guaranteed workload's plan keeps requests at its limits, and
// a plan that would change the class anyway is not tried in place.
func TestGuaranteedStaysGuaranteed(t *testing.T) {
	p := PlanFrom(web, []fleet.Container{unfitted()}, 0)
	if QoS(p.Current) != Guaranteed || QoS(p.Proposed) != Guaranteed {
		t.Fatalf("QoS %s → %s, want Guaranteed kept", QoS(p.Current), QoS(p.Proposed))
	}
	if got := p.Proposed["app"]; got.Requests != (fleet.Resources{CPU: 0.3, Memory: 32 * mib}) || got.Limits != got.Requests {
		t.Errorf("proposed %+v, want requests at the limits (300m, 32MiB)", got)
	}
	if math.Abs(p.CPUSaving+0.2) > 1e-9 {
		t.Errorf("CPU saving %v, want -0.2 (the request rises to the 300m limit)", p.CPUSaving)
	}
	burstable := unfitted()
	burstable.Observed.Requests.CPU = 0.1
	b := PlanFrom(web, []fleet.Container{burstable}, 0)
	if QoS(b.Current) != Burstable || QoS(b.Proposed) != Burstable || b.Proposed["app"].Requests.CPU != 0.2 {
		t.Errorf("a Burstable workload: QoS %s → %s, proposed %+v", QoS(b.Current), QoS(b.Proposed), b.Proposed["app"])
	}
	bestEffort := unfitted()
	bestEffort.Observed.Requests, bestEffort.Observed.Limits = fleet.Resources{}, fleet.Resources{}
	e := PlanFrom(web, []fleet.Container{bestEffort}, 0)
	a := Next(Input{Now: t0, Mode: Auto, Plan: e, Pods: pods(4), Policy: DefaultPolicy()})
	if a.Kind != DoRecommend || !strings.Contains(a.Why, "not tried: it moves the pods from QoS class BestEffort to Burstable") {
		t.Errorf("a BestEffort workload in auto: %+v, want the recommendation, saying why it is not tried", a)
	}
	if b := Next(Input{Now: t0, Mode: Auto, Plan: e, Pods: pods(4), Policy: DefaultPolicy(), Status: a.Next}); b.Kind != Wait {
		t.Errorf("the same plan again: %+v, want a wait (recommended once)", b)
	}
	// A plan that adds a limit the pods lack could never be resized
	// back: recommended, not tried.
	noLimit := unfitted()
	noLimit.Observed.Limits.CPU = 0
	noLimit.Observed.Requests.CPU = 0.25
	n := PlanFrom(web, []fleet.Container{noLimit}, 0)
	if a := Next(Input{Now: t0, Mode: Auto, Plan: n, Pods: pods(4), Policy: DefaultPolicy()}); a.Kind != DoRecommend || !strings.Contains(a.Why, "adds a CPU limit") {
		t.Errorf("a plan adding a CPU limit: %+v, want the recommendation saying why", a)
	}
	if a := Next(Input{Now: t0, Mode: Recommend, Plan: e, Pods: pods(4), Policy: DefaultPolicy()}); a.Kind != DoRecommend {
		t.Errorf("a BestEffort workload in recommend: %+v, want the recommendation", a)
	}
}

// TestJudgeRestartsPerPod: the trial has fewer pods than the control;
// its restarts are weighed per pod.
func TestJudgeRestartsPerPod(t *testing.T) {
	v := func(metric string) experiment.Verdict {
		return experiment.Verdict{Arm: "plan", Metric: metric, Verdict: "same", Ratio: 1, Low: 0.95, High: 1.04, Level: 0.95, Margin: 0.10}
	}
	r := &experiment.Results{Experiment: "rightsize", Control: "current", Verdicts: []experiment.Verdict{v("p99_seconds"), v("cpu_seconds_per_request")},
		Arms: []experiment.ArmResult{{Name: "current", Pods: []string{"a", "b", "c"}, Restarts: 3}, {Name: "plan", Pods: []string{"d"}, Restarts: 2}}}
	if j, _ := Judge(r, "plan"); j.Promote {
		t.Errorf("2 restarts on 1 pod against 3 on 3: promoted %+v", j)
	}
	r.Arms[1].Restarts = 1
	if j, _ := Judge(r, "plan"); !j.Promote {
		t.Errorf("1 restart on 1 pod against 3 on 3: not promoted %+v", j)
	}
}

// TestPlanUnderAnHPA: fleet leaves CPU alone under an HPA on CPU (its
// figures are null); the plan keeps the pods' CPU, and is a plan with a
// hash and settings the API takes (before, NaN reached the resize).
func TestPlanUnderAnHPA(t *testing.T) {
	c := unfitted()
	c.Gofit.CPURequest, c.Gofit.CPULimit, c.Gofit.CPULimitKept = fleet.Num(math.NaN()), fleet.Num(math.NaN()), true
	p := PlanFrom(web, []fleet.Container{c}, 0)
	got := p.Proposed["app"]
	if got.Requests.CPU != 0.25 || got.Limits.CPU != 0.25 || math.IsNaN(got.Requests.Memory) {
		t.Fatalf("proposed %+v, want the pods' own CPU (250m)", got)
	}
	if p.Hash() == PlanFrom(web, []fleet.Container{unfitted()}, 0).Hash() {
		t.Error("two different plans share a hash")
	}
	for _, q := range resourcesOf(got) {
		for k, v := range q {
			if s, ok := v.(string); !ok || strings.HasPrefix(s, "-") {
				t.Errorf("%s: %v", k, v)
			}
		}
	}
}

// TestJudge: promotion is a non-inferiority test on p99 and CPU per
// request, beside harm, OOM kills and restarts.
func TestJudge(t *testing.T) {
	results := func(p99, cpu [2]float64, mut func(a, c *experiment.ArmResult)) *experiment.Results {
		r := &experiment.Results{Experiment: "rightsize-web", Control: ArmControl,
			Arms: []experiment.ArmResult{{Name: ArmControl, Pods: []string{"c1", "c2", "c3"}}, {Name: ArmPlan, Pods: []string{"t1"}}}}
		if mut != nil {
			mut(&r.Arms[1], &r.Arms[0])
		}
		for _, v := range []struct {
			m      string
			iv     [2]float64
			margin float64
		}{{"p99_seconds", p99, 0.10}, {"cpu_seconds_per_request", cpu, 0.05}} {
			if v.iv == [2]float64{} {
				continue
			}
			ratio := (v.iv[0] + v.iv[1]) / 2
			r.Verdicts = append(r.Verdicts, experiment.Verdict{Arm: ArmPlan, Metric: v.m, Ratio: experiment.F(ratio),
				Low: experiment.F(v.iv[0]), High: experiment.F(v.iv[1]), Margin: v.margin, Level: 0.95,
				Verdict: stats.RatioVerdict(stats.Interval{Value: ratio, Low: v.iv[0], High: v.iv[1]}, stats.LowerIsBetter, v.margin)})
		}
		return r
	}
	for _, tc := range []struct {
		name             string
		r                *experiment.Results
		promote, harmful bool
		reason           string
	}{
		// Neither "same" nor "better" (the interval crosses 1 and reaches
		// below 1 - margin), yet no more than 5% and 10% worse: promoted.
		{"wide but not worse", results([2]float64{0.70, 1.08}, [2]float64{0.80, 1.04}, nil), true, false, "at most 5% worse"},
		{"better", results([2]float64{0.40, 0.60}, [2]float64{0.85, 0.95}, nil), true, false, "at most 10% worse"},
		// Worse, but by less than the margin: the margin is the cost a
		// cheaper size may have.
		{"worse within the margin", results([2]float64{1.01, 1.09}, [2]float64{0.98, 1.02}, nil), true, false, "at most 10% worse"},
		{"p99 may be 12% worse", results([2]float64{0.90, 1.12}, [2]float64{0.98, 1.02}, nil), false, false, "p99_seconds ×1.010 (95% interval 0.900–1.120, undecided): may be more than 10% worse"},
		{"CPU worse", results([2]float64{0.90, 1.05}, [2]float64{1.10, 1.30}, nil), false, false, "may be more than 5% worse"},
		{"no CPU verdict", results([2]float64{0.90, 1.05}, [2]float64{}, nil), false, false, "no verdict on cpu_seconds_per_request"},
		{"no interval", results([2]float64{math.NaN(), math.NaN()}, [2]float64{0.98, 1.02}, nil), false, false, "no interval"},
		{"an OOM kill", results([2]float64{0.9, 1.0}, [2]float64{0.9, 1.0}, func(a, c *experiment.ArmResult) { a.OOMKills = 1 }), false, false, "1 OOM kills"},
		{"more restarts per pod", results([2]float64{0.9, 1.0}, [2]float64{0.9, 1.0}, func(a, c *experiment.ArmResult) { a.Restarts, c.Restarts = 1, 2 }), false, false, "1 restarts in the trial's 1 pods against 2 in the control's 3"},
		{"harm", results([2]float64{0.9, 1.0}, [2]float64{0.9, 1.0}, func(a, c *experiment.ArmResult) { a.Harmful, a.Harms = true, []string{"restarts 4 vs 0"} }), false, true, "restarts 4 vs 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Judge(tc.r, ArmPlan)
			if err != nil {
				t.Fatal(err)
			}
			if j.Promote != tc.promote || j.Harmful != tc.harmful || !strings.Contains(strings.Join(j.Reasons, "; "), tc.reason) {
				t.Errorf("Judge: %+v, want promote %v, harmful %v, a reason with %q", j, tc.promote, tc.harmful, tc.reason)
			}
		})
	}
	if _, err := Judge(results([2]float64{0.9, 1}, [2]float64{0.9, 1}, nil), "other"); err == nil || !strings.Contains(err.Error(), `no arm "other"`) {
		t.Errorf("Judge of a missing arm: %v", err)
	}
}

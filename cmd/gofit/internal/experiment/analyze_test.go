package experiment

import (
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/admission"
)

// bounds are a classic histogram's buckets (seconds), as a service would
// declare them.
var bounds = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, math.Inf(1)}

// arm describes how a synthetic arm behaves against the control: factors
// on latency and CPU per request, and harm.
type arm struct {
	name        string
	latency     float64 // × the control's latency
	cpu         float64 // × CPU per request
	errors      float64 // error share
	oomInWindow int     // from this window on, an OOM kill per pod and window; -1 none
	// pods is the arm's pod count (0: 2); podSpread the standard
	// deviation (log scale) of each pod's own lasting offset in latency
	// and CPU: a pod on a slower core, or whose CFS period falls badly
	// against its traffic, for its whole life (0: none).
	pods      int
	podSpread float64
}

// synth makes n paired windows of a shared, autocorrelated traffic (AR(1)
// with a slow swing over the span) for each arm's 2 pods, each pod with
// its own drift (AR(1)) and noise, as Prometheus would return them.
func synth(rng *rand.Rand, n int, arms []arm) Input {
	load := make([]float64, n)
	x := 0.0
	for i := range load {
		x = 0.8*x + 0.3*rng.NormFloat64()
		load[i] = 200 * math.Exp(x) * (1 + 0.3*math.Sin(float64(i)/float64(n)*math.Pi))
	}
	in := Input{Experiment: "gmp", Namespace: "shop", Control: arms[0].name, From: time.Unix(1_700_000_000, 0), Window: time.Minute,
		Have: map[string]bool{"latency": true, "cpu": true, "throttling": true, "gc": true, "pauses": true, "memory": true, "heap": true}, Seed: 1, Resamples: 400}
	for _, a := range arms {
		ar := Arm{Name: a.name}
		pods := a.pods
		if pods == 0 {
			pods = 2
		}
		for p := range pods {
			ar.Pods = append(ar.Pods, fmt.Sprintf("%s-%d", a.name, p+1))
		}
		for range ar.Pods {
			var ws []Window
			ay, own := 0.0, 0.0
			if a.podSpread > 0 {
				own = a.podSpread * rng.NormFloat64()
			}
			for i := range n {
				ay = 0.6*ay + 0.08*rng.NormFloat64() // the pod drifts on its own too
				req := load[i] * 60 * math.Exp(0.05*rng.NormFloat64())
				// Latency: lognormal, slower under load, shared by the moment.
				mu := math.Log(0.02*a.latency) + 0.3*math.Log(load[i]/200) + ay + own
				w := Window{Has: HasAll, Requests: math.Round(req)}
				w.Errors = math.Round(req * a.errors)
				prev := 0.0
				lower := 0.0
				for _, ub := range bounds {
					c := 1.0
					if !math.IsInf(ub, 1) {
						c = 0.5 * math.Erfc(-(math.Log(ub)-mu)/(0.7*math.Sqrt2))
					}
					w.Latency = append(w.Latency, Bucket{lower, ub, math.Round((c - prev) * w.Requests)})
					prev, lower = c, ub
				}
				w.CPUSeconds = w.Requests * 0.002 * a.cpu * math.Exp(0.04*rng.NormFloat64()+(ay+own)/4)
				w.Periods = 600
				w.Throttled = w.Periods * math.Min(1, 0.1*load[i]/200*a.cpu*math.Exp(0.1*rng.NormFloat64()))
				w.GoBusy = w.CPUSeconds * 1.05
				w.GCSeconds = w.GoBusy * 0.1 * math.Exp(0.1*rng.NormFloat64())
				w.Pauses = 60
				w.PauseSecs = w.Pauses * 0.0003 * math.Exp(0.1*rng.NormFloat64())
				w.WorkingSet = 80e6 * math.Exp(0.02*rng.NormFloat64())
				w.Heap = 30e6 * math.Exp(0.03*rng.NormFloat64())
				if a.oomInWindow >= 0 && i >= a.oomInWindow {
					w.OOMKills = 1
				}
				ws = append(ws, w)
			}
			ar.Windows = append(ar.Windows, ws)
		}
		in.Arms = append(in.Arms, ar)
	}
	return in
}

func TestQuantileInterpolatesLikePrometheus(t *testing.T) {
	ws := []Window{{Latency: []Bucket{{0, 0.1, 50}, {0.1, 0.2, 50}, {0.2, math.Inf(1), 0}}}}
	if q := Quantile(ws, 0.75); math.Abs(q-0.15) > 1e-12 {
		t.Errorf("p75 = %v, want 0.15 (halfway into (0.1, 0.2])", q)
	}
	ws[0].Latency[2].Count = 10
	if q := Quantile(ws, 0.999); q != 0.2 {
		t.Errorf("p99.9 in +Inf bucket = %v, want the highest finite bound 0.2", q)
	}
	if q := Quantile([]Window{{}}, 0.5); !math.IsNaN(q) {
		t.Errorf("quantile of nothing = %v", q)
	}
}

func verdictOf(r *Results, arm, metric string) Verdict {
	for _, v := range r.Verdicts {
		if v.Arm == arm && v.Metric == metric {
			return v
		}
	}
	return Verdict{}
}

func TestAnalyzeCallsARealDifference(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	in := synth(rng, 60, []arm{{name: "fitted", latency: 1, cpu: 1, oomInWindow: -1}, {name: "two", latency: 1.5, cpu: 1.3, oomInWindow: -1}, {name: "same", latency: 1, cpu: 1, oomInWindow: -1}})
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"p99_seconds", "p50_seconds", "cpu_seconds_per_request"} {
		if v := verdictOf(r, "two", m); v.Verdict != "worse" {
			t.Errorf("two %s: %+v, want worse", m, v)
		}
		if v := verdictOf(r, "same", m); v.Verdict == "worse" || v.Verdict == "better" {
			t.Errorf("same %s: %+v, want no difference", m, v)
		}
	}
	if v := verdictOf(r, "two", "cpu_seconds_per_request"); math.Abs(float64(v.Ratio)-1.3) > 0.05 {
		t.Errorf("two's CPU/request ratio %v, want about 1.3", v.Ratio)
	}
	for _, a := range r.Arms {
		for _, m := range []string{"p99_seconds", "cpu_seconds_per_request", "requests_per_second"} {
			v, ok := a.Metrics[m]
			if !ok || !(v.Low <= v.Value && v.Value <= v.High) {
				t.Errorf("arm %s %s: %+v", a.Name, m, v)
			}
		}
		// two's p99 is 1.5× the control's, beyond the harm margin of
		// 1.25×: the anytime-valid harm tests (harm.go) may say so,
		// on latency alone. The others are harmless.
		if a.Harmful && (a.Name != "two" || len(a.Harms) != 1 || !strings.HasPrefix(a.Harms[0], "latency p99 beyond the harm margin 1.25×")) {
			t.Errorf("arm %s harmful: %v", a.Name, a.Harms)
		}
	}
}

func TestAnalyzeFlagsHarmFirst(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	in := synth(rng, 40, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "oom", latency: 0.8, cpu: 0.8, oomInWindow: 7}, {name: "errs", latency: 1, cpu: 1, errors: 0.02, oomInWindow: -1}})
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"oom", "errs"} {
		var first Verdict
		for _, v := range r.Verdicts {
			if v.Arm == name {
				first = v
				break
			}
		}
		if first.Verdict != Harmful {
			t.Errorf("arm %s: first verdict %+v, want harmful", name, first)
		}
	}
	if r.Arms[0].Harmful {
		t.Errorf("control harmful: %v", r.Arms[0].Harms)
	}
}

// TestAnalyzeLatencyHarmMargin: an arm whose p99 is well beyond
// (1+Harm.Latency) times the control's is harmful, one within the margin
// is not, and the margin is the one given (--harm-latency). The buckets
// blunt a factor on latency: slow's p99 is about 2.5× the control's
// (95% interval 2.35 to 2.72), near's 1.1× (0.98 to 1.27).
func TestAnalyzeLatencyHarmMargin(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	in := synth(rng, 40, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "slow", latency: 3, cpu: 1, oomInWindow: -1}, {name: "near", latency: 1.1, cpu: 1, oomInWindow: -1}})
	for _, tc := range []struct {
		margin float64 // 0: DefaultHarm's 0.25
		slow   string  // slow's harm, "" for none; near is never harmful
	}{
		{0, "beyond the harm margin 1.25×"},
		{1, "beyond the harm margin 2×"},
		{2, ""}, // within 3×
	} {
		in.Harm = Harm{}
		if tc.margin > 0 {
			in.Harm = Harm{Rate: 0.5, ErrorShare: 0.001, Latency: tc.margin}
		}
		r, err := Analyze(in)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []string{"", tc.slow, ""} {
			a := r.Arms[i]
			got := strings.Join(a.Harms, "; ")
			if a.Harmful != (want != "") || (want == "") != (got == "") || !strings.Contains(got, want) || (want != "" && !strings.HasPrefix(got, "latency p99 ")) {
				t.Errorf("margin %g: arm %s harmful %v (%q), want %q", tc.margin, a.Name, a.Harmful, got, want)
			}
		}
		if v := verdictOf(r, "slow", "harm"); (v.Verdict == Harmful) != (tc.slow != "") {
			t.Errorf("margin %g: slow's harm verdict %+v", tc.margin, v)
		}
	}
}

// Harm is relative to the control: a restart or an OOM kill is not harm
// by itself (the control has them too, or it is one), many beyond the
// control's are.
func TestAnalyzeHarmIsRelativeToTheControl(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	in := synth(rng, 40, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "one", latency: 1, cpu: 1, oomInWindow: -1}, {name: "both", latency: 1, cpu: 1, oomInWindow: 20}, {name: "many", latency: 1, cpu: 1, oomInWindow: -1}})
	in.Arms[1].Windows[0][10].Restarts = 1
	in.Arms[1].Windows[1][30].OOMKills = 1
	for p := range in.Arms[0].Windows {
		for i := 20; i < 40; i++ {
			in.Arms[0].Windows[p][i].OOMKills = 1 // the control OOMs as often as "both"
		}
	}
	for p := range in.Arms[3].Windows {
		for i := 30; i < 40; i += 2 {
			in.Arms[3].Windows[p][i].Restarts = 1 // 10 restarts against none
		}
	}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, false, false, true} {
		if r.Arms[i].Harmful != want {
			t.Errorf("arm %s harmful %v, want %v: %v", r.Arms[i].Name, r.Arms[i].Harmful, want, r.Arms[i].Harms)
		}
	}
}

// TestAnalyzeFlagsUnequalTrafficAndFewPods: an arm a balancer sends less
// to is flagged (its latency would look better); an arm of fewer than 3
// pods is warned about.
func TestAnalyzeFlagsUnequalTrafficAndFewPods(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	in := synth(rng, 40, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "less", latency: 1, cpu: 1, oomInWindow: -1}, {name: "even", latency: 1, cpu: 1, oomInWindow: -1}})
	for _, ws := range in.Arms[1].Windows {
		for i := range ws {
			ws[i].Requests = math.Round(ws[i].Requests * 0.7)
			for j := range ws[i].Latency {
				ws[i].Latency[j].Count = math.Round(ws[i].Latency[j].Count * 0.7)
			}
		}
	}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Arms[1].Traffic == "" || r.Arms[2].Traffic != "" {
		t.Errorf("traffic: less %q, even %q", r.Arms[1].Traffic, r.Arms[2].Traffic)
	}
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "arm less gets 0.697") || !strings.Contains(notes, "arm c has 2 pods, fewer than 3") {
		t.Errorf("notes:\n%s", notes)
	}
}

func TestAnalyzeTooFewWindowsIsUndecided(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	r, err := Analyze(synth(rng, 5, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "t", latency: 3, cpu: 3, oomInWindow: -1}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range r.Verdicts {
		if v.Verdict != "undecided" {
			t.Errorf("%s with 5 windows: %s", v.Metric, v.Verdict)
		}
	}
	if len(r.Notes) == 0 {
		t.Error("no note about too few windows")
	}
}

func TestAnalyzeRejectsUnpairedWindows(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	in := synth(rng, 10, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "t", latency: 1, cpu: 1, oomInWindow: -1}})
	in.Arms[1].Windows[1] = in.Arms[1].Windows[1][:9]
	if _, err := Analyze(in); err == nil {
		t.Error("unpaired windows accepted")
	}
	in.Control = "nope"
	if _, err := Analyze(in); err == nil {
		t.Error("missing control accepted")
	}
}

// An arm without a source (GOFIT=off switches gofit's own metrics off)
// has no figure for it, and no verdict: never a zero that looks better.
func TestAnalyzeMissingSourceIsNoFigure(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	in := synth(rng, 30, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "off", latency: 1, cpu: 1, oomInWindow: -1}})
	for _, ws := range in.Arms[1].Windows {
		for i := range ws {
			ws[i].Has &^= HasCPU | HasMemory
			ws[i].CPUSeconds, ws[i].WorkingSet = 0, 0
		}
	}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"cpu_seconds_per_request", "cpu_cores", "working_set_bytes"} {
		if v := verdictOf(r, "off", m); v.Verdict != "undecided" || v.Detail == "" {
			t.Errorf("%s without data: %+v", m, v)
		}
		if v := r.Arms[1].Metrics[m]; !math.IsNaN(float64(v.Value)) {
			t.Errorf("%s without data: value %v", m, v.Value)
		}
	}
	if v := verdictOf(r, "off", "p99_seconds"); v.Verdict == "undecided" && v.Detail != "" {
		t.Errorf("p99 has data: %+v", v)
	}
}

func TestSpecOfLivePods(t *testing.T) {
	pod := func(name, arm string, restarts int32, oom bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{admission.LabelExperiment: "g", admission.LabelArm: arm},
			Annotations: map[string]string{admission.AnnotationExperiment: "name: g\ncontrol: b\nmaxDuration: 3h\narms: [{name: a, fit: none}, {name: b, fit: gofit}]"}}}
		cs := corev1.ContainerStatus{Name: "app", RestartCount: restarts}
		if oom {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "OOMKilled"}
		}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		return p
	}
	s := specOf([]corev1.Pod{pod("p1", "a", 0, false), pod("p2", "b", 2, true), pod("p3", "a", 1, false)}, "")
	if fmt.Sprint(s.Arms) != "[a b]" || s.Control != "b" || len(s.Pods["a"]) != 2 || s.Restarts["b"] != 2 || s.OOMKills["b"] != 1 || s.OOMKills["a"] != 0 || s.Restarts["a"] != 1 || s.MaxDuration != 3*time.Hour {
		t.Errorf("spec %+v", s)
	}
}

// TestAnalyzeStalledArmIsHarmful: near its memory limit a Go service
// often stalls rather than dies: it fails its readiness probe and its
// scrapes, so its latency and errors go missing rather than bad, and it
// never restarts. The e2e's guard judged such an arm (GOGC=off) harmless
// for 12 minutes. Time not ready is now harm; a blip the control has as
// well is not.
func TestAnalyzeStalledArmIsHarmful(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	in := synth(rng, 40, []arm{{name: "c", latency: 1, cpu: 1, oomInWindow: -1}, {name: "stall", latency: 1, cpu: 1, oomInWindow: -1}, {name: "blip", latency: 1, cpu: 1, oomInWindow: -1}})
	in.Have["ready"] = true
	for _, a := range in.Arms {
		for _, ws := range a.Windows {
			for i := range ws {
				ws[i].Has |= HasReady
			}
		}
	}
	for _, ws := range in.Arms[1].Windows {
		for i := 15; i < 40; i++ {
			// Stalled: cAdvisor still sees the cgroup; the service
			// answers nothing.
			ws[i] = Window{Has: HasReady | HasCPU | HasMemory, Unready: 1, CPUSeconds: 0.01, WorkingSet: 50e6}
		}
	}
	in.Arms[0].Windows[1][12].Unready = 0.5 // the control's pods blip too
	in.Arms[2].Windows[0][30].Unready = 0.5
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, false} {
		if r.Arms[i].Harmful != want {
			t.Errorf("arm %s harmful %v, want %v: %v", r.Arms[i].Name, r.Arms[i].Harmful, want, r.Arms[i].Harms)
		}
	}
	if h := strings.Join(r.Arms[1].Harms, "; "); !strings.Contains(h, "not ready 62.5% of the time") {
		t.Errorf("stall's harms %q: want the time not ready named", h)
	}
	if got := float64(r.Arms[0].Unready); got != 0.5/80 {
		t.Errorf("control's share not ready %v, want %v", got, 0.5/80)
	}
	// A control without readiness data is unknown, never ready: the
	// stalled arm is not judged on it, and the notes say so.
	for _, ws := range in.Arms[0].Windows {
		for i := range ws {
			ws[i].Has &^= HasReady
		}
	}
	if r, err = Analyze(in); err != nil || r.Arms[1].Harmful || !strings.Contains(strings.Join(r.Notes, "\n"), "arm stall: time not ready not judged") {
		t.Errorf("control without readiness: stall harmful %v %v, notes %q (%v)", r.Arms[1].Harmful, r.Arms[1].Harms, r.Notes, err)
	}
	// Without a readiness source the share is unknown, never 0.
	in.Have["ready"] = false
	if r, err = Analyze(in); err != nil || !math.IsNaN(float64(r.Arms[0].Unready)) {
		t.Errorf("no source: share %v (%v), want NaN", r.Arms[0].Unready, err)
	}
}

// The Go runtime updates its CPU classes only at a GC, so a pod that
// collects every few windows shows no GC CPU and no busy CPU in most
// windows (CI, 2026-11-29: a fitted arm of 2 pods at 0.06% GC share). A
// resample whose control collected nothing is an arm infinitely worse,
// not an undefined one: the starved arm must still be called worse.
func TestAnalyzeSparseGCControl(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	in := synth(rng, 24, []arm{{name: "fitted", latency: 1, cpu: 1, oomInWindow: -1}, {name: "again", latency: 1, cpu: 1, oomInWindow: -1}, {name: "starved", latency: 1, cpu: 1.3, oomInWindow: -1}})
	for a, every := range []int{12, 12, 1} {
		for p, ws := range in.Arms[a].Windows {
			for i := range ws {
				switch {
				case every == 1:
					ws[i].GCSeconds = ws[i].GoBusy * 0.2
				case (i+3*p)%every == 0:
					// One GC's snapshot: every busy second since the last.
					ws[i].GoBusy *= float64(every)
					ws[i].GCSeconds = ws[i].GoBusy * 0.0006
				default:
					ws[i].GoBusy, ws[i].GCSeconds = 0, 0
				}
			}
		}
	}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	if v := verdictOf(r, "starved", "gc_cpu_share"); v.Verdict != "worse" || !(float64(v.Low) > 1) {
		t.Errorf("starved gc_cpu_share: %+v, want worse with a low end above 1", v)
	}
	if v := verdictOf(r, "again", "gc_cpu_share"); v.Verdict == "worse" || v.Verdict == "better" {
		t.Errorf("again gc_cpu_share: %+v, want no difference", v)
	}
	if v := r.Arms[0].Metrics["gc_cpu_share"]; !(v.Low > 0 && v.Low <= v.Value && v.Value <= v.High && !math.IsInf(float64(v.High), 0)) {
		t.Errorf("fitted's own gc_cpu_share: %+v, want a finite interval around it", v)
	}
}

package experiment

import (
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/kube/admission"
)

// guardSeq is the e2e guard's plan (kube/e2e guardArgs: a look every
// 30 s over 10 minutes).
func guardSeq(t *testing.T) *Sequential {
	t.Helper()
	seq, err := NewSequential(Looks{Every: 30 * time.Second, Planned: 10 * time.Minute, Alpha: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// nogcShape is issue 57's failed run, 40 windows of 15 s and 2 pods a
// side: the control base, and nogc with restarts (5 a pod, 10 in all,
// against none) and/or time not ready (40% against base's 8%).
func nogcShape(seed int64, restarts, unready bool) Input {
	rng := rand.New(rand.NewSource(seed))
	in := synth(rng, 40, []arm{{name: "base", latency: 1, cpu: 1, oomInWindow: -1}, {name: "nogc", latency: 1, cpu: 1, oomInWindow: -1}})
	withReadiness(&in)
	for p, ws := range in.Arms[0].Windows {
		for i := range ws {
			if (i+5*p)%5 == 2 {
				ws[i].Unready = 0.4 // 8 windows of 40 at 40%: 8%
			}
		}
	}
	for p, ws := range in.Arms[1].Windows {
		for i := range ws {
			phase := (i + 5*p) % 10
			if unready && phase >= 6 {
				ws[i].Unready = 1 // 16 of 40 windows: 40%
			}
			if restarts && phase == 9 && i >= 10 {
				ws[i].Restarts = 1
			}
		}
	}
	if restarts {
		// 10 in all, 5 a pod, from the first quarter on.
		for p, ws := range in.Arms[1].Windows {
			n := 0
			for i := range ws {
				n += int(ws[i].Restarts)
			}
			for i := 12; n < 5; i += 3 {
				if ws[i].Restarts == 0 {
					ws[i].Restarts = 1
					n++
				}
			}
			_ = p
		}
	}
	return in
}

// withReadiness makes in's windows the guard's on the node: 15 s, each
// with the pod's time not ready.
func withReadiness(in *Input) {
	in.Window = 15 * time.Second
	in.Have["ready"] = true
	for _, a := range in.Arms {
		for _, ws := range a.Windows {
			for i := range ws {
				ws[i].Has |= HasReady
			}
		}
	}
}

// TestGuardStopsTheFailedRunsArm is issue 57's proof: an arm with 10
// restarts against none, or not ready 40% of the time against 8%, over
// 40 windows with 2 pods a side, is harmful to the guard's decision. The
// planned-looks harm tests let all three go (harms=0 at every look of
// the e2e's 12 minutes): the count test at Pocock's level for 16 tests
// and 20 looks, and a pod-level bootstrap of 2 of 2 pods whose interval
// at that level could not exclude 1.
func TestGuardStopsTheFailedRunsArm(t *testing.T) {
	for _, tc := range []struct {
		name              string
		restarts, unready bool
	}{{"restarts", true, false}, {"unready", false, true}, {"both", true, true}} {
		in := nogcShape(57, tc.restarts, tc.unready)
		in.Seq, in.VerdictsOnly, in.Resamples = guardSeq(t), true, 200
		var restarts float64
		for _, ws := range in.Arms[1].Windows {
			for _, w := range ws {
				restarts += w.Restarts
			}
		}
		if tc.restarts && restarts != 10 {
			t.Fatalf("%s: the shape has %v restarts, want 10", tc.name, restarts)
		}
		r, err := Analyze(in)
		if err != nil {
			t.Fatal(err)
		}
		ds := Decide(r, admission.GuardStatus{})
		if len(ds) != 1 || ds[0].Arm != "nogc" {
			t.Errorf("%s: decisions %+v, want nogc stopped (evidence %v, bar %v; unready %v against %v)", tc.name, ds, r.Arms[1].HarmEvidence, 1/r.HarmAlpha, r.Arms[1].Unready, r.Arms[0].Unready)
			continue
		}
		t.Logf("%s: stopped at %v: %s", tc.name, r.Arms[1].HarmfulAt.Sub(in.From), ds[0].Reason)
		want := map[string]string{"restarts": "restarts against 0 in base", "unready": "of the time against base's"}
		for k, s := range want {
			if (k == "restarts" && tc.restarts || k == "unready" && tc.unready) && tc.name != "both" && !strings.Contains(ds[0].Reason, s) {
				t.Errorf("%s: reason %q: want %q", tc.name, ds[0].Reason, s)
			}
		}
	}
}

// A harm one pod alone carries (a crash loop on a bad node) does not
// stop an arm of two: the other pod has none.
func TestHarmOnOnePodIsNotTheArms(t *testing.T) {
	in := nogcShape(58, false, false)
	in.Seq, in.VerdictsOnly, in.Resamples = guardSeq(t), true, 200
	for i := 5; i < 40; i += 2 {
		in.Arms[1].Windows[0][i].Restarts = 1
		in.Arms[1].Windows[0][i].Unready = 1
	}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.Arms[1].Harmful {
		t.Errorf("one pod's crash loop stopped the arm: %v", r.Arms[1].Harms)
	}
}

// TestUnreadyTestHoldsUnderABimodalControl: the time-not-ready e-process
// is a test supermartingale under its null, E[arm's share] ≤
// (1+rate)·E[control's] + floor, even where the control is often wholly
// unready. With the bar capped at 1 it was not (min is concave): a
// control unready all or none of each window, half and half, and an arm
// at exactly the null's bound grew the e-value past 1/α (review of
// issue 57's fix).
func TestUnreadyTestHoldsUnderABimodalControl(t *testing.T) {
	harm := Harm{Rate: 0.5, Unready: 0.01}
	const n = 400
	mk := func(name string, share func(i int) float64) *Arm {
		a := &Arm{Name: name, Pods: []string{name + "-1"}, Windows: [][]Window{make([]Window, n)}}
		for i := range n {
			a.Windows[0][i] = Window{Has: HasReady, Unready: share(i)}
		}
		return a
	}
	ctrl := mk("c", func(i int) float64 { return float64(i % 2) })
	// The null's bound: (1+0.5)·0.5 + 0.01.
	arm := mk("a", func(int) float64 { return 1.5*0.5 + 0.01 })
	tst := unreadyTest(arm, ctrl, n, harm)
	if e := tst.e[n-1]; e >= 1 {
		t.Errorf("e-value after %d windows at the null's bound: %.3g, want below 1 (a supermartingale from 1)", n, e)
	}
	for i, e := range tst.e {
		if e >= 20 {
			t.Fatalf("e-value %.3g reached 1/α at window %d under the null", e, i)
		}
	}
}

// crashLoopShape is the experiment-guard step's nogc arm as the kubelet
// runs it: each of its pods' heaps reaches the memory limit growth
// seconds after each start, the kernel OOM-kills it, and the kubelet
// restarts it after CrashLoopBackOff's wait (10 s, doubling, at most
// 5 minutes) and the container's own start (startup seconds: about one
// on a real node, 60 to 120 under the e2e node's emulated CPU); the pod
// is not ready from the kill until a readiness probe (every 5 s) finds
// it up again. The first start is at 30 s, the pods 5 s apart. 40
// windows of 15 s; the control as nogcShape's. It returns the input and
// the time of the arm's first restart.
func crashLoopShape(pods int, growth, startup float64) (Input, time.Time) {
	rng := rand.New(rand.NewSource(int64(pods*1000) + int64(growth)))
	in := synth(rng, 40, []arm{{name: "base", latency: 1, cpu: 1, oomInWindow: -1, pods: pods},
		{name: "nogc", latency: 1, cpu: 1, oomInWindow: -1, pods: pods}})
	withReadiness(&in)
	const span = 40 * 15.0
	first := math.Inf(1)
	for p, ws := range in.Arms[1].Windows {
		start, wait := 30+5*float64(p), 10.0
		for {
			kill := start + growth
			if kill >= span {
				break
			}
			first = math.Min(first, kill)
			ws[int(kill/15)].Restarts++
			ws[int(kill/15)].OOMKills++
			up := kill + wait + startup
			ready := math.Min(span, math.Ceil(up/5)*5+5)
			for t := kill; t < ready; t++ {
				ws[int(t/15)].Unready += 1.0 / 15
			}
			start, wait = up, math.Min(2*wait, 300)
		}
	}
	return in, in.From.Add(time.Duration(first * float64(time.Second)))
}

// TestGuardStopsTheStepsCrashLoopInTime: issue 57 asks the node's step to
// stop nogc within 3 minutes of its first restart. The guard sees a
// restart about 45 s late (a scrape, the 15 s window, a look every
// 15 s), so the harm must cross within 135 s of it. The guard needs 9
// ends against none, and the back-off spaces each pod's out (10, 20,
// 40 s): with 5 pods an arm whose lives last 30 s it crosses in the
// arm's second round, 60 s after the first restart where a container
// starts in a second; with 3 pods it needs every pod's third, 85-105 s
// after (the node took 108-189 s, once over 3 minutes in CI); with 2
// pods whose heaps took a minute to fill (the step's first load,
// 315-363 s on the node) no valid test could. On the e2e's emulated
// node a container's start takes 60 to 120 s, which put 5 pods'
// second round past the bound (181-281 s there, 2026-12-07), and 9 pods
// an arm, which crossed in their first round, overloaded the node. The
// first-end test (endsTest: a pod that has ended leaves the risk set)
// calls 5 of 5 first ends against none in the first round, however
// slow the restarts (eleventh session).
func TestGuardStopsTheStepsCrashLoopInTime(t *testing.T) {
	for _, tc := range []struct {
		pods            int
		growth, startup float64
		within          time.Duration // 0: only say when
	}{{5, 30, 1, 135 * time.Second}, {3, 20, 1, 135 * time.Second}, {3, 30, 1, 0}, {2, 20, 1, 0}, {2, 60, 1, 0},
		{5, 30, 90, 135 * time.Second}, {5, 30, 120, 135 * time.Second}, {9, 30, 90, 135 * time.Second}, {9, 30, 120, 135 * time.Second}} {
		in, first := crashLoopShape(tc.pods, tc.growth, tc.startup)
		in.Seq, in.VerdictsOnly, in.Resamples = guardSeq(t), true, 200
		r, err := Analyze(in)
		if err != nil {
			t.Fatal(err)
		}
		a := r.Arms[1]
		if a.HarmfulAt == nil {
			if tc.within > 0 {
				t.Errorf("%d pods, growth %vs, start %vs: nogc never harmful (restarts %v, evidence %v)", tc.pods, tc.growth, tc.startup, a.Restarts, a.HarmEvidence)
			} else {
				t.Logf("%d pods, growth %vs, start %vs: not harmful in 10 minutes (restarts %v)", tc.pods, tc.growth, tc.startup, a.Restarts)
			}
			continue
		}
		after := a.HarmfulAt.Sub(first)
		t.Logf("%d pods, growth %vs, start %vs: harmful %v after the first restart (%v restarts in 10 minutes)", tc.pods, tc.growth, tc.startup, after, a.Restarts)
		if tc.within > 0 && after > tc.within {
			t.Errorf("%d pods, growth %vs, start %vs: harmful %v after the first restart, want within %v", tc.pods, tc.growth, tc.startup, after, tc.within)
		}
		if r.Arms[0].Harmful {
			t.Errorf("the control was called harmful")
		}
	}
}

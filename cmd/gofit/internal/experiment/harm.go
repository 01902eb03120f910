package experiment

import (
	"fmt"
	"math"
	"math/rand"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// Harm, anytime-valid. The guard acts on harm alone, and it looks at an
// experiment every few minutes for as long as it runs: a test per look
// at a fixed level would stop a harmless arm sooner or later, and the
// planned-looks boundaries it had before spent most of its error on
// quality verdicts it never acted on, and held at 2 pods an arm (a
// pod-level bootstrap of 2 of 2 pods) no interval that could exclude 1:
// an arm restarting ten times and unready 40% of the time against none
// and 8% went unstopped for 12 minutes (issue 57).
//
// Each harm test is an e-process over the paired windows from the
// experiment's start: a nonnegative process that, while the arm is not
// harmful on that test, has expectation at most 1 given the past at
// every window (a test supermartingale). By Ville's inequality the
// chance it ever reaches 1/α, at any window, however often it is looked
// at, is at most α (Ramdas, Grünwald, Vovk and Shafer, "Game-theoretic
// statistics and safe anytime-valid inference", Statistical Science
// 2023). The tests of an arm are combined by a fixed weighted mean
// (harmWeights), itself a test supermartingale, so the arm's harm
// spends its α once however many tests there are (Vovk and Wang,
// "E-values: calibration, combination and applications", Annals of
// Statistics 2021). The arm is harmful from the first window at which
// the mean reaches 1/α (α shared by the arms under test, Bonferroni).
//
//   - Counts (restarts, OOM kills, errors, and the windows whose p99 is
//     beyond the latency margin): given the events of a window, each is
//     the arm's with a chance of at most p0 while the arm's rate is at
//     most (1+margin) times the control's per unit of exposure (pod-
//     windows; requests). A mixture over odds ratios θ > 1 of the
//     likelihood ratio θ^x/(p0θ+1−p0)^(x+y) is the e-process: a
//     mixture SPRT (Robbins 1970; Lindon and Malek, "Anytime-valid
//     inference for multinomial count data", NeurIPS 2022), on
//     conditional binomials as for Poisson rates.
//   - Each pod's first end (endsTest): a log-rank test, anytime-valid,
//     on the pods still at risk of their first end. Five of five pods
//     ending against none is strong evidence the count test cannot
//     see, since it treats the fifth end as no rarer than the first.
//   - Time not ready: D = arm's share − ((1+rate)·control's + floor)
//     per window, in [−(1+rate+floor), 1] (the bar is not capped at 1,
//     which would break the null's linearity); the e-process is a
//     mixture of constant bets Π(1+λD) (Waudby-Smith and Ramdas,
//     "Estimating means of bounded random variables by betting", JRSS B
//     2023), λ up to 0.9/(1+rate+floor). An adaptive bet learning from
//     the last windows stopped a stalled arm sooner but read a stall's
//     windows as independent evidence (4.8% A/A false stops against
//     1.6%).
//
// Each count's p0 and each bet rest on the arm's and the control's
// windows as they come, never on a look's length. Windows are not
// independent (a stall spans several); a harm that one pod alone
// carries (a crash loop on a bad node) must not stop an arm of several.
// So a test counts only while every pod of the arm with data shows the
// harm by itself (its own count or share beyond the control's bar):
// zeroing a term of the mean can only lower it, so the gate keeps the
// error bound. TestAAHarmFalseStopRate measures what is left.

// harmThetas are the odds ratios the count tests mix over, equally:
// from a modest excess to a crash loop, where the control has none.
var harmThetas = []float64{4, 8, 16, 64, 256, 1024}

// harmBets are the constant bets the unready test mixes over, as
// fractions of the largest bet that keeps every factor positive.
var harmBets = []float64{0.1, 0.2, 0.35, 0.5, 0.7, 0.9}

// harmWeights are the tests' weights in the arm's mean e-value, fixed
// in advance (they sum to 1): a restart and time not ready are what a
// harmful Go setting (no GC, a memory limit too tight) shows first.
// A pod's first end carries the most: every pod of an arm ending once
// while no control pod does is the first thing a crash-looping arm
// shows, and at 5 pods a side only the risk-set test below can call it
// (issue 57).
var harmWeights = map[string]float64{"ends": 0.38, "restarts": 0.2, "unready": 0.34, "oom": 0.02, "errors": 0.03, "p99": 0.03}

// harmTest is one test's e-process over the windows.
type harmTest struct {
	name string
	e    []float64 // after each window
	gate []bool    // every pod of the arm shows the harm by then
	// what says what the test saw through window i, for the reason.
	what func(i int) string
}

// HarmEvidence is an arm's harm: its e-value (the tests' weighted mean)
// at its largest, and the first window at which it reached the bar.
type HarmEvidence struct {
	E     float64 // the largest weighted mean over the windows
	Bar   float64 // 1/α of the arm
	First int     // window index of the first crossing; -1 none
	Tests []harmTest
}

// harmEvidence runs the arm's harm tests against the control over the
// first n windows.
func harmEvidence(a, c *Arm, n int, harm Harm, have map[string]bool, seed int64, bar float64) HarmEvidence {
	var tests []harmTest
	tests = append(tests, endsTest(a, c, n, harm.Rate))
	tests = append(tests, countTest("restarts", a, c, n, harm.Rate, func(w Window) float64 { return w.Restarts }))
	tests = append(tests, countTest("oom", a, c, n, harm.Rate, func(w Window) float64 { return w.OOMKills }))
	if have["ready"] {
		tests = append(tests, unreadyTest(a, c, n, harm))
	}
	if have["latency"] {
		tests = append(tests, errorTest(a, c, n, harm, seed), p99Test(a, c, n, harm))
	}
	ev := HarmEvidence{Bar: bar, First: -1, Tests: tests}
	for i := range n {
		s := 0.0
		for _, t := range tests {
			if t.gate[i] {
				s += harmWeights[t.name] * t.e[i]
			}
		}
		if s > ev.E {
			ev.E = s
		}
		if s >= bar && ev.First < 0 {
			ev.First = i
		}
	}
	return ev
}

// reasons names the tests that carried the crossing at window i, and
// what each saw through window last.
func (ev HarmEvidence) reasons(i, last int) []string {
	var out []string
	best, bi := 0.0, -1
	total := 0.0
	for k, t := range ev.Tests {
		if t.gate[i] {
			total += harmWeights[t.name] * t.e[i]
			if v := harmWeights[t.name] * t.e[i]; v > best {
				best, bi = v, k
			}
		}
	}
	for k, t := range ev.Tests {
		if v := harmWeights[t.name] * t.e[i]; t.gate[i] && (k == bi || v >= 0.2*total) {
			out = append(out, fmt.Sprintf("%s (e-value %.3g, weight %g)", t.what(last), t.e[i], harmWeights[t.name]))
		}
	}
	return out
}

// oddsMixture accumulates the count tests' mixture over harmThetas.
type oddsMixture struct{ logs []float64 }

func newOddsMixture() *oddsMixture { return &oddsMixture{logs: make([]float64, len(harmThetas))} }

// add takes x events of the arm and y of the control, each the arm's
// with a chance of at most p0 under the null.
func (m *oddsMixture) add(x, y, p0 float64) {
	if x+y <= 0 || !(p0 > 0 && p0 < 1) {
		return
	}
	for j, th := range harmThetas {
		m.logs[j] += x*math.Log(th) - (x+y)*math.Log(p0*th+1-p0)
	}
}

func (m *oddsMixture) value() float64 {
	s := 0.0
	for _, l := range m.logs {
		s += math.Exp(math.Min(l, 700))
	}
	return s / float64(len(m.logs))
}

// podsWith counts the arm's pods whose window i has has.
func podsWith(a *Arm, i int, has func(Window) bool) float64 {
	m := 0.0
	for _, ws := range a.Windows {
		if has(ws[i]) {
			m++
		}
	}
	return m
}

// countTest is a count's e-process (restarts, OOM kills): exposure is
// pod-windows with any data or an event.
func countTest(name string, a, c *Arm, n int, margin float64, of func(Window) float64) harmTest {
	t := harmTest{name: name, e: make([]float64, n), gate: make([]bool, n)}
	m := newOddsMixture()
	live := func(w Window) bool { return w.Has != 0 || of(w) > 0 }
	own := make([]float64, len(a.Pods))     // each arm pod's events so far
	seen := make([]bool, len(a.Pods))       // and whether it has had data
	ctrlOwn := make([]float64, len(c.Pods)) // each control pod's
	for i := range n {
		ma, mc := podsWith(a, i, live), podsWith(c, i, live)
		var x, y float64
		for p, ws := range a.Windows {
			v := math.Max(0, math.Round(of(ws[i])))
			x += v
			own[p] += v
			seen[p] = seen[p] || live(ws[i])
		}
		for p, ws := range c.Windows {
			v := math.Max(0, math.Round(of(ws[i])))
			y += v
			ctrlOwn[p] += v
		}
		if ma > 0 && mc > 0 {
			m.add(x, y, (1+margin)*ma/((1+margin)*ma+mc))
		}
		t.e[i] = m.value()
		t.gate[i] = fairShare(seen, own, (1+margin)*maxOf(ctrlOwn))
	}
	label := map[string]string{"restarts": "restarts", "oom": "OOM kills"}[name]
	t.what = func(i int) string {
		var x, y float64
		for _, ws := range a.Windows {
			for _, w := range ws[:i+1] {
				x += math.Max(0, math.Round(of(w)))
			}
		}
		for _, ws := range c.Windows {
			for _, w := range ws[:i+1] {
				y += math.Max(0, math.Round(of(w)))
			}
		}
		return fmt.Sprintf("%.0f %s against %.0f in %s, on every pod of the arm, beyond %g× the control's per pod-window", x, label, y, c.Name, 1+margin)
	}
	return t
}

// fairShare is the gate of a harm that every pod of the arm must show:
// each pod seen is beyond bar (the control's most harmed pod's, with the
// margin) and carries at least half its share of the arm's total. A
// pod that crash-loops alone on a bad node then stops no arm of two.
func fairShare(seen []bool, own []float64, bar float64) bool {
	total, k := 0.0, 0.0
	for p, s := range seen {
		if s {
			total, k = total+own[p], k+1
		}
	}
	return everyPod(seen, func(p int) bool { return own[p] > bar && own[p] >= 0.5*total/k })
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}

// everyPod reports whether ok holds for every pod seen (and some pod
// was).
func everyPod(seen []bool, ok func(p int) bool) bool {
	any := false
	for p, s := range seen {
		if !s {
			continue
		}
		any = true
		if !ok(p) {
			return false
		}
	}
	return any
}

// unreadyTest is the e-process of time not ready: a mixture of constant
// bets on D = arm's share − bar, per window with readiness on both
// sides.
func unreadyTest(a, c *Arm, n int, harm Harm) harmTest {
	t := harmTest{name: "unready", e: make([]float64, n), gate: make([]bool, n)}
	logs := make([]float64, len(harmBets))
	// The bar is not capped at 1: min(1, ·) is concave, so with a control
	// often wholly unready the capped bar's mean falls below the null's
	// (1+rate)·E[control]+floor and D's mean could be positive under the
	// null (review, Jensen). Uncapped, D ≥ −(1+rate+floor), and the bets
	// are scaled to keep 1+λD ≥ 0.
	lmax := 1 / (1 + harm.Rate + harm.Unready)
	ownS, ownT := make([]float64, len(a.Pods)), make([]float64, len(a.Pods))
	seen := make([]bool, len(a.Pods))
	ctrlS, ctrlT := make([]float64, len(c.Pods)), make([]float64, len(c.Pods))
	// A window's share over the pods with readiness in it (unready: NaN
	// when none has; fetch keeps NaN samples out of Unready).
	share := func(ws []Window) (float64, bool) {
		s := unready(ws)
		return s, !math.IsNaN(s)
	}
	col := func(arm *Arm, i int) []Window {
		out := make([]Window, len(arm.Windows))
		for p, ws := range arm.Windows {
			out[p] = ws[i]
		}
		return out
	}
	for i := range n {
		ca := col(a, i)
		cc := col(c, i)
		for p, w := range ca {
			if w.Has&HasReady != 0 {
				ownS[p] += w.Unready
				ownT[p]++
				seen[p] = true
			}
		}
		sc, okc := share(cc)
		for p, w := range cc {
			if w.Has&HasReady != 0 {
				ctrlS[p] += w.Unready
				ctrlT[p]++
			}
		}
		if sa, oka := share(ca); oka && okc {
			d := sa - ((1+harm.Rate)*sc + harm.Unready)
			for j, f := range harmBets {
				logs[j] += math.Log1p(f * lmax * d)
			}
		}
		e := 0.0
		for _, l := range logs {
			e += math.Exp(math.Min(l, 700))
		}
		t.e[i] = e / float64(len(logs))
		// The control's most unready pod sets the bar.
		worst, any := 0.0, false
		for p := range ctrlS {
			if ctrlT[p] > 0 {
				worst, any = math.Max(worst, ctrlS[p]/ctrlT[p]), true
			}
		}
		shares := make([]float64, len(ownS))
		for p := range ownS {
			if ownT[p] > 0 {
				shares[p] = ownS[p] / ownT[p]
			}
		}
		t.gate[i] = any && fairShare(seen, shares, (1+harm.Rate)*worst+harm.Unready)
	}
	t.what = func(i int) string {
		var s, k, cs, ck float64
		for _, ws := range a.Windows {
			for _, w := range ws[:i+1] {
				if w.Has&HasReady != 0 {
					s, k = s+w.Unready, k+1
				}
			}
		}
		for _, ws := range c.Windows {
			for _, w := range ws[:i+1] {
				if w.Has&HasReady != 0 {
					cs, ck = cs+w.Unready, ck+1
				}
			}
		}
		return fmt.Sprintf("not ready %.3g%% of the time against %s's %.3g%%, on every pod of the arm, beyond the bar of %g× it + %g points",
			100*s/math.Max(k, 1), c.Name, 100*cs/math.Max(ck, 1), 1+harm.Rate, 100*harm.Unready)
	}
	return t
}

// errorTest is the e-process of the error share: errors are counts per
// request. The floor (Harm.ErrorShare) is given to the control as
// pseudo-errors, Poisson at floor/(1+rate) per request from a seeded
// source, so that "the arm's rate is at most (1+rate) times the
// control's plus the floor" is a ratio of rates and the count test
// applies.
func errorTest(a, c *Arm, n int, harm Harm, seed int64) harmTest {
	t := harmTest{name: "errors", e: make([]float64, n), gate: make([]bool, n)}
	m := newOddsMixture()
	src := rand.New(rand.NewSource(seed ^ 0x5eed))
	ownE, ownR := make([]float64, len(a.Pods)), make([]float64, len(a.Pods))
	seen := make([]bool, len(a.Pods))
	ctrlE, ctrlR := make([]float64, len(c.Pods)), make([]float64, len(c.Pods))
	for i := range n {
		var x, ra, y, rc float64
		for p, ws := range a.Windows {
			if w := ws[i]; w.Has&HasLatency != 0 && w.Requests > 0 {
				x, ra = x+math.Round(w.Errors), ra+w.Requests
				ownE[p], ownR[p], seen[p] = ownE[p]+w.Errors, ownR[p]+w.Requests, true
			}
		}
		for p, ws := range c.Windows {
			if w := ws[i]; w.Has&HasLatency != 0 && w.Requests > 0 {
				y, rc = y+math.Round(w.Errors), rc+w.Requests
				ctrlE[p], ctrlR[p] = ctrlE[p]+w.Errors, ctrlR[p]+w.Requests
			}
		}
		if ra > 0 && rc > 0 {
			if mu := harm.ErrorShare / (1 + harm.Rate) * rc; mu > 0 {
				y += distuv.Poisson{Lambda: mu, Src: src}.Rand()
			}
			m.add(x, y, (1+harm.Rate)*ra/((1+harm.Rate)*ra+rc))
		}
		t.e[i] = m.value()
		// The control's pod with the most errors sets the bar.
		worst := -1.0
		for p := range ctrlR {
			if ctrlR[p] > 0 {
				worst = math.Max(worst, ctrlE[p]/ctrlR[p])
			}
		}
		bar := math.Inf(1)
		if worst >= 0 {
			bar = (1+harm.Rate)*worst + harm.ErrorShare
		}
		t.gate[i] = everyPod(seen, func(p int) bool { return ownR[p] > 0 && ownE[p]/ownR[p] > bar })
	}
	t.what = func(i int) string {
		var x, ra, y, rc float64
		for _, ws := range a.Windows {
			for _, w := range ws[:i+1] {
				if w.Has&HasLatency != 0 {
					x, ra = x+w.Errors, ra+w.Requests
				}
			}
		}
		for _, ws := range c.Windows {
			for _, w := range ws[:i+1] {
				if w.Has&HasLatency != 0 {
					y, rc = y+w.Errors, rc+w.Requests
				}
			}
		}
		return fmt.Sprintf("error share %.3g against %s's %.3g, on every pod of the arm, beyond %g× it + %g", div(x, ra), c.Name, div(y, rc), 1+harm.Rate, harm.ErrorShare)
	}
	return t
}

// p99Test is a sign test's e-process: a window in which every pod of
// the arm has a p99 beyond (1+Latency) times the control's slowest pod's
// is an event of the arm, one in which not the control's, each the
// arm's with a chance of at most 1/2 while the arm is within the margin.
// Pod against pod: pods keep their own speed for their lives (a slower
// core, a node), and arm against arm, two pods a side, an A/A pair was
// 1.25× apart in 2% of simulated experiments for the whole run.
func p99Test(a, c *Arm, n int, harm Harm) harmTest {
	t := harmTest{name: "p99", e: make([]float64, n), gate: make([]bool, n)}
	m := newOddsMixture()
	var g *grid
	for _, ws := range a.Windows {
		if len(ws) > 0 {
			g = ws[0].grid
		}
	}
	own := make([][]float64, len(a.Pods))
	ctrl := make([][]float64, len(c.Pods))
	seen := make([]bool, len(a.Pods))
	col := func(arm *Arm, i int) []Window {
		var out []Window
		for _, ws := range arm.Windows {
			if ws[i].Has&HasLatency != 0 {
				out = append(out, ws[i])
			}
		}
		return out
	}
	for i := range n {
		if beyond, ok := p99Beyond(col(a, i), col(c, i), 1+harm.Latency); ok {
			if beyond {
				m.add(1, 0, 0.5)
			} else {
				m.add(0, 1, 0.5)
			}
		}
		t.e[i] = m.value()
		if g != nil {
			for p, ws := range a.Windows {
				if w := ws[i]; w.Has&HasLatency != 0 && w.counts != nil {
					if own[p] == nil {
						own[p] = make([]float64, len(w.counts))
					}
					for j, v := range w.counts {
						own[p][j] += v
					}
					seen[p] = true
				}
			}
			slowest := math.NaN()
			for p, ws := range c.Windows {
				if w := ws[i]; w.Has&HasLatency != 0 && w.counts != nil {
					if ctrl[p] == nil {
						ctrl[p] = make([]float64, len(w.counts))
					}
					for j, v := range w.counts {
						ctrl[p][j] += v
					}
				}
				if ctrl[p] != nil {
					if q := g.quantile([]Window{{counts: ctrl[p]}}, 0.99); !(q <= slowest) {
						slowest = q
					}
				}
			}
			// Every pod of the arm beyond the control's slowest pod.
			t.gate[i] = !math.IsNaN(slowest) && everyPod(seen, func(p int) bool { return g.quantile([]Window{{counts: own[p]}}, 0.99) > (1+harm.Latency)*slowest })
		}
	}
	t.what = func(i int) string {
		b, w := 0, 0
		for k := 0; k <= i; k++ {
			if beyond, ok := p99Beyond(col(a, k), col(c, k), 1+harm.Latency); ok {
				w++
				if beyond {
					b++
				}
			}
		}
		return fmt.Sprintf("latency p99 beyond the harm margin %g× %s's on every pod of the arm, against its slowest pod, in %d of %d windows", 1+harm.Latency, c.Name, b, w)
	}
	return t
}

// p99Beyond says whether the fastest pod's p99 of arm windows wa is
// beyond factor times the slowest's of the control's wc; ok is false
// when a side has no latency.
func p99Beyond(wa, wc []Window, factor float64) (beyond, ok bool) {
	fastest, slowest := math.Inf(1), math.Inf(-1)
	for _, w := range wa {
		if q := Quantile([]Window{w}, 0.99); !math.IsNaN(q) {
			fastest = math.Min(fastest, q)
		}
	}
	for _, w := range wc {
		if q := Quantile([]Window{w}, 0.99); !math.IsNaN(q) {
			slowest = math.Max(slowest, q)
		}
	}
	if math.IsInf(fastest, 1) || math.IsInf(slowest, -1) || slowest <= 0 {
		return false, false
	}
	return fastest > factor*slowest, true
}

// harmSummary is the arm's reason for the stop, one line: the tests
// that carried the crossing, with what they saw over the whole span.
func harmSummary(ev HarmEvidence, n int, at string) string {
	sum := 0.0
	for _, t := range ev.Tests {
		if t.gate[ev.First] {
			sum += harmWeights[t.name] * t.e[ev.First]
		}
	}
	return fmt.Sprintf("%s: e-value %.3g reached 1/α = %.3g at %s", strings.Join(ev.reasons(ev.First, n-1), "; "), sum, ev.Bar, at)
}

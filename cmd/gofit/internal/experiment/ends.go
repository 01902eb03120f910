package experiment

import (
	"fmt"
	"math"
)

// endsTest is the e-process of each pod's first end (a restart or an OOM
// kill), a log-rank test made anytime-valid (ter Schure, Pérez-Ortiz,
// Ly and Grünwald, "The anytime-valid logrank test", 2024). A pod is at
// risk from its first window with data until its first end. Given the
// risk sets at a window (a of the arm's pods, c of the control's) and
// the d pods of them that end in it, the arm's share x of those ends
// follows Fisher's noncentral hypergeometric law with the odds ratio ψ
// of ending in a window. The null is ψ ≤ 1+margin; the factor of a
// window is the law's likelihood ratio P_Ψ(x)/P_ψ0(x), for alternatives
// Ψ = ψ0·θ over harmThetas, mixed equally. The law has a monotone
// likelihood ratio in x, so each factor has expectation 1 at ψ0 and
// at most 1 below it: the product is a test supermartingale.
//
// The count test (restarts) treats every end as a new draw with the
// arm's share of the exposure: five of five pods ending against none
// is then 1/0.6 five times, 12.9 at most, and the arm waits for a
// second round, which on a slow node is minutes away. Here a pod that
// has ended leaves the risk set, so each further first end of the arm,
// with the control's pods all still running, is less likely under the
// null: the same round gives about 50.
//
// The gate: every pod of the arm with data has ended at least once.
// A pod is at risk in a window where it has data or existed (HasPod),
// whether or not it ends there.
func endsTest(a, c *Arm, n int, margin float64) harmTest {
	t := harmTest{name: "ends", e: make([]float64, n), gate: make([]bool, n)}
	psi0 := 1 + margin
	logs := make([]float64, len(harmThetas))
	ended := func(w Window) bool { return w.Restarts >= 0.5 || w.OOMKills >= 0.5 }
	// At risk where the pod has data or existed (HasPod, its warm-up),
	// never because it ended: a risk set that holds only the pods that
	// end in a window makes each end look like the arm's alone (review,
	// 2026-12-07). An end in a window without either is left out here.
	live := func(w Window) bool { return w.Has != 0 }
	armEnd, armSeen := make([]bool, len(a.Pods)), make([]bool, len(a.Pods))
	ctrlEnd := make([]bool, len(c.Pods))
	// at counts a side's pods at risk in window i, and those that end.
	at := func(arm *Arm, done []bool, i int) (risk, x int) {
		for p, ws := range arm.Windows {
			if w := ws[i]; !done[p] && live(w) {
				risk++
				if ended(w) {
					x++
					done[p] = true
				}
			}
		}
		return risk, x
	}
	for i := range n {
		ra, x := at(a, armEnd, i)
		rc, y := at(c, ctrlEnd, i)
		for p, ws := range a.Windows {
			armSeen[p] = armSeen[p] || live(ws[i])
		}
		if d := x + y; d > 0 && ra > 0 && rc > 0 {
			l0 := logFNCH(x, ra, rc, d, psi0)
			for j, th := range harmThetas {
				logs[j] += logFNCH(x, ra, rc, d, psi0*th) - l0
			}
		}
		e := 0.0
		for _, l := range logs {
			e += math.Exp(math.Min(l, 700))
		}
		t.e[i] = e / float64(len(logs))
		t.gate[i] = everyPod(armSeen, func(p int) bool { return armEnd[p] })
	}
	t.what = func(i int) string {
		count := func(arm *Arm) (ends, pods int) {
			for _, ws := range arm.Windows {
				seen, end := false, false
				for _, w := range ws[:i+1] {
					seen, end = seen || live(w), end || ended(w)
				}
				if seen {
					pods++
				}
				if end {
					ends++
				}
			}
			return ends, pods
		}
		ea, pa := count(a)
		ec, pc := count(c)
		return fmt.Sprintf("%d of %d pods ended at least once against %d of %d in %s, beyond %g× the control's odds a window", ea, pa, ec, pc, c.Name, psi0)
	}
	return t
}

// logFNCH is the log of Fisher's noncentral hypergeometric probability
// of x from the first group, when d of a+c items are drawn with odds
// ratio psi: C(a,x)·C(c,d−x)·psi^x over its sum on every feasible x.
func logFNCH(x, a, c, d int, psi float64) float64 {
	lo, hi := max(0, d-c), min(a, d)
	term := func(k int) float64 { return logChoose(a, k) + logChoose(c, d-k) + float64(k)*math.Log(psi) }
	m := math.Inf(-1)
	for k := lo; k <= hi; k++ {
		m = math.Max(m, term(k))
	}
	s := 0.0
	for k := lo; k <= hi; k++ {
		s += math.Exp(term(k) - m)
	}
	return term(x) - m - math.Log(s)
}

func logChoose(n, k int) float64 {
	a, _ := math.Lgamma(float64(n + 1))
	b, _ := math.Lgamma(float64(k + 1))
	c, _ := math.Lgamma(float64(n - k + 1))
	return a - b - c
}

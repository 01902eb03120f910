package experiment

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

// TestConfidenceSequenceHoldsAtEveryLook: the standardized mean of a
// random walk, S_t/√t, looked at after every step up to ten times the
// planned length, must leave the boundary Z(t) in at most α of paths
// (plus the simulation's noise), for one test and for a test of 15. A
// fixed 95% interval read at every step leaves it in most paths: the
// defect the confidence sequence is there to fix.
func TestConfidenceSequenceHoldsAtEveryLook(t *testing.T) {
	const paths, planned, steps = 4000, 100, 1000
	seq, err := NewSequential(Looks{Every: time.Minute, Planned: planned * time.Minute, Alpha: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []int{1, 15} {
		z := make([]float64, steps+1)
		for k := 1; k <= steps; k++ {
			z[k] = seq.Z(time.Duration(k)*time.Minute, m)
		}
		rng := rand.New(rand.NewSource(int64(m)))
		crossed, naive := 0, 0
		for range paths {
			sum, out, outNaive := 0.0, false, false
			for k := 1; k <= steps; k++ {
				sum += rng.NormFloat64()
				a := math.Abs(sum) / math.Sqrt(float64(k))
				out = out || a > z[k]
				outNaive = outNaive || a > 1.959963984540054
			}
			if out {
				crossed++
			}
			if outNaive {
				naive++
			}
		}
		// α/m, and three binomial standard deviations of room.
		a := 0.05 / float64(m)
		limit := a + 3*math.Sqrt(a*(1-a)/paths)
		rate := float64(crossed) / paths
		t.Logf("%d tests: crossed in %.2f%% of %d paths over %d looks (α/m = %.3g%%); a fixed 95%% interval at every look: %.1f%%", m, 100*rate, paths, steps, 100*a, 100*float64(naive)/paths)
		if rate > limit {
			t.Errorf("%d tests: the boundary was crossed in %.2f%% of paths, more than α/m = %.3g%% allows (%.3g%%)", m, 100*rate, 100*a, 100*limit)
		}
		if m == 1 && float64(naive)/paths < 0.3 {
			t.Errorf("a fixed 95%% interval at every look was crossed in only %.1f%% of paths: the simulation does not look often", 100*float64(naive)/paths)
		}
	}
	// The boundary is finite and decreasing then slowly rising: widest
	// early, tightest near the planned length, and still finite far past it.
	early, at, late := seq.Z(time.Minute, 15), seq.Z(planned*time.Minute, 15), seq.Z(100*planned*time.Minute, 15)
	t.Logf("15 tests: z at 1/%d of the plan %.2f, at the plan %.2f, at 100× the plan %.2f", planned, early, at, late)
	if !(early > at && late > at && !math.IsInf(late, 0)) {
		t.Errorf("z: %.3f early, %.3f at the plan, %.3f at 100× it: want tightest near the plan", early, at, late)
	}
	if seq.Look(0) != 1 || seq.Look(3*planned*time.Minute) != 3*planned {
		t.Errorf("Look counts from the start in Every, past the plan: %d, %d", seq.Look(0), seq.Look(3*planned*time.Minute))
	}
}

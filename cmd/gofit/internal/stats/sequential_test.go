package stats

import (
	"math"
	"slices"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"
)

// TestScheduleLooks: a schedule looks at first, then at about ×1.5 more,
// up to last, and at every count past last; Look counts them and K is
// how many there are up to last.
func TestScheduleLooks(t *testing.T) {
	for _, c := range []struct {
		first, last int
		want        []int
	}{
		{3, 12, []int{3, 5, 8, 12}},
		{3, 30, []int{3, 5, 8, 12, 18, 27, 30}},
		{2, 4, []int{2, 3, 4}},
		{1, 5, []int{1, 2, 3, 5}},
		{5, 5, []int{5}},
	} {
		s := Schedule(c.first, c.last, 0.03)
		var got []int
		for n := 0; n <= c.last+3; n++ {
			if s.IsLook(float64(n)) {
				got = append(got, n)
			}
		}
		want := slices.Concat(c.want, []int{c.last + 1, c.last + 2, c.last + 3})
		if !slices.Equal(got, want) {
			t.Errorf("Schedule(%d, %d): looks at %v, want %v", c.first, c.last, got, want)
		}
		if s.IsLook(float64(c.first) + 0.5) {
			t.Errorf("Schedule(%d, %d): a look at %g, between two counts", c.first, c.last, float64(c.first)+0.5)
		}
		if s.K() != len(c.want) {
			t.Errorf("Schedule(%d, %d): K %d, want %d", c.first, c.last, s.K(), len(c.want))
		}
		for i, at := range c.want {
			if s.Look(float64(at)) != i+1 || s.Look(float64(at)-1) != i {
				t.Errorf("Schedule(%d, %d): Look(%d) %d and Look(%d) %d, want %d and %d", c.first, c.last, at, s.Look(float64(at)), at-1, s.Look(float64(at)-1), i+1, i)
			}
		}
		if got := s.Look(float64(c.last + 3)); got != len(c.want)+3 {
			t.Errorf("Schedule(%d, %d): Look(%d) %d, want %d: every count past last is a look", c.first, c.last, c.last+3, got, len(c.want)+3)
		}
	}
}

// TestScheduleLevel: every look of a schedule is read at its own α (not
// shared across looks), shared among m tests by Bonferroni; Z is that
// level's normal quantile.
func TestScheduleLevel(t *testing.T) {
	s := Schedule(3, 12, 0.03)
	for _, n := range []float64{3, 5, 8, 12, 40} {
		if got := s.Level(n, 1); got != 0.03 {
			t.Errorf("Level at look %g: %g, want 0.03 at every look", n, got)
		}
		if got := s.Level(n, 3); math.Abs(got-0.01) > 1e-15 {
			t.Errorf("Level at look %g for one test of 3: %g, want 0.01", n, got)
		}
	}
	if got := s.Share(0); got != 0.03 {
		t.Errorf("Share(0) %g, want α", got)
	}
	// Φ⁻¹(1 - 0.03/2) and Φ⁻¹(1 - 0.01/2).
	for _, c := range []struct {
		m    int
		want float64
	}{{1, 2.17009037758456}, {3, 2.5758293035489}} {
		if got := s.Z(5, c.m); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Z for one test of %d: %.12f, want %.12f", c.m, got, c.want)
		}
	}
}

// TestConfidenceSequenceZ: z_t at a few t, for one test and for one of
// 15 (values from the formula of Waudby-Smith et al. with ρ chosen for
// the plan, computed apart); any look counts; Level is z's two-sided
// normal tail; the unit of t does not matter.
func TestConfidenceSequenceZ(t *testing.T) {
	const planned = 120.0 // minutes
	s := ConfidenceSequence(5, planned, 0.05)
	for _, c := range []struct {
		m    int
		at   float64 // t ÷ planned
		want float64
	}{
		{1, 0.01, 9.084379437310579}, {1, 0.5, 3.08356871436835}, {1, 1, 3.0352089903762534}, {1, 2, 3.0614772188674166}, {1, 100, 3.5616410409189},
		{15, 0.01, 9.715478173149101}, {15, 1, 3.8889497951990912}, {15, 100, 4.319790695305148},
	} {
		got := s.Z(c.at*planned, c.m)
		if math.Abs(got-c.want) > 1e-9 {
			t.Errorf("z for one test of %d at %g of the plan: %.12f, want %.12f", c.m, c.at, got, c.want)
		}
		// The same plan in nanoseconds: t only counts as t ÷ planned.
		if ns := ConfidenceSequence(5*6e10, planned*6e10, 0.05).Z(c.at*planned*6e10, c.m); math.Abs(ns-got) > 1e-9 {
			t.Errorf("z for one test of %d at %g of the plan: %.12f in minutes, %.12f in nanoseconds", c.m, c.at, got, ns)
		}
		// Far out 1-Φ(z) is 0 in floating point, which would read as no
		// level at all; Level keeps the tail.
		lv, tail := s.Level(c.at*planned, c.m), 2*(1-distuv.UnitNormal.CDF(got))
		if got < 6 && math.Abs(lv-tail) > 1e-6*tail || got >= 6 && !(lv > 0 && lv < 1e-8) {
			t.Errorf("Level for one test of %d at %g of the plan: %g, want 2(1-Φ(%.3f)) = %g, above 0", c.m, c.at, lv, got, tail)
		}
		if !s.IsLook(c.at * planned) {
			t.Errorf("a reading at %g of the plan is not a look: in a confidence sequence every one is", c.at)
		}
	}
	if s.Share(15) != 0.05/15 {
		t.Errorf("Share(15) %g, want α/15", s.Share(15))
	}
	if s.K() != 24 || s.Look(0) != 1 || s.Look(5) != 1 || s.Look(5.5) != 2 || s.Look(3*planned) != 72 {
		t.Errorf("looks every 5 of 120: K %d, Look(0) %d, Look(5) %d, Look(5.5) %d, Look(360) %d; want 24, 1, 1, 2, 72",
			s.K(), s.Look(0), s.Look(5), s.Look(5.5), s.Look(3*planned))
	}
}

// TestConfidenceSequenceWidensPastPlan: z is tightest just past the plan
// and from twice the plan on widens at every step, without end and only
// as √log t (z² - log(tρ²) → 2·log(m/α)), while the interval itself
// (z/√t standard deviations) narrows at every step.
func TestConfidenceSequenceWidensPastPlan(t *testing.T) {
	const planned = 1.0
	s := ConfidenceSequence(0.01, planned, 0.05)
	for _, m := range []int{1, 15} {
		best, at := math.Inf(1), 0.0
		prevZ, prevW := math.Inf(1), math.Inf(1)
		for k := -40; k <= 200; k++ {
			x := planned * math.Pow(10, float64(k)/20)
			z := s.Z(x, m)
			if z < best {
				best, at = z, x
			}
			if w := z / math.Sqrt(x); w >= prevW {
				t.Errorf("one test of %d: the interval widened from %.4g to %.4g at t = %.3g", m, prevW, w, x)
			} else {
				prevW = w
			}
			if x >= 2*planned && z <= prevZ {
				t.Errorf("one test of %d: z fell from %.6f to %.6f at %.3g of the plan, past twice it", m, prevZ, z, x)
			}
			prevZ = z
		}
		if at < planned || at > 1.5*planned {
			t.Errorf("one test of %d: z least (%.3f) at %.3g of the plan, want from 1 to 1.5", m, best, at)
		}
		l := 2 * math.Log(float64(m)/0.05)
		x := 1e10 * planned
		if got := s.Z(x, m); math.Abs(got*got-math.Log((l+math.Log(l+1))*x)-l) > 1e-6 {
			t.Errorf("one test of %d: z² - log(tρ²) at 1e10 of the plan is %.9f, want 2·log(m/α) = %.9f", m, got*got-math.Log((l+math.Log(l+1))*x), l)
		}
	}
}

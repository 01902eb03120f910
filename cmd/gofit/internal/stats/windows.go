package stats

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Paired windows: the experiment report's comparisons. Each arm of an
// experiment is measured over the same time windows, so window i of every
// arm saw the same traffic at the same moment. Resampling whole windows,
// the same ones for every arm, keeps that moment out of the ratio's spread;
// resampling runs of consecutive windows (blocks) rather than single ones
// keeps a slow drift or a burst that spans windows from looking like
// independent evidence.

// WindowBlock is the block length for n paired windows: about √n, and at
// least 2. The n^(1/3) that minimises a block bootstrap's error for a
// known short memory (Hall, Horowitz and Jing 1995) was too short here:
// a pod's drift over several minutes spans more than 4 one-minute
// windows, and with n^(1/3) A/A experiments of an hour called a
// difference in 1 of 5 (TestAAFalseVerdictRate). n^(2/3) kept false
// verdicts under 1% once pods were resampled too, but left a real 2.4×
// p99 difference undecided; √n keeps them under 3% with that power
// (docs/results/experiment.md).
func WindowBlock(n int) int {
	return max(2, int(math.Round(math.Sqrt(float64(n)))))
}

// MinWindows is the fewest paired windows a ratio interval rests on.
const MinWindows = 8

// PairedWindows is the interval of stat(windows), such as a statistic of the arm
// under test over the statistic of the control, both over the windows
// listed: the value over every window, and the percentile interval at
// level 1-b.Alpha (95% by default) over resamples drawing circular blocks of consecutive windows, the
// same windows for both sides. Fewer than MinWindows windows give
// (-Inf, +Inf). A resample whose ratio is not finite (no requests on a
// side) counts at both ends, widening the interval rather than hiding.
func (b *Bootstrap) PairedWindows(n int, stat func(windows []int) float64) Interval {
	return b.PairedUnits(n, nil, func(windows []int, _ [][]int) float64 { return stat(windows) })
}

// PairedUnits is PairedWindows with a second level: units[g] is the number
// of units (pods) of group g (an arm), and each resample also draws each
// group's units with replacement, passing stat the units drawn (all of
// them, in order, for the estimate). A pod that differs from its arm's
// other pods for the whole span (a slower node, a luckier cache) is then
// part of the interval, not mistaken for the arm's doing: on real
// processes, two pairs of pods with the same setting differed by 1% in
// CPU per request with window-only intervals a fifth as wide
// (TestRealPrometheusExperiment). A group of one unit cannot show it.
func (b *Bootstrap) PairedUnits(n int, units []int, stat func(windows []int, units [][]int) float64) Interval {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	allUnits := make([][]int, len(units))
	for g, u := range units {
		for j := range u {
			allUnits[g] = append(allUnits[g], j)
		}
	}
	iv := Interval{Value: stat(all, allUnits)}
	if n < MinWindows {
		iv.Low, iv.High = math.Inf(-1), math.Inf(1)
		return iv
	}
	l := WindowBlock(n)
	xs := make([]float64, b.Resamples)
	idx := make([]int, 0, n+l)
	drawn := make([][]int, len(units))
	for r := range xs {
		idx = idx[:0]
		for len(idx) < n {
			start := b.rng.Intn(n)
			for k := 0; k < l && len(idx) < n; k++ {
				idx = append(idx, (start+k)%n)
			}
		}
		for g, u := range units {
			drawn[g] = drawn[g][:0]
			for range u {
				drawn[g] = append(drawn[g], b.rng.Intn(u))
			}
		}
		x := stat(idx, drawn)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			// Alternate ends so that undefined resamples widen both.
			x = math.Inf(1 - 2*(r%2))
		}
		xs[r] = x
	}
	iv.Low, iv.High = percentiles(xs)
	// A resample of k blocks knows the spread of k draws: like a mean of
	// k values, its percentiles are too narrow by about Student's t with
	// k-1 degrees of freedom over the normal's 1.96 (an hour of one-minute
	// windows is 7.5 blocks: ×1.23). Without this, A/A experiments on
	// autocorrelated series called differences in 1 of 8 analyses.
	//
	// The same factor carries the interval to the level b.Alpha asks for
	// (a sequential look's share of the error, see the experiment's
	// boundaries): the 95% percentiles are the stable part of a few
	// thousand resamples, and their far tails are not.
	k := float64(n) / float64(l)
	alpha := b.Alpha
	if !(alpha > 0 && alpha < 1) {
		alpha = 0.05
	}
	// (The lower quantile, negated: 1-alpha/2 rounds to 1 for the tiny
	// alpha of an early look.)
	f := -distuv.StudentsT{Mu: 0, Sigma: 1, Nu: k - 1}.Quantile(alpha/2) / 1.959963984540054
	if iv.Value > 0 && iv.Low > 0 {
		// A ratio's spread is multiplicative: widen it on a log scale,
		// where it is about symmetric.
		iv.Low, iv.High = iv.Value*math.Pow(iv.Low/iv.Value, f), iv.Value*math.Pow(iv.High/iv.Value, f)
	} else {
		iv.Low, iv.High = iv.Value-f*(iv.Value-iv.Low), iv.Value+f*(iv.High-iv.Value)
	}
	return iv
}

// Direction says which way a metric improves.
type Direction int

// Directions.
const (
	LowerIsBetter Direction = iota
	HigherIsBetter
)

// Undecided is the verdict of an interval that neither excludes 1 nor
// lies within the equivalence margin.
const Undecided = "undecided"

// RatioVerdict reads a ratio interval (arm ÷ control) for a metric that
// improves in direction d: better or worse when the interval excludes 1,
// same when it lies within 1 ± margin, undecided otherwise.
func RatioVerdict(r Interval, d Direction, margin float64) string {
	switch {
	case r.Low > 1 && d == LowerIsBetter, r.High < 1 && d == HigherIsBetter:
		return Worse
	case r.Low > 1, r.High < 1:
		return Better
	case r.Low >= 1-margin && r.High <= 1+margin:
		return Same
	}
	return Undecided
}

// Package stats is the statistics the lab, the QoS experiment and the
// experiments share: nearest-rank quantiles, load windows cut into blocks,
// one block bootstrap core (core.go) that draws its resamples as each
// caller needs (runs then blocks within them, pairs of runs, circular
// blocks of paired windows and their pods) and reads and widens every
// interval by one rule, the verdict rule that calls a difference only
// where its interval excludes "none", and the sequential rule for reading
// an interval again as its data grow (Sequential: a fixed schedule of
// looks or an anytime-valid confidence sequence).
package stats

import (
	"math"
	"slices"
)

// Quantile is the nearest-rank q-quantile of sorted (ascending); NaN when
// it is empty.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[rank(len(sorted), q)]
}

// Quantile32 sorts xs in place and returns its nearest-rank q-quantile, or
// 0 when it is empty.
func Quantile32(xs []float32, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return float64(xs[rank(len(xs), q)])
}

// rank is the 0-based index of the nearest-rank q-quantile of n values.
func rank(n int, q float64) int {
	i := int(math.Ceil(q*float64(n))) - 1
	return min(max(i, 0), n-1)
}

// Mean is the arithmetic mean; NaN when xs is empty.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

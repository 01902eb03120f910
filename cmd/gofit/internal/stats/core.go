package stats

import (
	"math"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// The one bootstrap core. Every interval here (CI, Ratio, PairedRatio,
// PairedWindows, PairedUnits) is b.interval over a draws: the callers
// differ only in how a resample is drawn (runs then blocks, pairs then
// blocks, circular blocks of paired windows, plus units) and in how many
// independent draws it rests on; the level, the percentiles and the
// widening are one rule:
//
//   - the percentiles of the resamples are read at α (b.Alpha), but no
//     further out than MinReadAlpha (readAlpha);
//   - each level of the draw whose independent draws are few is widened
//     by √(n/(n−1)) × t(1−α/2, df) ÷ z(1−a/2), a the α read at (level.
//     widening): the spread n draws with replacement see, and Student's
//     tails in place of the normal's, and the rest of the way from the
//     percentiles' level to α's;
//   - the widening is on the log scale about the estimate (ratios and the
//     positive quantities here are multiplicative), and neither end moves
//     towards the estimate (widen).

// MinReadAlpha is the farthest out the resamples' percentiles are read:
// an interval at a smaller α (a sequential look's share of the error) is
// read at 2% and carried the rest of the way by Student's t (see
// level.widening). At a thousand resamples, the lab's and the
// experiments' default, 10 lie beyond each end at 2%, and an end scatters
// about ±5% of its reach from the estimate, as a 95% one does ±4.3%;
// further out the ends rest on a handful of resamples, then on the
// extremes. The lab reads its intervals at 3% and 5%, on this side of it.
const MinReadAlpha = 0.02

// readAlpha is the α whose percentiles an interval at α is read at.
func readAlpha(alpha float64) float64 { return max(alpha, MinReadAlpha) }

// draws is how a caller's resamples are drawn, and what they rest on.
type draws struct {
	// resample draws one resample and returns its statistic.
	resample func() float64
	// few is the level of the draw whose few independent draws the
	// interval is widened for. Its zero value (CI, a cell's own interval
	// for its report) leaves the percentiles as they are.
	few level
	// units, when set, draws a second level alone (the units, every
	// window kept), widened for its own few draws where that widens more
	// than few does (PairedUnits).
	units    func() float64
	unitsFew level
}

// level is n independent draws at one level of a resample (runs a side,
// pairs, blocks of windows, units), whose spread is known as Student's t
// with df degrees of freedom knows it.
type level struct{ n, df float64 }

// widening is how much the percentile interval read at readAlpha(alpha)
// is too narrow at level 1−alpha for draws that rest on l:
// √(n/(n−1)) × t(1−α/2, df) ÷ z(1−a/2), a = readAlpha(alpha).
// Resampling n things with replacement sees their spread times (n−1)/n
// (so does a circular block bootstrap of n blocks: its block means'
// spread about the mean has divisor n), and its percentiles have the
// normal's tails where the truth, estimated from n draws, has Student's
// t ones. +Inf under 2 draws or 1 degree of freedom: nothing to correct
// from.
func (l level) widening(alpha float64) float64 {
	if l.n < 2 || l.df < 1 {
		return math.Inf(1)
	}
	t := upperQuantile(distuv.StudentsT{Mu: 0, Sigma: 1, Nu: l.df}.Quantile, alpha)
	z := upperQuantile(distuv.UnitNormal.Quantile, readAlpha(alpha))
	return math.Sqrt(l.n/(l.n-1)) * t / z
}

// upperQuantile is quantile(1−α/2), read as the lower one negated where α
// is so small that 1−α/2 would lose its digits (an early look of a
// confidence sequence: 1e-25 and less).
func upperQuantile(quantile func(float64) float64, alpha float64) float64 {
	if alpha < 1e-4 {
		return -quantile(alpha / 2)
	}
	return quantile(1 - alpha/2)
}

// Expansion is the widening (level.widening) of Ratio's and PairedRatio's
// intervals for the n runs a side, or pairs, they rest on: 2(n−1)
// degrees of freedom. An A/A simulation of the lab's CPU study
// (lab/aa_test.go) gave 12.5% false verdicts at a nominal 5% without it.
// 1.73 at 3 runs a side and α = 5%, 1.31 at 5, → 1 as runs grow.
func Expansion(n int, alpha float64) float64 { return runsLevel(n).widening(alpha) }

// runsLevel is n runs a side (or pairs): 2(n−1) degrees of freedom.
func runsLevel(n int) level { return level{n: float64(n), df: float64(2 * (n - 1))} }

// interval is the core: the estimate value, and the interval at level
// 1−b.Alpha of b.Resamples resamples drawn by d (see the top of this
// file). The draws follow one another from b's random stream, so the
// same seed gives the same interval.
func (b *Bootstrap) interval(value float64, d draws) Interval {
	iv := Interval{Value: value}
	alpha := b.alpha()
	read := readAlpha(alpha)
	xs := make([]float64, b.Resamples)
	for i := range xs {
		xs[i] = d.resample()
	}
	iv.Low, iv.High = definedPercentiles(xs, read)
	if d.few == (level{}) {
		return iv
	}
	f := d.few.widening(alpha)
	// A second level's share of the spread gets its own factor. Drawing
	// it alone, every window kept, its spread is that level's part u of
	// the joint one j, which holds both: j² ≈ w² + u² (independent
	// draws). The interval's reach on each side is then
	// √(f²·j² + (fu²−f²)·u²): f on the first level's part, fu on the
	// second's. A stall both pods share is all windows and keeps f; two
	// pods that differ for the whole run are all pods and get fu.
	fu, uLow, uHigh := f, iv.Low, iv.High
	if d.units != nil {
		if w := d.unitsFew.widening(alpha); w > f && !math.IsInf(w, 0) {
			fu = w
			for i := range xs {
				xs[i] = d.units()
			}
			uLow, uHigh = definedPercentiles(xs, read)
		}
	}
	// Each finite end is widened on its own: an interval with one end at
	// 0 or infinity (a ratio over a control that had none of it, a run
	// that served nothing) still carries its other end to α. Ratios and
	// the positive quantities here widen on the log scale; an estimate at
	// 0 (none on the arm's side) widens on the linear one, and an end at 0
	// of a positive estimate stays there.
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return iv
	}
	logs := value > 0
	for _, e := range []struct {
		end  *float64
		u    float64
		side float64
	}{{&iv.Low, uLow, -1}, {&iv.High, uHigh, 1}} {
		if math.IsNaN(*e.end) || math.IsInf(*e.end, 0) || logs && *e.end <= 0 {
			continue
		}
		*e.end = widen(logs, value, *e.end, e.u, e.side, f, fu)
	}
	return iv
}

// widen carries one end of a percentile interval (side −1 the low one, 1
// the high one) away from the estimate value, on the log scale if logs:
// by f, or
// with a second level whose own end is uEnd, by f on the first level's
// part and fu on the second's. An end on the estimate's wrong side (a
// skewed handful of resamples) is taken to the estimate: an interval
// holds its estimate. An end at 0 or infinity has no finite reach on
// the log scale and is not widened (interval).
func widen(logs bool, value, end, uEnd, side, f, fu float64) float64 {
	at := func(x float64) float64 { return x - value }
	back := func(d float64) float64 { return value + d }
	if logs {
		v := math.Log(value)
		at = func(x float64) float64 { return math.Log(x) - v }
		back = func(d float64) float64 { return math.Exp(v + d) }
	}
	j := at(end)
	if j*side < 0 {
		j = 0
	}
	d := f * j
	if fu != f {
		// The second level's part can come out larger than the whole by
		// chance, or undefined (an end at 0 or infinite): it is then the
		// whole.
		u := at(uEnd)
		if math.IsNaN(u) || math.IsInf(u, 0) {
			u = j
		}
		u = math.Copysign(math.Min(math.Abs(u), math.Abs(j)), j)
		d = math.Copysign(math.Sqrt(f*f*j*j+(fu*fu-f*f)*u*u), j)
	}
	return back(d)
}

// alpha is b.Alpha, or 5% where it is not a rate.
func (b *Bootstrap) alpha() float64 {
	if !(b.Alpha > 0 && b.Alpha < 1) {
		return 0.05
	}
	return b.Alpha
}

// MaxUndefined is the largest share of resamples whose statistic may be
// undefined (NaN) and be left out of an interval.
const MaxUndefined = 0.10

// definedPercentiles is the percentile interval leaving alpha/2 in each
// tail of the resamples xs (reordered), some of which may be undefined:
// NaN, when a resample drew no requests on a side, or only windows in
// which a control that collects rarely reported no GC (the Go runtime
// updates its CPU classes at a GC only). Up to MaxUndefined of them are
// left out, and the interval is the one given that the statistic exists,
// as a bootstrap of rare events has it: counting them at the ends instead
// turned a GC share 370× the control's into no interval at all (CI,
// 2026-11-29). More of them count alternately at +Inf and -Inf, widening
// both ends rather than hiding. An infinite resample (a ratio over a
// control that had none) counts at its own end: it says which way the
// arm lies.
func definedPercentiles(xs []float64, alpha float64) (lo, hi float64) {
	nan := 0
	for _, x := range xs {
		if math.IsNaN(x) {
			nan++
		}
	}
	if nan == 0 {
		return percentilesAt(xs, alpha)
	}
	if float64(nan) <= MaxUndefined*float64(len(xs)) && nan < len(xs) {
		kept := xs[:0]
		for _, x := range xs {
			if !math.IsNaN(x) {
				kept = append(kept, x)
			}
		}
		return percentilesAt(kept, alpha)
	}
	for r, x := range xs {
		if math.IsNaN(x) {
			xs[r] = math.Inf(1 - 2*(r%2))
		}
	}
	return percentilesAt(xs, alpha)
}

// percentilesAt is the percentile interval that leaves alpha/2 in each
// tail.
func percentilesAt(xs []float64, alpha float64) (lo, hi float64) {
	sort.Float64s(xs)
	at := func(q float64) float64 { return xs[min(int(q*float64(len(xs))), len(xs)-1)] }
	return at(alpha / 2), at(1 - alpha/2)
}

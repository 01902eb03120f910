package stats

import "math"

// Sequential is the rule for reading an interval again and again as its
// data grow, and stopping on the first reading that decides: which
// readings count as looks, and at what level each look's interval is
// read, so that the chance of any false verdict over all of them is what
// was promised. Every look is a chance of a false verdict, so 95%
// intervals read at every look hold far less than 95% over all of them.
// The lab's CPU study and the experiments both configure this one rule,
// each its own way:
//
//   - Schedule, a fixed schedule of looks with a level per look (the lab's
//     adaptive repeats): few looks, each read somewhat wider than the
//     error promised, the level set by simulating the whole procedure;
//   - ConfidenceSequence, an anytime-valid confidence sequence (the
//     experiments, read by a guard every few minutes and by reports at any
//     moment): any reading at any t is a look, each read wider as fewer
//     data have come, with no planned number of looks and no end.
//
// Both share α among m tests read at once by Bonferroni (Share). t is
// how far the data have come, in the configuration's unit: runs a side on
// a schedule, any unit of time in a confidence sequence (t > 0 there: at
// 0 nothing has been seen and z is infinite). Build one with Schedule or
// ConfidenceSequence.
type Sequential struct {
	alpha float64
	// A schedule: looks at first, then at about ×1.5 more, up to last.
	first, last int
	// A confidence sequence: tightest at planned, looks counted in every.
	anytime        bool
	every, planned float64
}

// Schedule is a fixed schedule of looks: at t = first, then at about
// ×1.5 more each time (first 3: 3, 5, 8, 12, 18, …) while under last,
// and at last and every t past it (a study that runs on past its last
// look, as budgets allow, is read there too). Each look's interval is
// read at α (its own, not shared across looks: the procedure's error
// over all looks is for its caller to measure).
func Schedule(first, last int, alpha float64) Sequential {
	return Sequential{alpha: alpha, first: first, last: last}
}

// ConfidenceSequence is an asymptotic confidence sequence (Waudby-Smith,
// Arnold, Wu, Howard and Ramdas, "Time-uniform central limit theory and
// asymptotic confidence sequences", Annals of Statistics 2024, Theorem
// 2.2): an estimate θ̂_t with standard error σ̂/√t is covered, at every t
// at once with chance 1-α, by θ̂_t ± z_t·σ̂/√t, where
//
//	z_t = √((1 + 1/(tρ²)) · (2·log(1/α) + log(1 + tρ²)))
//
// (the two-sided normal mixture of Robbins, with mixing variance ρ²). ρ
// only decides where the sequence is tightest; it is chosen for planned,
// so z depends on t only through t/planned and the unit of t does not
// matter. Past planned the intervals stay valid and widen slowly
// (√log t). every only counts looks (Look, K): any t may be read.
func ConfidenceSequence(every, planned, alpha float64) Sequential {
	return Sequential{alpha: alpha, anytime: true, every: every, planned: planned}
}

// Share is one test's α of m read at once: α/m (Bonferroni), α for m
// under 1.
func (s Sequential) Share(m int) float64 {
	return s.alpha / float64(max(m, 1))
}

// IsLook reports whether a reading at t is a look: on a schedule, t is
// one of its looks (a whole count); in a confidence sequence, any t is.
func (s Sequential) IsLook(t float64) bool {
	if s.anytime {
		return true
	}
	if t != math.Trunc(t) {
		return false
	}
	for at := s.first; at < s.last; at = max(at+1, (3*at+1)/2) {
		if t == float64(at) {
			return true
		}
	}
	return t >= float64(s.last)
}

// Look is which look a reading at t is, counted from 1: on a schedule,
// the number of looks up to t (0 before the first); in a confidence
// sequence, t in looks of every, rounded up, at least 1. Both grow past
// K.
func (s Sequential) Look(t float64) int {
	if s.anytime {
		return max(int(math.Ceil(t/s.every-1e-9)), 1)
	}
	k := 0
	for at := s.first; at < s.last; at = max(at+1, (3*at+1)/2) {
		if float64(at) <= t {
			k++
		}
	}
	if t >= float64(s.last) {
		k += 1 + int(t) - s.last
	}
	return k
}

// K is the number of looks planned: up to last on a schedule, up to
// planned in a confidence sequence (for people there, not a limit).
func (s Sequential) K() int {
	if s.anytime {
		return int(math.Ceil(s.planned / s.every))
	}
	return s.Look(float64(s.last))
}

// Z is how many standard errors one test of m reaches at t either side
// of its estimate: in a confidence sequence z_t at α/m, widest early,
// least near planned and widening slowly past it; on a schedule the
// normal quantile of the look's level, the same at every look.
func (s Sequential) Z(t float64, m int) float64 {
	if !s.anytime {
		return math.Sqrt2 * math.Erfcinv(s.Share(m))
	}
	l := 2 * math.Log(1/s.Share(m))
	// ρ² at the planned t*: (2·log(1/α) + log(2·log(1/α) + 1))/t*, the
	// choice that makes the width least there (Theorem 2.2's remark).
	c := l + math.Log(l+1)
	tr := c * t / s.planned // tρ²
	return math.Sqrt((1 + 1/tr) * (l + math.Log1p(tr)))
}

// Level is the two-sided nominal error of one test of m read at t: its
// interval is at level 1-Level (Bootstrap.Alpha). On a schedule it is
// the look's share of α; in a confidence sequence it is Z's as an
// interval level, 1-2(1-Φ(z)), which the bootstrap reads no further out
// than MinReadAlpha and carries the rest of the way by the ratio of the
// quantiles (a Student's t one, which only adds width: core.go).
func (s Sequential) Level(t float64, m int) float64 {
	if !s.anytime {
		return s.Share(m)
	}
	// erfc keeps the far tail (1e-25 at z = 10), where 1-Φ(z) would be 0:
	// a level of 0 would read as "no level given".
	return math.Erfc(s.Z(t, m) / math.Sqrt2)
}

package experiment

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Honest however often and however long it is read. The guard judges an
// experiment every few minutes, a report may be run at any moment, and
// each judgement looks at a dozen metrics per arm. A 95% interval per
// metric and per reading would call some difference in most A/A
// experiments. Sequential keeps the chance of any false quality verdict
// (worse or better), over every reading from the experiment's start,
// every metric and every arm, at Looks.Alpha, with no planned number of
// looks and no end:
//
//   - across metrics and arms, Bonferroni: each of the m tests gets
//     Alpha/m;
//   - across time, an asymptotic confidence sequence (Waudby-Smith,
//     Arnold, Wu, Howard and Ramdas, "Time-uniform central limit theory
//     and asymptotic confidence sequences", Annals of Statistics 2024,
//     Theorem 2.2): an estimate θ̂_t with standard error σ̂/√t is covered,
//     at every t at once with chance 1-α, by θ̂_t ± z_t·σ̂/√t, where
//
//     z_t = √((1 + 1/(tρ²)) · (2·log(1/α) + log(1 + tρ²)))
//
//     (the two-sided normal mixture of Robbins, with mixing variance ρ²).
//     ρ only decides where the sequence is tightest; it is chosen for the
//     planned length, so z depends on t only through t/Planned and the
//     unit of time does not matter. Past the planned length the
//     intervals stay valid and widen slowly (√log t).
//
// Harm is apart (harm.go): e-processes at their own α, never shared with
// quality verdicts.
//
// The span t is counted from the experiment's start (or the report's
// fixed --from): reports over sliding windows are not one sequence.
// z becomes an interval level 1-2(1-Φ(z)) for the bootstrap
// (stats.Bootstrap.Alpha), whose 95% percentiles it widens by the ratio
// of the quantiles (a Student's t one, which only adds width).

// Looks is what the error is held over.
type Looks struct {
	Every   time.Duration // between looks (the guard's --interval): for counting them only
	Planned time.Duration // the experiment's planned length (its maxDuration): where intervals are tightest
	Alpha   float64       // chance of any false quality verdict, ever
}

// DefaultLooks is the plan without one: a look every 5 minutes, tightest
// at 2 hours, 5% in all.
func DefaultLooks() Looks { return Looks{Every: 5 * time.Minute, Planned: 2 * time.Hour, Alpha: 0.05} }

// Sequential is a plan's confidence sequence. It is safe for concurrent
// reads.
type Sequential struct {
	Looks Looks
	// K is the number of looks the planned length holds: for people, not
	// a limit.
	K int
}

// NewSequential checks the plan.
func NewSequential(l Looks) (*Sequential, error) {
	switch {
	case l.Every <= 0:
		return nil, fmt.Errorf("look every %v: want more than 0", l.Every)
	case l.Planned < l.Every:
		return nil, fmt.Errorf("planned length %v: want at least one look (every %v)", l.Planned, l.Every)
	case !(l.Alpha > 0 && l.Alpha < 0.5):
		return nil, fmt.Errorf("alpha %v: want more than 0 and less than 0.5", l.Alpha)
	}
	k := int(math.Ceil(float64(l.Planned) / float64(l.Every)))
	if k > 100_000 {
		return nil, errors.New("more than 100000 looks in the planned length: look less often or plan shorter")
	}
	return &Sequential{Looks: l, K: k}, nil
}

// Look is which look an analysis of span from the start is, counted in
// Every: 1 for a span of up to one look. It grows past K.
func (s *Sequential) Look(span time.Duration) int {
	return max(int(math.Ceil(float64(span)/float64(s.Looks.Every)-1e-9)), 1)
}

// Z is the confidence sequence's boundary for one test of m after span
// from the start.
func (s *Sequential) Z(span time.Duration, m int) float64 {
	a := s.Looks.Alpha / float64(max(m, 1))
	l := 2 * math.Log(1/a)
	// ρ² at the planned length t*: (2·log(1/α) + log(2·log(1/α) + 1))/t*,
	// the choice that makes the width least there (Theorem 2.2's remark).
	c := l + math.Log(l+1)
	tr := c * math.Max(float64(span), float64(time.Second)) / float64(s.Looks.Planned) // tρ²
	return math.Sqrt((1 + 1/tr) * (l + math.Log1p(tr)))
}

// Level is the two-sided nominal error of one test of m after span: the
// test's interval is at level 1-Level.
func (s *Sequential) Level(span time.Duration, m int) float64 {
	// erfc keeps the far tail (1e-25 at z = 10), where 1-Φ(z) would be 0:
	// a level of 0 would read as "no level given".
	return math.Erfc(s.Z(span, m) / math.Sqrt2)
}

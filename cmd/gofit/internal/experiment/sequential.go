package experiment

import (
	"errors"
	"fmt"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// Honest however often and however long it is read. The guard judges an
// experiment every few minutes, a report may be run at any moment, and
// each judgement looks at a dozen metrics per arm. A 95% interval per
// metric and per reading would call some difference in most A/A
// experiments. Sequential keeps the chance of any false quality verdict
// (worse or better), over every reading from the experiment's start,
// every metric and every arm, at Looks.Alpha, with no planned number of
// looks and no end: the plan configures stats.Sequential's confidence
// sequence (stats.ConfidenceSequence), which shares Alpha among the m
// tests of a look by Bonferroni (each gets Alpha/m) and holds each one
// across time, tightest at the planned length and valid past it.
//
// Harm is apart (harm.go): e-processes at their own α, never shared with
// quality verdicts.
//
// The span t is counted from the experiment's start (or the report's
// fixed --from): reports over sliding windows are not one sequence.

// Looks is what the error is held over.
type Looks struct {
	Every   time.Duration // between looks (the guard's --interval): for counting them only
	Planned time.Duration // the experiment's planned length (its maxDuration): where intervals are tightest
	Alpha   float64       // chance of any false quality verdict, ever
}

// DefaultLooks is the plan without one: a look every 5 minutes, tightest
// at 2 hours, 5% in all.
func DefaultLooks() Looks { return Looks{Every: 5 * time.Minute, Planned: 2 * time.Hour, Alpha: 0.05} }

// Sequential is a plan's confidence sequence, read by the span from the
// start. It is safe for concurrent reads.
type Sequential struct {
	Looks Looks
	// K is the number of looks the planned length holds: for people, not
	// a limit.
	K int
	// Rule is the confidence sequence Looks configures, its t a span's
	// nanoseconds.
	Rule stats.Sequential
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
	rule := stats.ConfidenceSequence(float64(l.Every), float64(l.Planned), l.Alpha)
	k := rule.K()
	if k > 100_000 {
		return nil, errors.New("more than 100000 looks in the planned length: look less often or plan shorter")
	}
	return &Sequential{Looks: l, K: k, Rule: rule}, nil
}

// Look is which look an analysis of span from the start is, counted in
// Every: 1 for a span of up to one look. It grows past K.
func (s *Sequential) Look(span time.Duration) int { return s.Rule.Look(float64(span)) }

// Z is the confidence sequence's boundary for one test of m after span
// from the start.
func (s *Sequential) Z(span time.Duration, m int) float64 { return s.Rule.Z(since(span), m) }

// Level is the two-sided nominal error of one test of m after span: the
// test's interval is at level 1-Level (stats.Bootstrap.Alpha).
func (s *Sequential) Level(span time.Duration, m int) float64 {
	return s.Rule.Level(since(span), m)
}

// since is the sequence's t of span: at least a second, since at 0
// nothing has been seen and the boundary is infinite.
func since(span time.Duration) float64 { return float64(max(span, time.Second)) }

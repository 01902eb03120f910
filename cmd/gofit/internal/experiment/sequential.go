package experiment

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sort"
	"time"
)

// Honest across looks and metrics. The guard judges an experiment every
// few minutes and the report may be run as often; each judgement looks at
// a dozen metrics per arm. A 95% interval per metric and per look would
// call some difference in most A/A experiments. Sequential keeps the
// chance of any false verdict (worse, better or harmful), over every look
// of the plan, every metric and every arm, at Looks.Alpha:
//
//   - across metrics and arms, Bonferroni: each of the m tests of a look
//     gets Alpha/m of the plan's error;
//   - across looks, group-sequential boundaries (Jennison and Turnbull,
//     "Group Sequential Methods", ch. 2): the looks' statistics are those
//     of one Brownian motion seen at the looks' information fractions
//     t = k/K, so the boundary whose chance of ever being crossed is
//     Alpha/m is found by simulating that motion. Quality metrics (worse,
//     better) have O'Brien-Fleming boundaries, c/√t: hard to cross early,
//     close to a single look's at the end, so a report read once at the
//     planned end loses little. Harm tests (errors, restarts, OOM kills)
//     have Pocock boundaries, the same c at every look, so that the guard
//     can stop a crash-looping arm within minutes.
//
// A look's boundary z becomes an interval level 1-2(1-Φ(z)) for the
// bootstrap (stats.Bootstrap.Alpha) and a p-value threshold for the
// count tests.

// Looks is the plan the error is held over.
type Looks struct {
	Every   time.Duration // between looks: the guard's --interval
	Planned time.Duration // the experiment's planned length (its maxDuration)
	Alpha   float64       // chance of any false verdict over the plan
}

// DefaultLooks is the plan without one: a look every 5 minutes for 2
// hours, 5% in all.
func DefaultLooks() Looks { return Looks{Every: 5 * time.Minute, Planned: 2 * time.Hour, Alpha: 0.05} }

// Shape is a boundary's shape over the looks.
type Shape int

// Shapes.
const (
	OBrienFleming Shape = iota // c/√t: quality verdicts
	Pocock                     // c: harm
)

// sequentialPaths is the number of simulated paths: the boundary for a
// tail of 0.05/30 then rests on about 170 crossings.
const sequentialPaths = 100_000

// Sequential holds a plan's simulated boundaries. It is computed once (a
// few tens of ms) and then read by every analysis; it is safe for
// concurrent reads.
type Sequential struct {
	Looks Looks
	K     int
	// max[s] is the sorted maximum over the looks of path statistics
	// divided by the shape: exceeding c at any look ⇔ max > c.
	max [2][]float64
}

// NewSequential simulates the plan's boundaries (deterministic: the same
// plan gives the same boundaries).
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
	if k > 2000 {
		return nil, errors.New("more than 2000 planned looks: look less often or plan shorter")
	}
	s := &Sequential{Looks: l, K: k}
	rng := rand.New(rand.NewSource(42))
	for s2 := range s.max {
		s.max[s2] = make([]float64, sequentialPaths)
	}
	sqrtK := math.Sqrt(float64(k))
	for p := range sequentialPaths {
		sum, mo, mp := 0.0, 0.0, 0.0
		for j := 1; j <= k; j++ {
			sum += rng.NormFloat64()
			a := math.Abs(sum)
			mo = math.Max(mo, a/sqrtK)                 // |Z_j| √t_j: O'Brien-Fleming
			mp = math.Max(mp, a/math.Sqrt(float64(j))) // |Z_j|: Pocock
		}
		s.max[OBrienFleming][p], s.max[Pocock][p] = mo, mp
	}
	for i := range s.max {
		sort.Float64s(s.max[i])
	}
	return s, nil
}

// Look is the look an analysis of span is: the k of K whose information
// fraction k/K first covers it; spans past the plan are its last look.
func (s *Sequential) Look(span time.Duration) int {
	k := int(math.Ceil(float64(span)/float64(s.Looks.Every) - 1e-9))
	return min(max(k, 1), s.K)
}

// Z is the boundary at look k for one test of m.
func (s *Sequential) Z(look, m int, sh Shape) float64 {
	m = max(m, 1)
	xs := s.max[sh]
	q := 1 - s.Looks.Alpha/float64(m)
	c := xs[min(int(q*float64(len(xs))), len(xs)-1)]
	if sh == OBrienFleming {
		return c * math.Sqrt(float64(s.K)/float64(min(max(look, 1), s.K)))
	}
	return c
}

// Level is the two-sided nominal error of one test of m at look k: the
// interval of that test is at level 1-Level.
func (s *Sequential) Level(look, m int, sh Shape) float64 {
	// erfc keeps the far tail an early look has (1e-25 at z = 10), where
	// 1-Φ(z) would be 0: a level of 0 would read as "no level given".
	return math.Erfc(s.Z(look, m, sh) / math.Sqrt2)
}

package lab

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

// floorSearch finds the smallest memory limit at which a trial passes.
type floorSearch struct {
	Lo, Hi     int64 // the bracket to start from; both are tried
	Min        int64 // never try below this (0: the resolution)
	Max        int64 // never try above this
	Resolution int64 // the floor is exact to this many bytes
	Need, Of   int   // at the edge, Need passes of Of runs (k of n) confirm the floor
	// Span is how many adjacent steps, the floor and those above it,
	// confirm it together: Need×Span passes of Of×Span runs between them
	// (≤ 1: the floor alone). Survival is monotone in the limit, so the
	// steps above the floor are evidence about it. Where a service
	// survives some runs and stalls in others over a band wider than a
	// step, one limit's k of n lands anywhere in the band; pooled over two
	// steps it lands at the band's top, and a rare stall on one step (that
	// a stricter k of n per step would climb on) is outvoted.
	Span int
	// FailConfirm is how many runs must fail before a limit counts as
	// failed where a failure costs a climb (raising Hi, or stepping up
	// after an edge that did not hold): one unlucky trial must not send
	// the search up in doubling steps. ≤ 1: one failure is enough.
	FailConfirm int
	MaxTrials   int // stop here with the lowest limit that passed (0: no bound)
	// Deadline bounds the search's wall time: no trial starts that the
	// trials so far (before any, Cost) say would end after it (zero: no
	// bound), once MinTrials have run. Now is the clock (nil: time.Now).
	Deadline  time.Time
	MinTrials int
	Cost      time.Duration
	Now       func() time.Time
	// Pass decides a trial; nil means it survived (outcome ok).
	Pass func(result.MemTrial) bool
}

// searchResult is a finished search. Floor is 0 when even Max failed, or
// when the search was cut before any limit passed. BudgetLimited says the
// search was cut (by Deadline or MaxTrials) before it finished: Floor is
// then the lowest limit that passed so far, an upper bound on the floor.
type searchResult struct {
	Floor         int64
	Trials        []result.MemTrial // in the order they ran
	BudgetLimited bool
	Max           int64 // the highest limit the search could try
}

// errCut stops a search whose budget is spent.
var errCut = errors.New("search budget spent")

// Find runs the search: it asks replay (the pure rule) what to try next
// given the trials so far, runs that, and stops when replay says the
// search is over, when the next trial would end after Deadline (the
// search is then cut: BudgetLimited), or when ctx ends (its error, and no
// floor). The analysis replays the recorded trials through the same rule,
// so the floor the study acted on is the floor results.json shows.
func (s floorSearch) Find(ctx context.Context, run func(context.Context, int64) result.MemTrial) (searchResult, error) {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	var trials []result.MemTrial
	var spent time.Duration
	for {
		r, next, more, _ := s.replay(trials)
		if !more {
			return r, nil
		}
		if err := ctx.Err(); err != nil {
			r.Floor = 0
			return r, err
		}
		t0 := now()
		est := s.Cost
		if n := len(trials); n > 0 {
			est = spent / time.Duration(n)
		}
		if !s.Deadline.IsZero() && len(trials) >= s.MinTrials && (!t0.Before(s.Deadline) || t0.Add(est).After(s.Deadline)) {
			return r, nil
		}
		t := run(ctx, next)
		if err := ctx.Err(); err != nil {
			r.Floor = 0
			return r, err
		}
		spent += now().Sub(t0)
		t.LimitBytes = next // the replay knows a trial by its limit
		trials = append(trials, t)
	}
}

// errMore and errDiverged end a replay: the trials ran out while the
// search wanted another, or the next trial ran at a limit other than the
// one the search asks for (its rule changed since they ran).
var (
	errMore     = errors.New("the search wants another trial")
	errDiverged = errors.New("the trials no longer follow the search")
)

// replay is the search's rule as a pure function of the trials it ran, in
// order: where they take it. When the search is over, more is false and r
// is its result. When it wants another trial, more is true, next is the
// limit to try, and r is the search as if cut there (BudgetLimited, the
// floor the lowest limit that passed so far): what the records of a study
// whose budget or context ended show. diverged says a trial's limit was
// not the one the search asked for: r is the search cut before it (a
// replay of old records under a changed rule).
func (s floorSearch) replay(trials []result.MemTrial) (r searchResult, next int64, more, diverged bool) {
	i := 0
	var stop error
	r, _ = s.find(func(limit int64) (result.MemTrial, error) {
		switch {
		case i == len(trials):
			stop = errMore
		case trials[i].LimitBytes != limit:
			stop = errDiverged
		default:
			i++
			return trials[i-1], nil
		}
		next = limit
		return result.MemTrial{}, stop
	})
	return r, next, stop != nil, stop == errDiverged
}

// find is the search, trial by trial from next, which gives the trial at
// a limit or an error that cuts the search there.
func (s floorSearch) find(next func(int64) (result.MemTrial, error)) (searchResult, error) {
	res := max(s.Resolution, 1)
	align := func(v int64) int64 { return max((v+res-1)/res*res, res) }
	pass := s.Pass
	if pass == nil {
		pass = func(t result.MemTrial) bool { return t.Outcome == result.OK }
	}
	var out searchResult
	passes, runs := map[int64]int{}, map[int64]int{} // per limit
	try := func(limit int64) (bool, error) {
		if s.MaxTrials > 0 && len(out.Trials) >= s.MaxTrials {
			return false, errCut
		}
		t, err := next(limit)
		if err != nil {
			return false, errCut
		}
		out.Trials = append(out.Trials, t)
		ok := pass(t)
		runs[limit]++
		if ok {
			passes[limit]++
		}
		return ok, nil
	}
	// lowestAbove is the lowest limit above lo that passed: where a climb
	// that was cut leaves the floor.
	lowestAbove := func(lo int64) int64 {
		best := int64(0)
		for l := range passes {
			if l > lo && (best == 0 || l < best) {
				best = l
			}
		}
		return best
	}
	// highestFailBelow is the highest limit under v that was tried and
	// never passed (floor when there is none): where a bisection below a
	// pass starts.
	highestFailBelow := func(v, floor int64) int64 {
		best := floor
		for l, n := range runs {
			if l < v && l > best && n > 0 && passes[l] == 0 {
				best = l
			}
		}
		return best
	}
	// tryClimb is try where a failure sends the search up: it counts only
	// once FailConfirm runs failed.
	tryClimb := func(limit int64) (bool, error) {
		for i := 0; ; i++ {
			ok, err := try(limit)
			if ok || err != nil || i+1 >= s.FailConfirm {
				return ok, err
			}
		}
	}
	// done ends the search: a cut keeps the best limit so far.
	done := func(floor int64, err error) (searchResult, error) {
		if err == errCut {
			out.BudgetLimited = true
			err = nil
		}
		out.Floor = floor
		if err != nil {
			out.Floor = 0
		}
		return out, err
	}
	minLimit := align(max(s.Min, res))
	maxLimit := max(align(s.Max), minLimit)
	out.Max = maxLimit
	lo, hi := max(align(s.Lo), minLimit), min(max(align(s.Hi), minLimit), maxLimit)
	loFails := false
	// A passing upper bound: raise Hi until a trial passes.
	for {
		ok, err := tryClimb(hi)
		if err != nil {
			return done(0, err)
		}
		if ok {
			break
		}
		if hi >= maxLimit {
			return done(0, nil)
		}
		lo, hi, loFails = hi, min(align(hi*2), maxLimit), true
	}
	// A failing lower bound: the floor may lie below Lo, so Lo is tried
	// too, and halved while it passes (never below Min).
	for !loFails && lo < hi {
		ok, err := try(lo)
		if err != nil {
			return done(hi, err)
		}
		if !ok {
			loFails = true
			break
		}
		hi = lo
		if lo <= minLimit {
			// Nothing below Min is tried, so the floor is Min: it is
			// confirmed as a bisected edge is, below.
			lo = hi - res
			break
		}
		lo = max(align(lo/2), minLimit)
		if lo >= hi {
			lo = hi - res
		}
	}
	for {
		// Coarse: bisect between a failure and a pass.
		for hi-lo > res {
			mid := align(lo + (hi-lo)/2)
			if mid >= hi {
				mid = hi - res
			}
			ok, err := try(mid)
			if err != nil {
				return done(hi, err)
			}
			if ok {
				hi = mid
			} else {
				lo = mid
			}
		}
		// Fine: confirm the edge k of n times over it and the Span-1
		// steps above it, counting the runs they already had; the step
		// with the fewest runs goes next.
		steps := []int64{hi}
		for j := 1; j < s.Span && hi+int64(j)*res <= maxLimit; j++ {
			steps = append(steps, hi+int64(j)*res)
		}
		need, of := s.Need*len(steps), s.Of*len(steps)
		p := 0
		for {
			r, next := 0, steps[0]
			p = 0
			for _, l := range steps {
				p, r = p+passes[l], r+runs[l]
				if runs[l] < runs[next] {
					next = l
				}
			}
			if r >= of || p >= need || p+(of-r) < need {
				break
			}
			if _, err := try(next); err != nil {
				return done(hi, err)
			}
		}
		if p >= need || s.Of <= 1 {
			// The step below failed once, in bisection, where nothing
			// confirms a failure: near the edge a trial fails in some runs
			// and not in others
			// (docs/results/memory.md#what-set-the-labs-floor-search). It
			// gets a second look; if it passes, the floor is lower, and
			// the search bisects again below it.
			below := hi - res
			if s.Of <= 1 || below < minLimit || runs[below] != 1 || passes[below] != 0 {
				return done(hi, nil)
			}
			ok, err := try(below)
			if err != nil {
				return done(hi, err)
			}
			if !ok {
				return done(hi, nil)
			}
			hi, lo = below, highestFailBelow(below, minLimit-res)
			continue
		}
		// It does not hold: the floor is higher. Step up in doubling steps
		// (so the climb costs log trials, not one per resolution step) to
		// a limit that passes, then bisect again.
		lo = hi
		for step := res; ; step *= 2 {
			if lo >= maxLimit {
				return done(0, nil)
			}
			next := min(lo+step, maxLimit)
			ok, err := tryClimb(next)
			if err != nil {
				return done(lowestAbove(lo), err)
			}
			if ok {
				hi = next
				break
			}
			lo = next
		}
	}
}

// survivalCurve groups trials by limit, ascending.
func survivalCurve(trials []result.MemTrial) []result.Survival {
	by := map[int64]*result.Survival{}
	for _, t := range trials {
		s := by[t.LimitBytes]
		if s == nil {
			s = &result.Survival{LimitBytes: t.LimitBytes}
			by[t.LimitBytes] = s
		}
		s.Runs++
		if t.Outcome == result.OK {
			s.Passed++
		}
	}
	out := make([]result.Survival, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LimitBytes < out[j].LimitBytes })
	return out
}

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
// a limit or an error that cuts the search there: a bracket (a limit that
// passes above one that fails), then bisection to the edge, confirmed
// there, until the edge holds.
func (s floorSearch) find(next func(int64) (result.MemTrial, error)) (searchResult, error) {
	w := newFloorWalk(s, next)
	if w.passingTop() && w.failingBottom() {
		for w.bisect() && w.settleEdge() {
		}
	}
	return w.out, w.err
}

// floorWalk is a floor search under way: the bracket [lo, hi] (lo fails,
// or is below Min; hi passes), every limit's runs and passes so far, and
// once it ended, its result. Each step returns whether the search goes
// on; one that ends it sets out and err (end).
type floorWalk struct {
	s                  floorSearch
	next               func(int64) (result.MemTrial, error)
	pass               func(result.MemTrial) bool
	res                int64 // the resolution, at least a byte
	minLimit, maxLimit int64
	lo, hi             int64
	loFails            bool
	passes, runs       map[int64]int // per limit
	out                searchResult
	err                error
}

func newFloorWalk(s floorSearch, next func(int64) (result.MemTrial, error)) *floorWalk {
	w := &floorWalk{s: s, next: next, pass: s.Pass, res: max(s.Resolution, 1), passes: map[int64]int{}, runs: map[int64]int{}}
	if w.pass == nil {
		w.pass = func(t result.MemTrial) bool { return t.Outcome == result.OK }
	}
	w.minLimit = w.align(max(s.Min, w.res))
	w.maxLimit = max(w.align(s.Max), w.minLimit)
	w.out.Max = w.maxLimit
	w.lo, w.hi = max(w.align(s.Lo), w.minLimit), min(max(w.align(s.Hi), w.minLimit), w.maxLimit)
	return w
}

// align rounds v up to the resolution, never below one step.
func (w *floorWalk) align(v int64) int64 { return max((v+w.res-1)/w.res*w.res, w.res) }

// try runs a trial at limit and says whether it passed; errCut once
// MaxTrials ran or next cut the search.
func (w *floorWalk) try(limit int64) (bool, error) {
	if w.s.MaxTrials > 0 && len(w.out.Trials) >= w.s.MaxTrials {
		return false, errCut
	}
	t, err := w.next(limit)
	if err != nil {
		return false, errCut
	}
	w.out.Trials = append(w.out.Trials, t)
	ok := w.pass(t)
	w.runs[limit]++
	if ok {
		w.passes[limit]++
	}
	return ok, nil
}

// tryClimb is try where a failure sends the search up: it counts only
// once FailConfirm runs failed.
func (w *floorWalk) tryClimb(limit int64) (bool, error) {
	for i := 0; ; i++ {
		ok, err := w.try(limit)
		if ok || err != nil || i+1 >= w.s.FailConfirm {
			return ok, err
		}
	}
}

// end ends the search at floor and returns false: a cut keeps the best
// limit so far.
func (w *floorWalk) end(floor int64, err error) bool {
	if err == errCut {
		w.out.BudgetLimited = true
		err = nil
	}
	w.out.Floor = floor
	if err != nil {
		w.out.Floor = 0
	}
	w.err = err
	return false
}

// lowestAbove is the lowest limit above lo that passed: where a climb
// that was cut leaves the floor.
func (w *floorWalk) lowestAbove(lo int64) int64 {
	best := int64(0)
	for l := range w.passes {
		if l > lo && (best == 0 || l < best) {
			best = l
		}
	}
	return best
}

// highestFailBelow is the highest limit under v that was tried and
// never passed (floor when there is none): where a bisection below a
// pass starts.
func (w *floorWalk) highestFailBelow(v, floor int64) int64 {
	best := floor
	for l, n := range w.runs {
		if l < v && l > best && n > 0 && w.passes[l] == 0 {
			best = l
		}
	}
	return best
}

// passingTop finds a passing upper bound: it raises Hi until a trial
// passes.
func (w *floorWalk) passingTop() bool {
	for {
		ok, err := w.tryClimb(w.hi)
		if err != nil {
			return w.end(0, err)
		}
		if ok {
			return true
		}
		if w.hi >= w.maxLimit {
			return w.end(0, nil)
		}
		w.lo, w.hi, w.loFails = w.hi, min(w.align(w.hi*2), w.maxLimit), true
	}
}

// failingBottom finds a failing lower bound: the floor may lie below Lo,
// so Lo is tried too, and halved while it passes (never below Min).
func (w *floorWalk) failingBottom() bool {
	for !w.loFails && w.lo < w.hi {
		ok, err := w.try(w.lo)
		if err != nil {
			return w.end(w.hi, err)
		}
		if !ok {
			w.loFails = true
			break
		}
		w.hi = w.lo
		if w.lo <= w.minLimit {
			// Nothing below Min is tried, so the floor is Min: it is
			// confirmed as a bisected edge is (settleEdge).
			w.lo = w.hi - w.res
			break
		}
		w.lo = max(w.align(w.lo/2), w.minLimit)
		if w.lo >= w.hi {
			w.lo = w.hi - w.res
		}
	}
	return true
}

// bisect is the coarse step: bisect between a failure and a pass.
func (w *floorWalk) bisect() bool {
	for w.hi-w.lo > w.res {
		mid := w.align(w.lo + (w.hi-w.lo)/2)
		if mid >= w.hi {
			mid = w.hi - w.res
		}
		ok, err := w.try(mid)
		if err != nil {
			return w.end(w.hi, err)
		}
		if ok {
			w.hi = mid
		} else {
			w.lo = mid
		}
	}
	return true
}

// settleEdge is the fine step: it confirms the edge at hi; where it
// holds, it looks once more below it, and where it does not, it climbs
// to a limit that passes. It returns whether the search bisects again.
func (w *floorWalk) settleEdge() bool {
	held, going := w.confirm()
	switch {
	case !going:
		return false
	case held:
		return w.lookBelow()
	default:
		return w.climb()
	}
}

// confirm confirms the edge k of n times over it and the Span-1 steps
// above it, counting the runs they already had; the step with the
// fewest runs goes next. It says whether the edge held, and whether the
// search goes on.
func (w *floorWalk) confirm() (held, going bool) {
	steps := []int64{w.hi}
	for j := 1; j < w.s.Span && w.hi+int64(j)*w.res <= w.maxLimit; j++ {
		steps = append(steps, w.hi+int64(j)*w.res)
	}
	need, of := w.s.Need*len(steps), w.s.Of*len(steps)
	p := 0
	for {
		r, next := 0, steps[0]
		p = 0
		for _, l := range steps {
			p, r = p+w.passes[l], r+w.runs[l]
			if w.runs[l] < w.runs[next] {
				next = l
			}
		}
		if r >= of || p >= need || p+(of-r) < need {
			break
		}
		if _, err := w.try(next); err != nil {
			return false, w.end(w.hi, err)
		}
	}
	return p >= need || w.s.Of <= 1, true
}

// lookBelow follows an edge that held. The step below failed once, in
// bisection, where nothing confirms a failure: near the edge a trial
// fails in some runs and not in others
// (docs/results/memory.md#what-set-the-labs-floor-search). It gets a
// second look; if it passes, the floor is lower, and the search bisects
// again below it.
func (w *floorWalk) lookBelow() bool {
	below := w.hi - w.res
	if w.s.Of <= 1 || below < w.minLimit || w.runs[below] != 1 || w.passes[below] != 0 {
		return w.end(w.hi, nil)
	}
	ok, err := w.try(below)
	if err != nil {
		return w.end(w.hi, err)
	}
	if !ok {
		return w.end(w.hi, nil)
	}
	w.hi, w.lo = below, w.highestFailBelow(below, w.minLimit-w.res)
	return true
}

// climb follows an edge that does not hold: the floor is higher. It
// steps up in doubling steps (so the climb costs log trials, not one per
// resolution step) to a limit that passes, for the search to bisect
// again.
func (w *floorWalk) climb() bool {
	w.lo = w.hi
	for step := w.res; ; step *= 2 {
		if w.lo >= w.maxLimit {
			return w.end(0, nil)
		}
		next := min(w.lo+step, w.maxLimit)
		ok, err := w.tryClimb(next)
		if err != nil {
			return w.end(w.lowestAbove(w.lo), err)
		}
		if ok {
			w.hi = next
			return true
		}
		w.lo = next
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

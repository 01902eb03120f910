package lab

import (
	"context"
	"errors"
	"fmt"
	"sort"
)

// Outcomes of a memory trial.
const (
	OK        = "ok"
	OOMKilled = "oom_killed"
	Stalled   = "stalled"
	Errored   = "errors"
)

// MemTrial is one run of the target under a memory limit.
type MemTrial struct {
	LimitBytes     int64   `json:"limit_bytes"`
	Outcome        string  `json:"outcome"`
	Healthy        bool    `json:"healthy"` // ok, ≥ 90% of the unlimited probe's rps, p99 ≤ 2× its p99
	RPS            float64 `json:"rps"`
	P99            float64 `json:"p99_ms"`
	Errors         int     `json:"errors"`
	PeakBytes      uint64  `json:"peak_bytes"`
	PageCacheBytes uint64  `json:"page_cache_bytes"` // file pages charged to the trial at the end
	ResidentBefore float64 `json:"binary_resident_before"`
	MajorFaults    uint64  `json:"major_faults"`
	LimitHits      uint64  `json:"limit_hits"`
	Seconds        float64 `json:"seconds"`
	Detail         string  `json:"detail,omitempty"`
}

func (t MemTrial) verdict() string {
	if t.Outcome == OK && t.Healthy {
		return "ok, healthy"
	}
	if t.Outcome == OK {
		return fmt.Sprintf("ok, not healthy (%.0f rps, p99 %.1fms)", t.RPS, t.P99)
	}
	return t.Outcome
}

// FloorSearch finds the smallest memory limit at which a trial passes.
type FloorSearch struct {
	Lo, Hi     int64 // the bracket to start from; both are tried
	Max        int64 // never try above this
	Resolution int64 // the floor is exact to this many bytes
	Need, Of   int   // at the edge, Need passes of Of runs (k of n) confirm the floor
	MaxTrials  int   // stop here with the lowest limit that passed (0: no bound)
	// Allow is asked before every trial whether one more fits the study's
	// budget; false ends the search as MaxTrials does, with the lowest
	// limit that passed. The caller notes that the budget cut it. nil
	// always allows.
	Allow func() bool
	// Pass decides a trial; nil means it survived (outcome ok).
	Pass func(MemTrial) bool
}

// Find runs the search. floor is 0 when even Max fails. Trials are in the
// order they ran.
func (s FloorSearch) Find(ctx context.Context, run func(context.Context, int64) MemTrial) (floor int64, trials []MemTrial, err error) {
	res := max(s.Resolution, 1)
	align := func(v int64) int64 { return max((v+res-1)/res*res, res) }
	pass := s.Pass
	if pass == nil {
		pass = func(t MemTrial) bool { return t.Outcome == OK }
	}
	errBudget := errors.New("trial budget spent")
	try := func(limit int64) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if s.MaxTrials > 0 && len(trials) >= s.MaxTrials || s.Allow != nil && !s.Allow() {
			return false, errBudget
		}
		t := run(ctx, limit)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		trials = append(trials, t)
		return pass(t), nil
	}
	maxLimit := align(s.Max)
	lo, hi := align(s.Lo), min(align(s.Hi), maxLimit)
	loFails := false
	// A passing upper bound: raise Hi until a trial passes.
	for {
		ok, err := try(hi)
		if err == errBudget {
			return 0, trials, nil
		}
		if err != nil {
			return 0, trials, err
		}
		if ok {
			break
		}
		if hi >= maxLimit {
			return 0, trials, nil
		}
		lo, hi, loFails = hi, min(align(hi*2), maxLimit), true
	}
	// A failing lower bound: the floor may lie below Lo, so Lo is tried
	// too, and halved while it passes.
	for !loFails && lo < hi {
		ok, err := try(lo)
		if err == errBudget {
			return hi, trials, nil
		}
		if err != nil {
			return 0, trials, err
		}
		if !ok {
			loFails = true
			break
		}
		hi = lo
		if lo <= res {
			return hi, trials, nil
		}
		lo = align(lo / 2)
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
			if err == errBudget {
				return hi, trials, nil
			}
			if err != nil {
				return 0, trials, err
			}
			if ok {
				hi = mid
			} else {
				lo = mid
			}
		}
		// Fine: confirm the edge k of n times (hi has one pass already).
		passes, runs := 1, 1
		for runs < s.Of && passes < s.Need && passes+(s.Of-runs) >= s.Need {
			ok, err := try(hi)
			if err == errBudget {
				return hi, trials, nil
			}
			if err != nil {
				return 0, trials, err
			}
			runs++
			if ok {
				passes++
			}
		}
		if passes >= s.Need || s.Of <= 1 {
			return hi, trials, nil
		}
		// It does not hold: the floor is higher. Step up in doubling steps
		// (so the climb costs log trials, not one per resolution step) to
		// a limit that passes, then bisect again.
		lo = hi
		for step := res; ; step *= 2 {
			if lo >= maxLimit {
				return 0, trials, nil
			}
			next := min(lo+step, maxLimit)
			ok, err := try(next)
			if err == errBudget {
				return 0, trials, nil
			}
			if err != nil {
				return 0, trials, err
			}
			if ok {
				hi = next
				break
			}
			lo = next
		}
	}
}

// Survival summarises trials per limit: how many runs passed of how many.
type Survival struct {
	LimitBytes int64 `json:"limit_bytes"`
	Passed     int   `json:"passed"`
	Runs       int   `json:"runs"`
}

// SurvivalCurve groups trials by limit, ascending.
func SurvivalCurve(trials []MemTrial) []Survival {
	by := map[int64]*Survival{}
	for _, t := range trials {
		s := by[t.LimitBytes]
		if s == nil {
			s = &Survival{LimitBytes: t.LimitBytes}
			by[t.LimitBytes] = s
		}
		s.Runs++
		if t.Outcome == OK {
			s.Passed++
		}
	}
	out := make([]Survival, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LimitBytes < out[j].LimitBytes })
	return out
}

// Summary is min/median/max of repeated measurements.
type Summary struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// Summarize returns min/median/max; the median of an even count is the
// mean of the middle two.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Min: s[0], Median: m, Max: s[len(s)-1]}
}

package lab

import (
	"context"
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
	RPS            float64 `json:"rps"`
	P99            float64 `json:"p99_ms"`
	PeakBytes      uint64  `json:"peak_bytes"`
	PageCacheBytes uint64  `json:"page_cache_bytes"` // file pages charged to the trial at the end
	ResidentBefore float64 `json:"binary_resident_before"`
	MajorFaults    uint64  `json:"major_faults"`
	LimitHits      uint64  `json:"limit_hits"`
	Seconds        float64 `json:"seconds"`
	Detail         string  `json:"detail,omitempty"`
}

// FloorSearch finds the smallest memory limit at which the target survives.
type FloorSearch struct {
	Lo, Hi     int64 // Lo is assumed to fail (not run); Hi is tried first and raised if it fails
	Max        int64 // never try above this
	Resolution int64 // the floor is exact to this many bytes
	Need, Of   int   // at the edge, Need passes of Of runs (k of n) confirm the floor
}

// Find runs the search. floor is 0 when even Max fails. Trials are in the
// order they ran.
func (s FloorSearch) Find(ctx context.Context, run func(context.Context, int64) MemTrial) (floor int64, trials []MemTrial, err error) {
	res := max(s.Resolution, 1)
	align := func(v int64) int64 { return (v + res - 1) / res * res }
	try := func(limit int64) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		t := run(ctx, limit)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		trials = append(trials, t)
		return t.Outcome == OK, nil
	}
	lo, hi := align(s.Lo), align(s.Hi)
	// A passing upper bound: raise Hi until the target survives.
	for {
		ok, err := try(hi)
		if err != nil {
			return 0, trials, err
		}
		if ok {
			break
		}
		if hi >= s.Max {
			return 0, trials, nil
		}
		lo, hi = hi, min(align(hi*2), align(s.Max))
	}
	// Coarse: bisect between a failure and a pass.
	for hi-lo > res {
		mid := align(lo + (hi-lo)/2)
		if mid >= hi {
			mid = hi - res
		}
		ok, err := try(mid)
		if err != nil {
			return 0, trials, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	// Fine: confirm the edge k of n times (hi has one pass already). Where
	// it does not hold, the floor is higher: step up by the resolution
	// until a limit passes, and confirm that one.
	for {
		passes, runs := 1, 1
		for runs < s.Of && passes < s.Need && passes+(s.Of-runs) >= s.Need {
			ok, err := try(hi)
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
		for ok := false; !ok; {
			if hi >= s.Max {
				return 0, trials, nil
			}
			hi += res
			var err error
			if ok, err = try(hi); err != nil {
				return 0, trials, err
			}
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

package lab

import (
	"context"
	"fmt"
)

// Health: is a memory limit one the service runs well at, not merely one
// it survives? Judged at a fixed open-loop rate (a share of the unlimited
// service's capacity, so it serves the rate comfortably), on p99 and
// errors, against a reference run of the same setting without a memory
// limit. Reference and limited runs alternate in pairs (ABBA), so drift on
// a shared machine reaches both alike; pairs are added until the
// bootstrap interval of the p99 ratio (limited ÷ reference) lies wholly on
// one side of healthP99Factor, as the CPU study's verdicts do.

// healthP99Factor is the p99 ratio to the reference above which a limit
// is unhealthy: the latency a memory limit may cost before it is the
// limit, not the load, that sets it.
const healthP99Factor = 2.0

// healthLoad is the health trials' load.
func (l *study) healthLoad() memLoad {
	return memLoad{rate: l.res.Target.HealthRPS, window: l.cfg.HealthWindow}
}

// healthTrial judges one limit: pairs of runs, the reference environment
// without a memory limit and env at limit, both at the health rate. A
// limited run that does not survive ends the judgement at once.
func (l *study) healthTrial(ctx context.Context, ref, env map[string]string, cpu float64, limit int64) MemTrial {
	t := MemTrial{LimitBytes: limit, Outcome: OK, OfferedRPS: l.res.Target.HealthRPS}
	var trials, refs Sample
	refFailed := 0
	limited := func() bool {
		lt, r := l.memRun(ctx, env, cpu, limit, l.healthLoad())
		t.Seconds += lt.Seconds
		t.PeakBytes = max(t.PeakBytes, lt.PeakBytes)
		t.PageCacheBytes, t.MajorFaults, t.LimitHits = lt.PageCacheBytes, t.MajorFaults+lt.MajorFaults, t.LimitHits+lt.LimitHits
		t.Errors += lt.Errors
		if t.Pairs == 0 {
			t.ResidentBefore = lt.ResidentBefore
		}
		if lt.Outcome != OK {
			t.Outcome, t.Detail = lt.Outcome, lt.Detail
			return false
		}
		trials = append(trials, r.Blocks)
		return true
	}
	reference := func() {
		rt, r := l.memRun(ctx, ref, cpu, 0, l.healthLoad())
		t.Seconds += rt.Seconds
		if rt.Outcome != OK {
			// Not the limit's fault: the pair is judged on the other
			// references, and the report says how many failed.
			refFailed++
			return
		}
		refs = append(refs, r.Blocks)
	}
	for t.Pairs < l.cfg.HealthMaxPairs {
		if t.Pairs%2 == 0 {
			reference()
			if ctx.Err() != nil || !limited() {
				break
			}
		} else {
			if !limited() || ctx.Err() != nil {
				break
			}
			reference()
		}
		t.Pairs++
		if ctx.Err() != nil {
			break
		}
		if t.Pairs >= l.cfg.HealthPairs {
			if _, decided, _ := judgeHealth(l.boot, trials, refs); decided {
				break
			}
		}
	}
	if refFailed > 0 {
		t.Detail = fmt.Sprintf("%d reference runs without a memory limit failed and were left out", refFailed)
	}
	if t.Outcome != OK || ctx.Err() != nil {
		t.Decided = true
		return t
	}
	healthy, decided, ratio := judgeHealth(l.boot, trials, refs)
	t.Healthy, t.Decided = healthy, decided
	t.RPS, t.P99, t.RefP99 = trials.rps(), trials.p99(), refs.p99()
	if ratio.finite() {
		t.P99Ratio = &ratio
	}
	return t
}

// judgeHealth reads the p99 ratio (limited ÷ reference): unhealthy when
// its interval lies wholly above healthP99Factor, healthy when wholly at
// or below it; otherwise undecided, and judged on the estimate.
func judgeHealth(boot *Bootstrap, trials, refs Sample) (healthy, decided bool, ratio Interval) {
	if len(refs) == 0 || len(trials) == 0 {
		return false, false, Interval{}
	}
	ratio = boot.Ratio(trials, refs, StatP99)
	switch {
	case ratio.Low > healthP99Factor:
		return false, true, ratio
	case ratio.High <= healthP99Factor:
		return true, true, ratio
	}
	return ratio.Value <= healthP99Factor, false, ratio
}

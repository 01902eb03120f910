package lab

import (
	"context"
	"fmt"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// Health: is a memory limit one the service runs well at, not merely one
// it survives? Judged at a fixed open-loop rate (a share of the unlimited
// service's capacity, so it serves the rate comfortably), on p99 and
// errors, against a reference run of the same setting without a memory
// limit. Reference and limited runs go side by side, loaded at once, so
// the moments of a shared machine reach both alike; pairs are added until the
// bootstrap interval of the p99 ratio (limited ÷ reference) lies wholly on
// one side of healthP99Factor, as the CPU study's verdicts do.

// healthP99Factor is the p99 ratio to the reference above which a limit
// is unhealthy: the latency a memory limit may cost before it is the
// limit, not the load, that sets it.
const healthP99Factor = 2.0

// healthLoad is the health trials' load.
func (l *study) healthLoad() memLoad {
	return memLoad{rate: l.rec.Target.HealthRPS, window: l.cfg.HealthWindow}
}

// healthTrial judges one limit: pairs of runs side by side, the reference
// environment without a memory limit and env at limit, both at the
// health rate. A limited run that does not survive ends the judgement.
// After the first pair, no pair starts that the pairs so far say would end
// after the study's budget: the trial is then judged on the pairs it has,
// and says so (BudgetCut).
func (l *study) healthTrial(ctx context.Context, ref, env map[string]string, cpu float64, limit int64) result.MemTrial {
	t := result.MemTrial{LimitBytes: limit, Outcome: result.OK, OfferedRPS: l.rec.Target.HealthRPS}
	var pairs []healthPair
	refFailed := 0
	end := l.started.Add(l.cfg.Budget)
	for t.Pairs < l.cfg.HealthMaxPairs && ctx.Err() == nil {
		if t.Pairs > 0 && l.now().Add(l.plan.pairCost()).After(end) {
			t.BudgetCut = true
			break
		}
		t0 := l.now()
		rt, rr, lt, lr := l.pairRun(ctx, ref, env, cpu, limit, l.healthLoad())
		if ctx.Err() != nil {
			break
		}
		l.plan.ranPair(l.now().Sub(t0))
		t.Seconds += max(rt.Seconds, lt.Seconds)
		t.PeakBytes = max(t.PeakBytes, lt.PeakBytes)
		t.PageCacheBytes, t.MajorFaults, t.LimitHits = lt.PageCacheBytes, t.MajorFaults+lt.MajorFaults, t.LimitHits+lt.LimitHits
		t.Errors += lt.Errors
		if t.Pairs == 0 {
			t.ResidentBefore = lt.ResidentBefore
		}
		if lt.Outcome != result.OK {
			t.Outcome, t.Detail = lt.Outcome, lt.Detail
			break
		}
		t.Pairs++
		if rt.Outcome != result.OK {
			// Not the limit's fault: the pair is left out, and the report
			// says how many were.
			refFailed++
		} else {
			pairs = append(pairs, healthPair{ref: rr.Blocks, limited: lr.Blocks})
		}
		if t.Pairs >= l.cfg.HealthPairs {
			if _, decided, _ := judgeHealth(l.healthBoot, pairs); decided {
				break
			}
		}
	}
	if refFailed > 0 {
		t.Detail = fmt.Sprintf("%d reference runs without a memory limit failed; their pairs were left out", refFailed)
	}
	if t.Outcome != result.OK || ctx.Err() != nil {
		t.Decided = true
		return t
	}
	healthy, decided, ratio := judgeHealth(l.healthBoot, pairs)
	t.Healthy, t.Decided = healthy, decided
	lim, refs := pairSamples(pairs)
	t.RPS, t.P99, t.RefP99 = lim.RPS(), lim.Quantile(0.99), refs.Quantile(0.99)
	if ratio.Finite() {
		t.P99Ratio = &ratio
	}
	return t
}

// healthPair is a reference run and the limited run beside it.
type healthPair struct {
	ref, limited []stats.Block
}

// pairSamples splits pairs into the limited runs and the references, in
// pair order (stats.Bootstrap.PairedRatio keeps them paired).
func pairSamples(pairs []healthPair) (lim, refs stats.Sample) {
	for _, p := range pairs {
		lim, refs = append(lim, p.limited), append(refs, p.ref)
	}
	return lim, refs
}

// judgeHealth reads the p99 ratio (limited ÷ reference): unhealthy when
// its interval lies wholly above healthP99Factor, healthy when wholly at
// or below it; otherwise undecided, and judged on the estimate.
func judgeHealth(boot *stats.Bootstrap, pairs []healthPair) (healthy, decided bool, ratio stats.Interval) {
	lim, refs := pairSamples(pairs)
	ratio = boot.PairedRatio(lim, refs, stats.StatP99)
	switch {
	case len(pairs) == 0:
		return false, false, ratio
	case ratio.Low > healthP99Factor:
		return false, true, ratio
	case ratio.High <= healthP99Factor:
		return true, true, ratio
	}
	return ratio.Value <= healthP99Factor, false, ratio
}

package lab

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"

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

// checkKey names the check trial: its intervals' seed.
const checkKey = "check"

// healthRecord is one health trial as it ran: its limit, the rate
// offered, and its pairs in order, blocks and all, so that the
// judgement (judgeTrial) can be replayed.
type healthRecord struct {
	LimitBytes int64        `json:"limit_bytes"`
	OfferedRPS float64      `json:"offered_rps"`
	Pairs      []healthPair `json:"pairs"`
	// BudgetCut: the study started no more pairs, as the next one would
	// have ended after the budget.
	BudgetCut bool `json:"budget_cut,omitempty"`
}

// healthPair is a reference run and the limited run beside it.
type healthPair struct {
	Ref           result.MemTrial `json:"reference"`
	Limited       result.MemTrial `json:"limited"`
	RefBlocks     []stats.Block   `json:"reference_blocks"`
	LimitedBlocks []stats.Block   `json:"limited_blocks"`
}

// healthTrial judges one limit: pairs of runs side by side, the reference
// environment without a memory limit and env at limit, both at the
// health rate, until judgeTrial, asked of the pairs so far, wants no
// more. After the first pair, no pair starts that the pairs so far say
// would end after the study's budget: the trial is then judged on the
// pairs it has, and says so (BudgetCut). It returns the verdict and the
// record it rests on.
func (l *study) healthTrial(ctx context.Context, key string, ref, env map[string]string, cpu float64, limit int64) (result.MemTrial, healthRecord) {
	h := healthRecord{LimitBytes: limit, OfferedRPS: l.rec.Target.HealthRPS, Pairs: []healthPair{}}
	ml := trial.MemLoad{Rate: l.rec.Target.HealthRPS, Window: l.cfg.HealthWindow, ProbeRPS: l.rec.Target.ProbeRPS}
	end := l.started.Add(l.cfg.Budget)
	for ctx.Err() == nil {
		if _, more := judgeTrial(l.cfg, key, h); !more {
			break
		}
		if len(h.Pairs) > 0 && l.now().Add(l.plan.costs.pairCost()).After(end) {
			h.BudgetCut = true
			break
		}
		t0 := l.now()
		runs := l.run.Memory(ctx, trial.MemSpec{Env: env, CPU: cpu, Limit: limit, Load: ml}, trial.MemSpec{Env: ref, CPU: cpu, Load: ml, Reference: true})
		if ctx.Err() != nil {
			break
		}
		l.plan.costs.ranPair(l.now().Sub(t0))
		h.Pairs = append(h.Pairs, healthPair{Ref: runs[1].Trial, Limited: runs[0].Trial, RefBlocks: runs[1].Load.Blocks, LimitedBlocks: runs[0].Load.Blocks})
	}
	t, _ := judgeTrial(l.cfg, key, h)
	return t, h
}

// judgeTrial is a health trial's verdict from its record: the rule the
// study stops on and the analysis reports. A limited run that did not
// survive ends the judgement (a reference run that failed is not the
// limit's fault: its pair is left out, and the detail says so). From
// HealthPairs pairs on, the pairs are judged after each one (a look), each
// look's interval at lookAlpha and seeded from the run's seed, key and
// the look alone; the first look that decides is the verdict, and the
// study stops there. more says whether the study would run another pair:
// undecided, the limited runs alive, under HealthMaxPairs, not cut by the
// budget. TestHealthAAFalseVerdictRate measures the rule's false
// verdicts.
func judgeTrial(cfg Config, key string, h healthRecord) (t result.MemTrial, more bool) {
	t = result.MemTrial{LimitBytes: h.LimitBytes, Outcome: result.OK, OfferedRPS: h.OfferedRPS, BudgetCut: h.BudgetCut}
	var pairs []healthPair
	refFailed := 0
	var ratio stats.Interval
	healthy, decided, looked := false, false, false
	for _, p := range h.Pairs {
		lt, rt := p.Limited, p.Ref
		t.Seconds += max(rt.Seconds, lt.Seconds)
		t.PeakBytes = max(t.PeakBytes, lt.PeakBytes)
		t.PageCacheBytes, t.MajorFaults, t.LimitHits = lt.PageCacheBytes, t.MajorFaults+lt.MajorFaults, t.LimitHits+lt.LimitHits
		t.Errors += lt.Errors
		if t.Pairs == 0 {
			t.ResidentBefore = lt.ResidentBefore
		}
		if lt.Outcome != result.OK {
			t.Outcome, t.Detail, t.Decided = lt.Outcome, lt.Detail, true
			return t, false
		}
		t.Pairs++
		if rt.Outcome != result.OK {
			refFailed++
		} else {
			pairs = append(pairs, p)
		}
		if t.Pairs >= cfg.HealthPairs {
			healthy, decided, ratio = judgeHealth(lookBootstrap(cfg, key, t.Pairs), pairs)
			looked = true
			if decided {
				break
			}
		}
	}
	if !looked {
		healthy, decided, ratio = judgeHealth(lookBootstrap(cfg, key, t.Pairs), pairs)
	}
	if refFailed > 0 {
		t.Detail = fmt.Sprintf("%d reference runs without a memory limit failed; their pairs were left out", refFailed)
	}
	t.Healthy, t.Decided = healthy, decided
	lim, refs := pairSamples(pairs)
	t.RPS, t.P99, t.RefP99 = lim.RPS(), lim.Quantile(0.99), refs.Quantile(0.99)
	if ratio.Finite() {
		t.P99Ratio = &ratio
	}
	return t, !h.BudgetCut && t.Pairs < cfg.HealthMaxPairs && (t.Pairs < cfg.HealthPairs || !decided)
}

// lookBootstrap draws the resamples of a health trial's look at n pairs,
// at lookAlpha: seeded from the run's seed, the trial's key and n alone,
// so the study and a replay read the same interval.
func lookBootstrap(cfg Config, key string, n int) *stats.Bootstrap {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/health/%s/%d", cfg.Seed, key, n)
	b := stats.NewBootstrap(cfg.Resamples, int64(h.Sum64()))
	b.Alpha = lookAlpha
	return b
}

// pairSamples splits pairs into the limited runs and the references, in
// pair order (stats.Bootstrap.PairedRatio keeps them paired).
func pairSamples(pairs []healthPair) (lim, refs stats.Sample) {
	for _, p := range pairs {
		lim, refs = append(lim, p.LimitedBlocks), append(refs, p.RefBlocks)
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

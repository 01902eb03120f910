package lab

import (
	"fmt"
	"hash/fnv"
	"math"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// The sequential rule of the CPU study's comparisons, configured in
// stats.Sequential: when the adaptive repeats look at a comparison's
// interval and at what level (Config.looks, lookAlpha), which look the
// verdict is read at (stoppedRatio), how many runs a side would decide it
// (runsToDecide), and when the repeats give up on it (Config.futile). The
// study stops on it and the analysis reports it; TestAAFalseVerdictRate
// measures its false verdicts. The health trials' looks (judgeTrial,
// health.go) read their intervals at lookAlpha too.

// looks is when the adaptive repeats look at a comparison's interval, to
// stop it if decided, and at what level: a schedule (stats.Schedule) at
// MinRepeats, then at about ×1.5 more runs each time (3, 5, 8, 12 by
// default), and at MaxRepeats, each look at lookAlpha. Every look is a
// chance of a false verdict: in the A/A study (TestAAFalseVerdictRate,
// docs/results/lab-verdicts.md) looking after every run from 3 to 12 gave
// false verdicts in 4.8% of comparisons (95% upper bound 7.3%). The
// analysis reads a comparison at these looks only (stoppedRatio), each
// with a 97% interval, so the study and its report stop on the same
// interval, and gives up on a comparison that cannot decide by MaxRepeats
// (Config.futile): 3.3% (at most 4.2%).
func (c Config) looks() stats.Sequential {
	return stats.Schedule(c.MinRepeats, c.MaxRepeats, lookAlpha)
}

// lookAlpha is the two-sided error rate of the interval read at each look
// of the adaptive repeats (Config.looks): 97% intervals. The study stops
// at the first look that decides, so a false verdict has up to four
// chances; at 95% a look, the A/A study of the whole procedure
// (TestAAFalseVerdictRate, docs/results/lab-verdicts.md) gave 6.2% false
// verdicts, over the 5% promised, and at 97% it gives the rate there.
// report.go's verdict tables name the level too.
const lookAlpha = 0.03

// stoppedRatio is a comparison's ratio interval (runs ÷ base, in the
// order they ran) as the adaptive repeats stopped on it, and the runs a
// side it rests on: the first look (Config.looks) whose interval
// decided it, else the last look its runs reached, else (under the first
// look) all of them. Runs after that, an open loop topped up to its
// latency count or a budget that ran out between looks, inform each
// cell's own estimate but not the verdict: reading them would be a look
// the A/A study did not price, and could undo a verdict the study had
// already stopped on.
//
// Each look's resamples are seeded from the run's seed, the cell and the
// look alone, so the study deciding whether to run on and the report
// read the same interval at the same look.
func (l *analysis) stoppedRatio(k cellKey, runs, base []result.CPUCell, st stats.Stat) (stats.Interval, int) {
	m := min(len(runs), len(base))
	looks := l.cfg.looks()
	ratio := func(n int) stats.Interval {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%g/%s/%s/%d", l.cfg.Seed, k.q, k.setting, k.mode, n)
		b := stats.NewBootstrap(l.cfg.Resamples, int64(h.Sum64()))
		b.Alpha = looks.Level(float64(n), 1)
		return b.Ratio(pooled(runs[:n]), pooled(base[:n]), st)
	}
	var r stats.Interval
	n := 0
	for at := 1; at <= m; at++ {
		if !looks.IsLook(float64(at)) {
			continue
		}
		r, n = ratio(at), at
		if _, decided := stats.Verdict(r, st, st.Margin()); decided {
			return r, n
		}
	}
	if n == 0 {
		return ratio(m), m
	}
	return r, n
}

// runsToDecide projects the runs a side at which a comparison read as r
// at n runs a side would be decided: the square-root law of interval
// width against runs, with the few-runs widening (stats.Expansion) taken
// out at n and put back at each count tried. Each way to decide is
// projected on the side of the interval that stands in its way: a
// difference on the side facing 1, which must shrink under |log ratio|;
// "same" on both sides, each of which must shrink inside its bound of the
// margin. Each count's width is read at its look's level (looks). It is
// the smaller of the two counts, the smallest up to limit whose projected
// half-width fits, else more than limit (and than n); ok is false where r
// cannot be projected (an infinite or non-positive interval, or under 2
// runs a side).
func runsToDecide(r stats.Interval, n int, st stats.Stat, looks stats.Sequential, limit int) (runs int, ok bool) {
	if !r.Finite() || r.Value <= 0 || r.Low <= 0 || r.Low > r.Value || r.High < r.Value || n < 2 {
		return 0, false
	}
	never := max(limit, n) + 1
	need := func(w, target float64) int {
		if target <= 0 {
			return never
		}
		if w <= target {
			return n
		}
		raw := w / stats.Expansion(n, looks.Level(float64(n), 1))
		for m := n + 1; m <= limit; m++ {
			if raw*math.Sqrt(float64(n)/float64(m))*stats.Expansion(m, looks.Level(float64(m), 1)) <= target {
				return m
			}
		}
		return never
	}
	v := math.Log(r.Value)
	below, above := v-math.Log(r.Low), math.Log(r.High)-v
	diff := never
	switch {
	case v > 0:
		diff = need(below, v)
	case v < 0:
		diff = need(above, -v)
	}
	m := st.Margin()
	same := max(need(below, v-math.Log(1-m)), need(above, math.Log(1+m)-v))
	return min(diff, same), true
}

// futile reports whether the adaptive repeats give up on a comparison
// undecided at a look of n runs a side (its interval r): past the first
// look, when its projection (runsToDecide) needs more than MaxRepeats.
// Running it on would spend the budget on a verdict it cannot reach and
// starve the rest of the sweep (node_exporter's throughput at 250m, whose
// two settings were within 1%, took 12 runs a side and left 500m, 1000m
// and the request row uncompared). Stopping without a verdict only takes
// looks away, so it cannot add a false one. The first look is not used:
// three runs' spread is too rough a guide.
func (c Config) futile(r stats.Interval, n int, st stats.Stat) bool {
	if n <= max(c.MinRepeats, stats.MinRuns) || n >= c.MaxRepeats {
		return false
	}
	runs, ok := runsToDecide(r, n, st, c.looks(), c.MaxRepeats)
	return ok && runs > c.MaxRepeats
}

package lab

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

func (l *analysis) summarizeCPU() []result.CPUSummary {
	var keys []cellKey
	seen := map[cellKey]bool{}
	for _, c := range l.res.CPU {
		k := cellKey{c.QuotaCores, c.Setting, c.Mode}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.q != b.q {
			return a.q < b.q
		}
		if a.mode != b.mode {
			return a.mode < b.mode
		}
		return result.SettingRank(a.setting) < result.SettingRank(b.setting)
	})
	var out []result.CPUSummary
	for _, k := range keys {
		g := runsOf(l.rec.CPU, k)
		pick := func(f func(result.CPUCell) float64) result.Metric {
			xs := make([]float64, len(g))
			for i, c := range g {
				xs[i] = f(c)
			}
			s := stats.SpreadOf(xs)
			return result.Metric{Min: s.Min, Median: s.Median, Max: s.Max}
		}
		s := result.CPUSummary{QuotaCores: k.q, RequestCores: g[0].RequestCores, Setting: k.setting, SameAs: g[0].SameAs, Mode: k.mode, GOMAXPROCS: g[0].GOMAXPROCS, OfferedRPS: g[0].OfferedRPS,
			Isolated: g[0].Isolated, Repeats: len(g), Notes: []string{},
			RPS:              pick(func(c result.CPUCell) float64 { return c.RPS }),
			P99:              pick(func(c result.CPUCell) float64 { return c.P99 }),
			ThrottledSeconds: pick(func(c result.CPUCell) float64 { return c.ThrottledSeconds }),
			CPUMsPerRequest:  pick(func(c result.CPUCell) float64 { return c.CPUMsPerRequest }),
			CPUEfficiency:    pick(func(c result.CPUCell) float64 { return c.CPUEfficiency })}
		p := pooled(g)
		s.Samples = p.Count()
		rps, p99 := l.boot.CI(p, stats.StatRPS), l.boot.CI(p, stats.StatP99)
		s.RPS.Value, s.RPS.CILow, s.RPS.CIHigh = rps.Value, rps.Low, rps.High
		s.P99.Value, s.P99.CILow, s.P99.CIHigh = p99.Value, p99.Low, p99.High
		var errs, n int
		for _, c := range g {
			errs += c.Errors
			n += c.Errors + c.Requests
		}
		if n > 0 {
			s.ErrorShare = float64(errs) / float64(n)
		}
		s.Failed = anyFailed(g)
		if s.Failed {
			s.Notes = append(s.Notes, fmt.Sprintf("FAILED: %.1f%% errors (%s)", s.ErrorShare*100, errorKinds(mergeKinds(g))))
		}
		if k.mode == result.Open {
			if s.Samples < l.cfg.OpenSamples {
				s.Notes = append(s.Notes, fmt.Sprintf("p99 from %d latencies, under the %d wanted: the budget ran out first", s.Samples, l.cfg.OpenSamples))
			}
			if why := l.saturated(k); why != "" {
				s.Saturated = true
				s.Notes = append(s.Notes, "saturated: "+why+"; its p99 measures a queue, not the setting, and is kept out of the verdicts")
			}
			s.Percentiles = percentileCurve(p)
		} else {
			var periods uint64
			for _, c := range g {
				periods = min(periods, c.Periods)
				if periods == 0 {
					periods = c.Periods
				}
			}
			if periods > 0 && periods < minPeriods {
				s.Notes = append(s.Notes, fmt.Sprintf("closed-loop windows of %d CFS periods, under %d", periods, minPeriods))
			}
			if e := s.CPUEfficiency.Median; e > 0 && e < 0.9 {
				s.Notes = append(s.Notes, fmt.Sprintf("not CPU-bound: the closed loop used %.0f%% of the quota, so its throughput is limited by something else (the load generator, other load on the machine, the target's own waits), not by the quota", e*100))
			}
		}
		if k.setting != result.SetGoDefault {
			baseKey := cellKey{k.q, result.SetGoDefault, k.mode}
			base := runsOf(l.rec.CPU, baseKey)
			if len(base) > 0 && !s.Failed && !anyFailed(base) {
				st := headline(k.mode)
				r, looked := l.stoppedRatio(k, g, base, st)
				v, d := stats.Verdict(r, st, st.Margin())
				if k.mode == result.Open && (s.Saturated || l.saturated(baseKey) != "") {
					// Overload is not a verdict: one side's p99 is its queue.
					v, d = result.Saturated, true
					if !s.Saturated {
						s.Notes = append(s.Notes, "no verdict: go-default is saturated at this rate ("+l.saturated(baseKey)+")")
					}
				}
				s.Verdict, s.Decided, s.VerdictRuns = &v, d, looked
				if r.Finite() {
					s.VerdictRatio = &r
				}
				if !d {
					s.StoppedEarly = l.cfg.futile(r, looked, st)
					s.Notes = append(s.Notes, l.undecidedNote(k, &s, r, looked))
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// saturated says why the open-loop runs of k measure a queue rather than
// the setting, or "" when they do not: the setting served under 95% of the
// rate offered, or the rate is at or above 95% of the setting's own
// closed-loop capacity at the same row (the equal load is a share of the
// lower capacity of gofit and go-default, so another setting much slower
// than both can be offered more than it serves).
func (l *analysis) saturated(k cellKey) string {
	runs := runsOf(l.rec.CPU, k)
	if k.mode != result.Open || len(runs) == 0 {
		return ""
	}
	offered := runs[0].OfferedRPS
	if offered <= 0 {
		return ""
	}
	if served := pooled(runs).RPS(); served < 0.95*offered {
		return fmt.Sprintf("served %.0f of %.0f rps offered", served, offered)
	}
	capacity := pooled(runsOf(l.rec.CPU, cellKey{k.q, k.setting, result.Closed})).RPS()
	if capacity > 0 && offered >= 0.95*capacity {
		return fmt.Sprintf("offered %.0f rps, %.0f%% of its own closed-loop capacity (%.0f rps)", offered, 100*offered/capacity, capacity)
	}
	return ""
}

// mostRunsProjected is the most runs a side an undecided comparison's
// note projects; past it, the note says the difference is below what the
// machine's noise lets the lab resolve.
const mostRunsProjected = 100

// undecidedNote says what an undecided comparison could not see: the
// smallest ratio its interval would have shown, and the runs a side (and
// the budget) that would decide it (runsToDecide), and whether the
// repeats gave up on it (s.StoppedEarly). n is the runs a side the
// interval rests on (stoppedRatio).
func (l *analysis) undecidedNote(k cellKey, s *result.CPUSummary, r stats.Interval, n int) string {
	if !r.Finite() || r.Value <= 0 || r.Low <= 0 {
		need := stats.MinRuns - n
		extra := time.Duration(max(need, 0)) * (designOf(l.cfg, l.rec).runCost(l.rec.CPU, k) + designOf(l.cfg, l.rec).runCost(l.rec.CPU, cellKey{k.q, result.SetGoDefault, k.mode}))
		s.RunsToDecide = stats.MinRuns
		return fmt.Sprintf("undecided: %d runs a side, under the %d a verdict needs (about %v more of the CPU study, --budget %v, would fund them)",
			n, stats.MinRuns, extra.Round(time.Second), budgetWithMore(l.cfg.Budget, extra))
	}
	w := math.Max(math.Log(r.High/r.Value), math.Log(r.Value/r.Low))
	detect := math.Exp(w)
	s.DetectableRatio = &detect
	st := headline(k.mode)
	msg := fmt.Sprintf("undecided: a difference under ×%.2f would not show here", detect)
	runs, ok := runsToDecide(r, n, st, l.cfg.looks(), mostRunsProjected)
	switch {
	case !ok || runs <= n:
	case runs <= mostRunsProjected:
		s.RunsToDecide = runs
		extra := time.Duration(runs-n) * (designOf(l.cfg, l.rec).runCost(l.rec.CPU, k) + designOf(l.cfg, l.rec).runCost(l.rec.CPU, cellKey{k.q, result.SetGoDefault, k.mode}))
		flags := fmt.Sprintf("--budget %v", budgetWithMore(l.cfg.Budget, extra))
		if runs > l.cfg.MaxRepeats {
			flags += fmt.Sprintf(" --max-repeats %d", runs)
		}
		msg += fmt.Sprintf("; about %d runs a side (%v more of the CPU study, %s) would decide it", runs, extra.Round(time.Second), flags)
	default:
		msg += fmt.Sprintf("; over %d runs a side would be needed to decide it: any difference is below what this machine's noise lets the lab resolve", mostRunsProjected)
	}
	if s.StoppedEarly {
		msg += fmt.Sprintf("; the repeats gave up on it at its look at %d runs a side, since more than --max-repeats %d would be needed, and gave the time to the rest of the study", n, l.cfg.MaxRepeats)
	}
	return msg
}

// budgetWithMore is the --budget whose CPU share has extra more than
// budget's, rounded up to a minute.
func budgetWithMore(budget, extra time.Duration) time.Duration {
	b := budget + time.Duration(float64(extra)/cpuShare)
	return (b + time.Minute - 1).Truncate(time.Minute)
}

func mergeKinds(cs []result.CPUCell) map[string]int {
	m := map[string]int{}
	for _, c := range cs {
		for k, v := range c.ErrorKinds {
			m[k] += v
		}
	}
	return m
}

func percentileCurve(s stats.Sample) []result.PctPoint {
	all := s.Latencies()
	if len(all) == 0 {
		return nil
	}
	var out []result.PctPoint
	for _, p := range result.PercentileLevels {
		// A percentile beyond 1/n of the samples would be the maximum
		// again: stop where the data stops.
		if (100-p)/100*float64(len(all)) < 1 && p > 99 {
			break
		}
		out = append(out, result.PctPoint{Percentile: p, Ms: stats.Quantile32(all, p/100)})
	}
	return out
}

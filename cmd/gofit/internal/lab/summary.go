package lab

import (
	"fmt"
	"sort"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

func (l *study) summarizeCPU() []CPUSummary {
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
		return settingRank(a.setting) < settingRank(b.setting)
	})
	var out []CPUSummary
	for _, k := range keys {
		g := l.runsOf(k)
		pick := func(f func(CPUCell) float64) Metric {
			xs := make([]float64, len(g))
			for i, c := range g {
				xs[i] = f(c)
			}
			s := summarize(xs)
			return Metric{Min: s.Min, Median: s.Median, Max: s.Max}
		}
		s := CPUSummary{QuotaCores: k.q, RequestCores: g[0].RequestCores, Setting: k.setting, SameAs: g[0].SameAs, Mode: k.mode, GOMAXPROCS: g[0].GOMAXPROCS, OfferedRPS: g[0].OfferedRPS,
			Isolated: g[0].Isolated, Repeats: len(g), Notes: []string{},
			RPS:              pick(func(c CPUCell) float64 { return c.RPS }),
			P99:              pick(func(c CPUCell) float64 { return c.P99 }),
			ThrottledSeconds: pick(func(c CPUCell) float64 { return c.ThrottledSeconds }),
			CPUMsPerRequest:  pick(func(c CPUCell) float64 { return c.CPUMsPerRequest }),
			CPUEfficiency:    pick(func(c CPUCell) float64 { return c.CPUEfficiency })}
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
		if k.mode == Open {
			if s.Samples < l.cfg.OpenSamples {
				s.Notes = append(s.Notes, fmt.Sprintf("p99 from %d latencies, under the %d wanted: the budget ran out first", s.Samples, l.cfg.OpenSamples))
			}
			if s.OfferedRPS > 0 && s.RPS.Value < 0.95*s.OfferedRPS {
				s.Notes = append(s.Notes, fmt.Sprintf("saturated: served %.0f of %.0f rps offered", s.RPS.Value, s.OfferedRPS))
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
		if k.setting != SetGoDefault {
			base := l.runsOf(cellKey{k.q, SetGoDefault, k.mode})
			if len(base) > 0 && !s.Failed && !anyFailed(base) {
				st := headline(k.mode)
				r := l.boot.Ratio(p, pooled(base), st)
				v, d := stats.Verdict(r, st, st.Margin())
				s.Verdict, s.Decided = &v, d
				if r.Finite() {
					s.VerdictRatio = &r
				}
				if !d {
					s.Notes = append(s.Notes, "undecided: the interval is too wide to tell from go-default")
				}
			}
		}
		out = append(out, s)
	}
	return out
}

func mergeKinds(cs []CPUCell) map[string]int {
	m := map[string]int{}
	for _, c := range cs {
		for k, v := range c.ErrorKinds {
			m[k] += v
		}
	}
	return m
}

func settingRank(s string) int {
	switch s {
	case SetGoDefault:
		return 0
	case SetGofit:
		return 1
	case SetProcs1:
		return 2
	}
	return 3
}

// pctLevels are the HDR-style percentiles of the latency plot.
var pctLevels = []float64{50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99}

func percentileCurve(s stats.Sample) []PctPoint {
	all := s.Latencies()
	if len(all) == 0 {
		return nil
	}
	var out []PctPoint
	for _, p := range pctLevels {
		// A percentile beyond 1/n of the samples would be the maximum
		// again: stop where the data stops.
		if (100-p)/100*float64(len(all)) < 1 && p > 99 {
			break
		}
		out = append(out, PctPoint{p, stats.Quantile32(all, p/100)})
	}
	return out
}

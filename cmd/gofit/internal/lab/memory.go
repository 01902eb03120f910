package lab

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"

	"github.com/gofit-dev/gofit/fit"
)

// memRecord is one memory setting's trials as they ran: the survival
// search's, then the healthy search's health trials with their pairs.
// Floors, survival curves and verdicts are not recorded: the analysis
// computes them (memResults), replaying the searches over these trials.
type memRecord struct {
	Setting  string            `json:"setting"`
	Survival []result.MemTrial `json:"survival_trials"`
	Health   []healthRecord    `json:"health_trials"`
}

// survivalSearch is the survival search for a target whose unlimited peak
// is peak. No search climbs past 4 × the peak. A setting that needs more
// (GOGC=off with GOMEMLIMIT at the limit keeps everything a trial
// allocates) has no floor that is a property of the service, only where
// one run's trial stopped allocating, which does not repeat
// (docs/results/memory.md#what-set-the-labs-floor-search). "Above 4 × the
// peak" repeats, and the climb's trials go to the settings compared.
func survivalSearch(cfg Config, peak int64) floorSearch {
	return floorSearch{Lo: peak / 2, Hi: peak * 3 / 2, Max: peak * 4, Resolution: cfg.Resolution, Need: cfg.ConfirmNeed, Of: cfg.ConfirmOf, Span: cfg.ConfirmSpan, MaxTrials: survivalTrialsMax(cfg)}
}

// healthySearch is the healthy search above a survival floor. Healthy is
// at or above surviving: it searches up from the floor, below which no
// trial can be healthy. Above 1.25 × the peak memory is no constraint,
// so the search starts there and a failure there is confirmed before it
// climbs. Near its edge a service is healthy in some runs and stalls in
// others: one healthy trial there is a coin that came up heads
// (docs/results/memory.md#what-set-the-labs-floor-search). The floor is
// a limit healthy twice; a failure that would send the search up needs a
// second look as well.
func healthySearch(cfg Config, peak, floor int64) floorSearch {
	hs := survivalSearch(cfg, peak)
	hs.Lo, hs.Min, hs.Hi = floor, floor, max(floor, peak*5/4)
	hs.Max = max(hs.Hi, peak*2)
	hs.Resolution, hs.Need, hs.Of, hs.Span, hs.FailConfirm, hs.MaxTrials = cfg.HealthResolution, 2, 2, 1, 2, 16
	hs.Pass = func(t result.MemTrial) bool { return t.Healthy }
	return hs
}

// healthKey names a setting's i-th health trial: its intervals' seed.
func healthKey(setting string, i int) string { return fmt.Sprintf("%s/%d", setting, i) }

// memResults are the memory settings' results from their records: each
// survival search replayed over its trials (the floor, the survival
// curve), each health trial judged from its pairs (judgeTrial), and the
// healthy search replayed over those verdicts. The study asks the same
// functions of its records so far, so a change to either rule replays:
// where old records no longer follow the rule, the search is cut there,
// and a warning says so.
func memResults(cfg Config, rec *Records) (out []result.MemResult, warnings []string) {
	peak := int64(rec.Target.PeakBytes)
	for _, m := range rec.Memory {
		sr, _, _, diverged := survivalSearch(cfg, peak).replay(m.Survival)
		r := result.MemResult{Setting: m.Setting, Trials: m.Survival, HealthyTrials: []result.MemTrial{}, Survival: survivalCurve(m.Survival), BudgetLimited: sr.BudgetLimited, SearchedToBytes: sr.Max}
		if r.Trials == nil {
			r.Trials = []result.MemTrial{}
		}
		if diverged {
			warnings = append(warnings, fmt.Sprintf("memory %s: the survival trials leave today's search after %d of %d: its floor is where they still agreed", m.Setting, len(sr.Trials), len(m.Survival)))
		}
		r.SurvivalFinding = findingOf(sr, nil)
		r.HealthyFinding = result.Finding{Status: result.NotMeasured}
		if sr.Floor > 0 {
			r.FloorBytes = &sr.Floor
			for i, h := range m.Health {
				t, _ := judgeTrial(cfg, healthKey(m.Setting, i), h)
				r.HealthyTrials = append(r.HealthyTrials, t)
			}
			hs := healthySearch(cfg, peak, sr.Floor)
			hr, _, _, diverged := hs.replay(r.HealthyTrials)
			if hr.Floor > 0 {
				r.HealthyFloorBytes = &hr.Floor
			}
			r.HealthyFinding = findingOf(hr, hs.Pass)
			r.HealthyBudgetLimited = hr.BudgetLimited
			if diverged {
				warnings = append(warnings, fmt.Sprintf("memory %s: the health trials leave today's healthy search after %d of %d: its healthy floor is where they still agreed", m.Setting, len(hr.Trials), len(m.Health)))
			}
		}
		out = append(out, r)
	}
	// A setting the study never started (the budget ran out first, a
	// note says so; or the study stopped) is in the results too: not
	// measured, rather than missing from a run that looks complete.
	for _, setting := range cfg.MemSettings {
		if !slices.ContainsFunc(rec.Memory, func(m memRecord) bool { return m.Setting == setting }) {
			out = append(out, result.MemResult{Setting: setting, Trials: []result.MemTrial{}, HealthyTrials: []result.MemTrial{}, Survival: []result.Survival{},
				SurvivalFinding: result.Finding{Status: result.NotMeasured}, HealthyFinding: result.Finding{Status: result.NotMeasured}})
		}
	}
	return out, warnings
}

// findingOf is what a search's floor rests on: its trials (pass judges
// one; nil: it survived), whether it ran to its end, and the highest
// limit under the floor that failed (with no floor, the highest tried).
func findingOf(r searchResult, pass func(result.MemTrial) bool) result.Finding {
	if pass == nil {
		pass = func(t result.MemTrial) bool { return t.Outcome == result.OK }
	}
	f := result.Finding{Trials: len(r.Trials), BudgetCut: r.BudgetLimited}
	passed := map[int64]bool{}
	for _, t := range r.Trials {
		passed[t.LimitBytes] = passed[t.LimitBytes] || pass(t)
	}
	for _, t := range r.Trials {
		if !passed[t.LimitBytes] && (r.Floor == 0 || t.LimitBytes < r.Floor) {
			f.FailedBytes = max(f.FailedBytes, t.LimitBytes)
		}
	}
	switch {
	case len(r.Trials) == 0:
		f.Status = result.NotMeasured
	case r.Floor == 0:
		f.Status = result.FloorAbove
	case r.BudgetLimited:
		f.Status = result.FloorBounded
	default:
		f.Status = result.FloorFound
	}
	return f
}

// compared says whether a memory setting is one the study exists to
// compare (gofit, no knob, the automemlimit peer): they get the budget
// first.
func compared(setting string) bool {
	return setting == result.SetGofit || setting == result.SetNone || setting == result.SetAutoMemLimit
}

// memShare is the first of settings' share of left: the compared
// settings split it among themselves, and any other setting counts as
// one more only while compared settings remain after it.
func memShare(left time.Duration, settings []string) time.Duration {
	n := 0
	for i, s := range settings {
		if compared(s) || i == 0 {
			n++
		}
	}
	return max(left/time.Duration(max(n, 1)), 0)
}

func (l *study) memoryStudy(ctx context.Context) error {
	// Memory trials run under the CPU limit the CPU study recommends: a
	// slower collector under a small quota needs more headroom, and that
	// is the pair a pod would get.
	cpu := summarized(l.cfg, &l.rec).recommendCPU(&result.Recommendation{}).cores
	l.rec.Target.ProbeCPU = cpu
	l.plan.mem.sayOverrun()
	if err := l.runProbes(ctx, cpu); err != nil {
		return err
	}
	peak := int64(l.rec.Target.PeakBytes)
	survival := l.plan.mem.survivalLoad(l.rec.Target.ProbeRPS)
	var noKnobFloor int64
	var searched time.Duration // the searches so far, to foresee the next
	for i, setting := range l.cfg.MemSettings {
		// gofit, no knob and the automemlimit peer are the comparison the
		// study exists for: each starts while one trial (and the check
		// trial) still fits. Any other setting starts only if a search as
		// long as the ones before it (plus the check trial) still fits. A
		// setting that does not start is "not measured" in the results.
		if i > 0 {
			next := searched/time.Duration(i) + l.plan.mem.checkReserve()
			if compared(setting) {
				next = l.plan.costs.memTrialCost() + l.plan.mem.checkReserve()
			}
			if l.now().Sub(l.started)+next > l.cfg.Budget {
				l.plan.notes.add("the budget (%v) ran out before the memory study of %s", l.cfg.Budget, strings.Join(l.cfg.MemSettings[i:], ", "))
				break
			}
		}
		began := l.now()
		// This setting's share of what is left of the budget, the check
		// trial's time kept back: half for surviving, half for the health
		// trials (fewer, but each is pairs of runs). The compared settings
		// split it among themselves; any other setting gets what they
		// leave (with equal shares, GOGC=off's climb once cut gofit's
		// healthy search after one trial).
		share := memShare(l.cfg.Budget-l.now().Sub(l.started)-l.plan.mem.checkReserve(), l.cfg.MemSettings[i:])
		l.rec.Memory = append(l.rec.Memory, memRecord{Setting: setting, Survival: []result.MemTrial{}, Health: []healthRecord{}})
		m := &l.rec.Memory[len(l.rec.Memory)-1]
		ss := survivalSearch(l.cfg, peak)
		ss.Deadline, ss.Now, ss.Cost = began.Add(share/2), l.now, l.plan.costs.memTrialCost()
		if i == 0 {
			// The memory study's minimum, kept back from the start
			// (memBudget.reserve): however late the CPU study left it, the first
			// setting's floor rests on limited trials.
			ss.MinTrials = memMinSurvival
		}
		sr, err := ss.Find(ctx, func(ctx context.Context, limit int64) result.MemTrial {
			t := l.memTrial(ctx, trial.MemSpec{Env: memEnv(l.cfg, &l.rec, setting, limit), CPU: cpu, Limit: limit, Load: survival}).Trial
			if ctx.Err() == nil {
				m.Survival = append(m.Survival, t)
			}
			l.progress("memory %-13s %-26s at %-8s %s", "survival", setting, fit.FormatBytes(limit), t.Verdict())
			return t
		})
		if sr.BudgetLimited {
			l.plan.notes.add("the budget cut the survival search of %s short: its floor is the lowest limit that passed so far", setting)
		}
		if err == nil && sr.Floor > 0 {
			hs := healthySearch(l.cfg, peak, sr.Floor)
			hs.Deadline, hs.Now, hs.Cost = began.Add(share), l.now, l.plan.costs.pairCost()
			ref := memEnv(l.cfg, &l.rec, setting, 0)
			hr, herr := hs.Find(ctx, func(ctx context.Context, limit int64) result.MemTrial {
				t, h := l.healthTrial(ctx, healthKey(setting, len(m.Health)), ref, memEnv(l.cfg, &l.rec, setting, limit), cpu, limit)
				if ctx.Err() == nil {
					m.Health = append(m.Health, h)
				}
				l.progress("memory %-13s %-26s at %-8s %s", "healthy", setting, fit.FormatBytes(limit), t.Verdict())
				return t
			})
			err = herr
			if hr.BudgetLimited {
				l.plan.notes.add("the budget cut the healthy search of %s short: its healthy floor is the lowest limit judged healthy so far", setting)
			}
		}
		if err != nil {
			return err
		}
		if setting == result.SetNone {
			noKnobFloor = sr.Floor
		}
		searched += l.now().Sub(began)
	}
	if noKnobFloor == 0 {
		return nil
	}
	measured := make([]string, 0, len(l.rec.Memory))
	for _, m := range l.rec.Memory {
		measured = append(measured, m.Setting)
	}
	// The table at multiples of the floor is the first thing to give up
	// when time is short: the floors and the check trial matter more.
	// Checked per cell, keeping the check trial's time back.
	// A cell costs what a survival trial did.
	var cellSum float64
	cells := 0
	for _, m := range l.rec.Memory {
		for _, t := range m.Survival {
			cellSum, cells = cellSum+t.Seconds, cells+1
		}
	}
	cell := time.Duration(cellSum / float64(max(cells, 1)) * float64(time.Second))
table:
	for _, mult := range l.cfg.Multiples {
		for _, setting := range measured {
			if l.now().Sub(l.started)+cell+l.plan.mem.checkReserve() > l.cfg.Budget {
				l.plan.notes.add("the budget (%v) ran out during the throughput table, at %gx the floor", l.cfg.Budget, mult)
				break table
			}
			limit := int64(math.Ceil(float64(noKnobFloor)*mult/float64(l.cfg.Resolution))) * l.cfg.Resolution
			run := l.memTrial(ctx, trial.MemSpec{Env: memEnv(l.cfg, &l.rec, setting, limit), CPU: cpu, Limit: limit, Load: survival})
			if err := ctx.Err(); err != nil {
				return err
			}
			r := run.Load
			l.rec.Throughput = append(l.rec.Throughput, result.ThroughputCell{Setting: setting, Multiple: mult, LimitBytes: limit, Outcome: run.Trial.Outcome, RPS: r.RPS, P50: r.P50, P99: r.P99})
			l.progress("throughput %-26s at %gx floor (%s): %.0f rps", setting, mult, fit.FormatBytes(limit), r.RPS)
		}
	}
	return nil
}

// memTrial runs one memory trial (a probe, a survival trial, a
// throughput cell) and tells the planner what it cost.
func (l *study) memTrial(ctx context.Context, s trial.MemSpec) trial.MemRun {
	t0 := l.now()
	run := l.run.Memory(ctx, s)[0]
	l.plan.costs.ranMemory(l.now().Sub(t0))
	l.plan.mem.sayOverrun()
	return run
}

// runProbes runs the unlimited probes under cpu: the peak (the searches'
// bracket), the capacity the health trials' fixed rate is a share of, and
// the non-Go memory gofit's setting declares.
func (l *study) runProbes(ctx context.Context, cpu float64) error {
	// Their median, not one probe: one that met a quiet moment would set
	// the rate high.
	var rpss, p99s, peaks, secs []float64
	var nonGo []trial.NonGoProbe
	for i := 0; i < l.cfg.Probes; i++ {
		run := l.memTrial(ctx, trial.MemSpec{Env: probeEnv(memEnv(l.cfg, &l.rec, result.SetNone, 0)), CPU: cpu, Load: trial.MemLoad{Requests: l.cfg.MemRequests, MaxDur: l.plan.mem.probeCap(), MeasureNonGo: true}})
		if err := ctx.Err(); err != nil {
			return err
		}
		probe, r := run.Trial, run.Load
		if run.NonGo.Measurement != nil || run.NonGo.Err != nil {
			nonGo = append(nonGo, run.NonGo)
		}
		l.progress("memory probe %d at %s CPU, no memory limit: peak %s, %.0f rps, p99 %.1fms", i+1, result.CPULabel(cpu), fit.FormatBytes(int64(probe.PeakBytes)), r.RPS, r.P99)
		if probe.Outcome != result.OK {
			return fmt.Errorf("%w: even without a memory limit: %s %s", errTargetFailed, probe.Outcome, probe.Detail)
		}
		rpss, p99s, peaks, secs = append(rpss, r.RPS), append(p99s, r.P99), append(peaks, float64(probe.PeakBytes)), append(secs, probe.Seconds)
	}
	chooseNonGo(&l.rec.Target, nonGo, l.cfg.Progress)
	l.rec.Target.PeakBytes = uint64(stats.SpreadOf(peaks).Max)
	l.rec.Target.ProbeRPS, l.rec.Target.ProbeP99 = stats.SpreadOf(rpss).Median, stats.SpreadOf(p99s).Median
	l.rec.Target.HealthRPS = math.Max(1, math.Round(l.cfg.HealthShare*l.rec.Target.ProbeRPS))
	l.plan.mem.planSurvival(l.rec.Target.ProbeRPS, stats.SpreadOf(secs).Median)
	return nil
}

// checkRecommendation runs the recommended CPU and memory limits and
// environment together, as the pod would get them, judged healthy as the
// health trials are: against the same environment without a memory limit.
func (l *study) checkRecommendation(ctx context.Context) error {
	res := analyse(l.cfg, l.rec)
	rec := &res.Recommendation
	if rec.CPULimitCores == 0 || rec.MemoryLimitBytes == 0 || l.run == nil {
		return nil
	}
	env := baseEnv(l.cfg)
	for k, v := range rec.Env {
		env[k] = v
	}
	ref := make(map[string]string, len(env))
	for k, v := range env {
		ref[k] = v
	}
	delete(ref, "GOMEMLIMIT")
	t, h := l.healthTrial(ctx, checkKey, ref, env, rec.CPULimitCores, rec.MemoryLimitBytes)
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.BudgetCut {
		l.plan.notes.add("the budget cut the check trial to %d pairs: its verdict rests on them", t.Pairs)
	}
	l.rec.Check = &h
	l.progress("check: %s CPU + %s memory together: %s", result.CPULabel(rec.CPULimitCores), mebi(rec.MemoryLimitBytes), t.Verdict())
	return nil
}

package lab

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/fit"
)

// memLoad is a memory trial's load: a closed loop of requests (the
// survival trials: as much load as the target takes), or an open loop at
// rate for window (the health trials: the same load at every limit).
type memLoad struct {
	requests int
	maxDur   time.Duration // closed loop: stop here even short of requests (0: no bound)
	rate     float64
	window   time.Duration
	// measureNonGo: an unlimited probe measures the target's non-Go
	// memory from outside (nongo.go) before it stops.
	measureNonGo bool
}

// memTrial starts the target cold under a memory limit (and the memory
// study's CPU limit) and drives load; it fails on an OOM kill, on errors,
// or on a stall.
func (l *study) memTrial(ctx context.Context, env map[string]string, cpu float64, limit int64, ml memLoad) (result.MemTrial, load.Result) {
	return l.memDrive(ctx, l.memStart(ctx, l.cfg.Target, env, cpu, limit), ml)
}

// memStarted is a memory trial's target, started and not yet loaded.
type memStarted struct {
	tr    *sandbox.Trial // nil when the start failed (t says why)
	t     result.MemTrial
	began time.Time
}

// memStart starts tgt cold (its binary's page cache evicted) under the
// limits.
func (l *study) memStart(ctx context.Context, tgt sandbox.Target, env map[string]string, cpu float64, limit int64) *memStarted {
	l.sb.Repin()
	m := &memStarted{t: result.MemTrial{LimitBytes: limit}, began: time.Now()}
	wait := l.startWait(tgt, limit)
	tgt.ReadyTimeout = wait
	tr, err := l.sb.Start(ctx, tgt, sandbox.TrialConfig{CPU: cpu, Memory: limit, Env: env})
	if err != nil {
		m.t.Outcome, m.t.Detail = result.Errored, err.Error()
		if se, ok := err.(*sandbox.StartError); ok {
			m.t.Outcome = se.Outcome
			if se.TimedOut && limit > 0 && l.slowestStart > 0 {
				m.t.Outcome = result.Stalled
				m.t.Detail = fmt.Sprintf("not ready within %v (its slowest start without a limit took %v): %s", wait, l.slowestStart.Round(10*time.Millisecond), se.Detail)
			}
		}
		return m
	}
	if limit == 0 {
		l.slowestStart = max(l.slowestStart, tr.Ready)
	}
	m.tr = tr
	m.t.ResidentBefore = tr.Resident
	return m
}

// startSlowdown is how many times longer than its slowest start without
// a memory limit a target may take to become ready under one: a start
// that slow is thrashing. On cdac879 caddy and node_exporter spent 12 to
// 30 s of each survival trial at half their peak waiting for readiness
// that did not come, a tenth of a four-minute study.
const startSlowdown = 4

// minStartWait is the least a start under a memory limit is given.
const minStartWait = 5 * time.Second

// startWait is how long tgt may take to become ready at limit: the
// target's own readiness timeout without a limit or before any start
// without one was timed; under a limit, startSlowdown × the slowest start
// without one (at least minStartWait), if that is shorter.
func (l *study) startWait(tgt sandbox.Target, limit int64) time.Duration {
	wait := tgt.ReadyTimeout
	if wait <= 0 {
		wait = sandbox.DefaultReadyTimeout
	}
	if limit == 0 || l.slowestStart == 0 {
		return wait
	}
	return min(wait, max(startSlowdown*l.slowestStart, minStartWait))
}

// memDrive drives load at a started target, stops it and judges the run.
func (l *study) memDrive(ctx context.Context, m *memStarted, ml memLoad) (result.MemTrial, load.Result) {
	t, tr := m.t, m.tr
	if tr == nil {
		t.Seconds = time.Since(m.began).Seconds()
		return t, load.Result{}
	}
	defer tr.Stop()
	probe := func() (uint64, uint64) {
		m, _ := tr.MemoryStats()
		return m.MajorFaults, m.MaxHits
	}
	var began time.Time
	if ml.measureNonGo {
		began = l.startNonGo(tr)
	}
	var r load.Result
	if ml.rate > 0 {
		ld := load.NewLoader(load.MaxOpenInFlight, probe)
		ld.MinRate = l.rec.Target.ProbeRPS * stallShare
		defer ld.Close()
		r = ld.Open(ctx, l.mix(tr), ml.rate, ml.window)
	} else {
		ld := load.NewLoader(memConcurrency, probe)
		ld.MinRate = l.rec.Target.ProbeRPS * stallShare
		defer ld.Close()
		r = ld.Closed(ctx, l.mix(tr), ml.requests, ml.maxDur, memConcurrency)
	}
	exited := tr.Exited()
	if ml.measureNonGo && !exited {
		m, err := l.measureNonGo(ctx, tr, began)
		l.probesNonGo = append(l.probesNonGo, probeNonGo{m, err})
	}
	tr.Stop()
	s, _ := tr.Stats()
	t.RPS, t.P99, t.Errors = r.RPS, r.P99, r.Errors
	t.PeakBytes, t.PageCacheBytes, t.MajorFaults, t.LimitHits = s.Memory.Peak, s.Memory.File, s.Memory.MajorFaults, s.Memory.MaxHits
	t.Seconds = time.Since(m.began).Seconds()
	switch {
	case s.Memory.OOMKills > 0:
		t.Outcome, t.Detail = result.OOMKilled, fmt.Sprintf("%d OOM kills", s.Memory.OOMKills)
	case r.Stalled:
		t.Outcome, t.Detail = result.Stalled, fmt.Sprintf("under %.0f rps (%.0f%% of the unlimited rate) for %v while major faults reached %d", l.rec.Target.ProbeRPS*stallShare, stallShare*100, load.StallWindow, s.Memory.MajorFaults)
	case exited:
		t.Outcome, t.Detail = result.Errored, "the target exited during the load: "+tr.Output()
	case float64(r.Errors) > maxErrorShare*float64(r.Errors+r.Requests) || r.Requests == 0:
		t.Outcome, t.Detail = result.Errored, fmt.Sprintf("%d errors in %d requests (%s)", r.Errors, r.Errors+r.Requests, r.ErrorSummary())
	default:
		t.Outcome = result.OK
	}
	return t, r
}

// memPair runs the reference (env ref, no memory limit) and the limited
// target (env at limit) side by side: both started cold, the limited one
// first, then loaded at once, so every second of the window meets the
// same machine in both. The reference runs from its own copy of the
// binary (Config.RefTarget), so neither is charged for page cache the
// other faulted in.
func (l *study) memPair(ctx context.Context, ref, env map[string]string, cpu float64, limit int64, ml memLoad) (refT result.MemTrial, refR load.Result, limT result.MemTrial, limR load.Result) {
	lm := l.memStart(ctx, l.cfg.Target, env, cpu, limit)
	rt := l.cfg.RefTarget
	if rt.Path == "" {
		rt = l.cfg.Target
	}
	rm := l.memStart(ctx, rt, ref, cpu, 0)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		refT, refR = l.memDrive(ctx, rm, ml)
	}()
	limT, limR = l.memDrive(ctx, lm, ml)
	wg.Wait()
	return refT, refR, limT, limR
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

// survivalLoad is the survival trials' load.
func (l *study) survivalLoad() memLoad {
	return memLoad{requests: l.plan.mem.requests, maxDur: l.plan.mem.maxTrial}
}

func (l *study) memoryStudy(ctx context.Context) error {
	// Memory trials run under the CPU limit the CPU study recommends: a
	// slower collector under a small quota needs more headroom, and that
	// is the pair a pod would get.
	cpu := summarized(l.cfg, &l.rec).recommendCPU(&result.Recommendation{}).cores
	l.rec.Target.ProbeCPU = cpu
	if err := l.runProbes(ctx, cpu); err != nil {
		return err
	}
	peak := int64(l.rec.Target.PeakBytes)
	// No search climbs past 4 × the unlimited peak. A setting that needs
	// more (GOGC=off with GOMEMLIMIT at the limit keeps everything a
	// trial allocates) has no floor that is a property of the service,
	// only where one run's trial stopped allocating, which does not
	// repeat (docs/results/memory.md#what-set-the-labs-floor-search).
	// "Above 4 × the peak" repeats, and the climb's trials go to the
	// settings compared.
	search := floorSearch{Lo: peak / 2, Hi: peak * 3 / 2, Max: peak * 4, Resolution: l.cfg.Resolution, Need: l.cfg.ConfirmNeed, Of: l.cfg.ConfirmOf, Span: l.cfg.ConfirmSpan, MaxTrials: l.plan.survivalTrialsMax(), Now: l.now}
	var noKnobFloor int64
	var searched time.Duration // the searches so far, to foresee the next
	for i, setting := range l.cfg.MemSettings {
		// gofit, no knob and the automemlimit peer are the comparison the
		// study exists for: each starts while any budget is left. Any other
		// setting starts only if a search as long as the ones before it
		// (plus the check trial) still fits.
		if i > 0 {
			next := searched/time.Duration(i) + l.plan.checkReserve()
			if compared(setting) {
				next = 0
			}
			if l.now().Sub(l.started)+next > l.cfg.Budget {
				l.plan.note("the budget (%v) ran out before the memory study of %s", l.cfg.Budget, strings.Join(l.cfg.MemSettings[i:], ", "))
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
		share := memShare(l.cfg.Budget-l.now().Sub(l.started)-l.plan.checkReserve(), l.cfg.MemSettings[i:])
		ss := search
		ss.Deadline = began.Add(share / 2)
		sr, err := ss.Find(ctx, func(ctx context.Context, limit int64) result.MemTrial {
			t, _ := l.memRun(ctx, l.memEnv(setting, limit), cpu, limit, l.survivalLoad())
			l.progress("memory %-13s %-26s at %-8s %s", "survival", setting, fit.FormatBytes(limit), t.Verdict())
			return t
		})
		m := result.MemResult{Setting: setting, Trials: sr.Trials, HealthyTrials: []result.MemTrial{}, Survival: survivalCurve(sr.Trials), BudgetLimited: sr.BudgetLimited, SearchedToBytes: sr.Max}
		if sr.BudgetLimited {
			l.plan.note("the budget cut the survival search of %s short: its floor is the lowest limit that passed so far", setting)
		}
		if sr.Floor > 0 {
			m.FloorBytes = &sr.Floor
		}
		if err == nil && sr.Floor > 0 {
			// Healthy is at or above surviving: search up from the floor,
			// below which no trial can be healthy. Above 1.25 × the peak
			// memory is no constraint, so the search starts there and a
			// failure there is confirmed before it climbs.
			hs := search
			hs.Lo, hs.Min, hs.Hi = sr.Floor, sr.Floor, max(sr.Floor, peak*5/4)
			hs.Max = max(hs.Hi, peak*2)
			// Near its edge a service is healthy in some runs and stalls
			// in others: one healthy trial there is a coin that came up
			// heads (docs/results/memory.md#what-set-the-labs-floor-search).
			// The floor is a limit healthy twice; a failure that would
			// send the search up needs a second look as well.
			hs.Resolution, hs.Need, hs.Of, hs.Span, hs.FailConfirm, hs.MaxTrials = l.cfg.HealthResolution, 2, 2, 1, 2, 16
			hs.Pass = func(t result.MemTrial) bool { return t.Healthy }
			hs.Deadline = began.Add(share)
			ref := l.memEnv(setting, 0)
			hr, herr := hs.Find(ctx, func(ctx context.Context, limit int64) result.MemTrial {
				t := l.healthTrial(ctx, ref, l.memEnv(setting, limit), cpu, limit)
				l.progress("memory %-13s %-26s at %-8s %s", "healthy", setting, fit.FormatBytes(limit), t.Verdict())
				return t
			})
			err = herr
			m.HealthyTrials = hr.Trials
			if hr.Floor > 0 {
				m.HealthyFloorBytes = &hr.Floor
			}
			if hr.BudgetLimited {
				m.HealthyBudgetLimited = true
				l.plan.note("the budget cut the healthy search of %s short: its healthy floor is the lowest limit judged healthy so far", setting)
			}
		}
		l.rec.Memory = append(l.rec.Memory, m)
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
		for _, t := range m.Trials {
			cellSum, cells = cellSum+t.Seconds, cells+1
		}
	}
	cell := time.Duration(cellSum / float64(max(cells, 1)) * float64(time.Second))
table:
	for _, mult := range l.cfg.Multiples {
		for _, setting := range measured {
			if l.now().Sub(l.started)+cell+l.plan.checkReserve() > l.cfg.Budget {
				l.plan.note("the budget (%v) ran out during the throughput table, at %gx the floor", l.cfg.Budget, mult)
				break table
			}
			limit := int64(math.Ceil(float64(noKnobFloor)*mult/float64(l.cfg.Resolution))) * l.cfg.Resolution
			t, r := l.memRun(ctx, l.memEnv(setting, limit), cpu, limit, l.survivalLoad())
			if err := ctx.Err(); err != nil {
				return err
			}
			l.rec.Throughput = append(l.rec.Throughput, result.ThroughputCell{Setting: setting, Multiple: mult, LimitBytes: limit, Outcome: t.Outcome, RPS: r.RPS, P50: r.P50, P99: r.P99})
			l.progress("throughput %-26s at %gx floor (%s): %.0f rps", setting, mult, fit.FormatBytes(limit), r.RPS)
		}
	}
	return nil
}

// runProbes runs the unlimited probes under cpu: the peak (the searches'
// bracket), the capacity the health trials' fixed rate is a share of, and
// the non-Go memory gofit's setting declares.
func (l *study) runProbes(ctx context.Context, cpu float64) error {
	// Their median, not one probe: one that met a quiet moment would set
	// the rate high.
	var rpss, p99s, peaks, secs []float64
	l.probesNonGo = nil
	for i := 0; i < l.cfg.Probes; i++ {
		probe, r := l.memRun(ctx, probeEnv(l.memEnv(result.SetNone, 0)), cpu, 0, memLoad{requests: l.cfg.MemRequests, maxDur: l.plan.probeCap(), measureNonGo: true})
		if err := ctx.Err(); err != nil {
			return err
		}
		l.progress("memory probe %d at %s CPU, no memory limit: peak %s, %.0f rps, p99 %.1fms", i+1, result.CPULabel(cpu), fit.FormatBytes(int64(probe.PeakBytes)), r.RPS, r.P99)
		if probe.Outcome != result.OK {
			return fmt.Errorf("%w: even without a memory limit: %s %s", errTargetFailed, probe.Outcome, probe.Detail)
		}
		rpss, p99s, peaks, secs = append(rpss, r.RPS), append(p99s, r.P99), append(peaks, float64(probe.PeakBytes)), append(secs, probe.Seconds)
	}
	l.chooseNonGo(l.probesNonGo)
	l.rec.Target.PeakBytes = uint64(stats.SpreadOf(peaks).Max)
	l.rec.Target.ProbeRPS, l.rec.Target.ProbeP99 = stats.SpreadOf(rpss).Median, stats.SpreadOf(p99s).Median
	l.rec.Target.HealthRPS = math.Max(1, math.Round(l.cfg.HealthShare*l.rec.Target.ProbeRPS))
	l.plan.planMemory(l.rec.Target.ProbeRPS, stats.SpreadOf(secs).Median)
	return nil
}

// checkRecommendation runs the recommended CPU and memory limits and
// environment together, as the pod would get them, judged healthy as the
// health trials are: against the same environment without a memory limit.
func (l *study) checkRecommendation(ctx context.Context) error {
	res := analyse(l.cfg, l.rec)
	rec := &res.Recommendation
	if rec.CPULimitCores == 0 || rec.MemoryLimitBytes == 0 || l.sb == nil {
		return nil
	}
	env := l.baseEnv()
	for k, v := range rec.Env {
		env[k] = v
	}
	ref := make(map[string]string, len(env))
	for k, v := range env {
		ref[k] = v
	}
	delete(ref, "GOMEMLIMIT")
	t := l.healthTrial(ctx, ref, env, rec.CPULimitCores, rec.MemoryLimitBytes)
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.BudgetCut {
		l.plan.note("the budget cut the check trial to %d pairs: its verdict rests on them", t.Pairs)
	}
	l.rec.Check = &result.CheckTrial{MemTrial: t, ProbeRPS: l.rec.Target.ProbeRPS, ProbeP99: l.rec.Target.ProbeP99}
	l.progress("check: %s CPU + %s memory together: %s", result.CPULabel(rec.CPULimitCores), mebi(rec.MemoryLimitBytes), t.Verdict())
	return nil
}

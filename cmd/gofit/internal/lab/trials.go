package lab

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/target"
)

// planEnv is what `gofit run` would hand the target under these limits.
// It is the lab's one call into the policy.
func (l *Lab) planEnv(cores float64, mem int64) (map[string]string, fit.Plan) {
	in := fit.Input{
		Limits: cgroup.Limits{
			CPU:    cgroup.CPULimits{Quota: cores, LeafQuota: cores, QuotaGroup: "(trial)"},
			Memory: cgroup.MemoryLimits{Max: mem, MaxGroup: "(trial)"},
		},
		CPUs: l.ncpu,
		Vars: l.baseEnv(),
	}
	if b, err := target.Read(l.cfg.Target.Path); err == nil {
		b.Describe(&in)
	}
	p := fit.Policy{}.Plan(in)
	env := p.Export
	// The marker only tells a target that imports gofit's library which
	// values are gofit's; under the lab's fixed limits that library would
	// choose the same values, so the marker changes nothing the target does.
	// Leaving it out lets identical environments be recognised as one
	// (same_as) and keeps it out of the recommended YAML.
	delete(env, fit.MarkerVar)
	for k, v := range l.baseEnv() {
		env[k] = v
	}
	return env, p
}

// cpuEnv is a CPU setting's environment and the GOMAXPROCS it implies.
func (l *Lab) cpuEnv(setting string, cores float64) (map[string]string, int, string) {
	env := l.baseEnv()
	genv, plan := l.planEnv(cores, 0)
	switch setting {
	case SetProcs1:
		env["GOMAXPROCS"] = "1"
		return env, 1, "env GOMAXPROCS=1"
	case SetProcsNCPU:
		env["GOMAXPROCS"] = strconv.Itoa(l.ncpu)
		return env, l.ncpu, "env GOMAXPROCS=" + strconv.Itoa(l.ncpu)
	case SetGofit:
		if v, ok := genv["GOMAXPROCS"]; ok {
			return genv, plan.GOMAXPROCS, "gofit run: env GOMAXPROCS=" + v
		}
		return genv, plan.GOMAXPROCS, "gofit run: left to the Go runtime, which agrees"
	}
	from := "Go runtime default"
	if plan.RuntimeFollowsCgroup {
		from += " (container-aware, Go >= 1.25)"
	} else {
		from += " (CPU count)"
	}
	return env, plan.RuntimeGOMAXPROCS, from
}

// memEnv is a memory setting's environment at a limit.
func (l *Lab) memEnv(setting string, limit int64) map[string]string {
	switch setting {
	case SetGofit:
		env, _ := l.planEnv(l.res.Target.ProbeCPU, limit)
		return env
	case SetLimitGCOff:
		env := l.baseEnv()
		env["GOMEMLIMIT"] = strconv.FormatInt(limit, 10)
		env["GOGC"] = "off"
		return env
	case SetAutoMemLimit:
		env := l.baseEnv()
		if limit > 0 {
			env["GOMEMLIMIT"] = strconv.FormatInt(int64(float64(limit)*automemlimitRatio), 10)
		}
		return env
	}
	return l.baseEnv()
}

// sandboxMeasure runs one CPU window: start the target under the quota,
// warm it up (excluded from everything), then measure with the cgroup's
// CPU counters read right before and right after the load, so the CPU
// window is the load window.
func (l *Lab) sandboxMeasure(ctx context.Context, c cpuConfig, mode string, offered float64, window time.Duration, rep int) (CPUCell, error) {
	l.sb.Repin()
	tr, err := l.sb.Start(ctx, l.cfg.Target, TrialConfig{CPU: c.quota, Env: c.env, Warm: true})
	if err != nil {
		return CPUCell{}, err
	}
	defer tr.Stop()
	inFlight := l.cfg.Concurrency
	if mode == "open" {
		inFlight = load.MaxOpenInFlight
	}
	ld := load.NewLoader(inFlight, nil)
	defer ld.Close()
	// Warm up connections, caches and the heap's size at this load.
	if mode == "open" {
		ld.Open(ctx, l.mix(tr), offered, l.cfg.Warmup)
	} else {
		ld.Closed(ctx, l.mix(tr), 0, l.cfg.Warmup, l.cfg.Concurrency)
	}
	procs := c.procs
	if v, err := tr.Vars(); err == nil && v.GOMAXPROCS > 0 {
		procs = v.GOMAXPROCS // what the target really runs with
	}
	v0, verr0 := tr.Vars()
	pc0 := tr.CPUOn()
	s0, _ := tr.Stats()
	t0 := time.Now()
	var r load.Result
	if mode == "open" {
		r = ld.Open(ctx, l.mix(tr), offered, window)
	} else {
		r = ld.Closed(ctx, l.mix(tr), l.cfg.Requests, window, l.cfg.Concurrency)
	}
	s1, _ := tr.Stats()
	cpuWin := time.Since(t0)
	pc1 := tr.CPUOn()
	v1, verr1 := tr.Vars()
	if ctx.Err() != nil {
		return CPUCell{}, ctx.Err()
	}
	cell := CPUCell{QuotaCores: c.quota, Setting: c.setting, SameAs: c.sameAs, Repeat: rep, GOMAXPROCS: procs, GOMAXPROCSFrom: c.from, Mode: mode,
		Isolated: l.place != nil && l.place.Isolated, RPS: r.RPS, P50: r.P50, P90: r.P90, P99: r.P99, P999: r.P999,
		Requests: r.Requests, Errors: r.Errors, Cancelled: r.Cancelled, ErrorKinds: r.ErrorKinds, Seconds: r.Seconds, GeneratorCPUSec: r.GenCPUSec,
		TargetExited: tr.Exited(), blocks: r.Blocks, Targets: r.Targets}
	if mode == "open" {
		cell.OfferedRPS = offered
	}
	cell.Periods = s1.CPU.Periods - s0.CPU.Periods
	cell.ThrottledPeriods = s1.CPU.ThrottledPeriods - s0.CPU.ThrottledPeriods
	cell.ThrottledSeconds = (s1.CPU.ThrottledTime - s0.CPU.ThrottledTime).Seconds()
	used := (s1.CPU.Usage - s0.CPU.Usage).Seconds()
	cell.CPUSeconds, cell.CPUWindowSeconds = used, cpuWin.Seconds()
	if r.Requests > 0 {
		cell.CPUMsPerRequest = used * 1000 / float64(r.Requests)
	}
	cell.CPUEfficiency = efficiency(used, cpuWin.Seconds(), c.quota)
	if verr0 == nil && verr1 == nil {
		cell.GCCPUShare = gcShare(*v0, *v1)
	}
	if l.place != nil && len(l.place.Generator) > 0 {
		cell.OverlapShare = overlapShare(pc0, pc1, l.place.Generator)
	}
	return cell, nil
}

// efficiency is the share of the quota the cgroup used over the window.
func efficiency(used, window, quota float64) float64 {
	if window <= 0 || quota <= 0 {
		return 0
	}
	return used / (window * quota)
}

// gcShare is the GC's share of the time the target's Ps were busy. The
// runtime counts its CPU classes as GOMAXPROCS × wall time, idle Ps
// included, so a share of that total shrinks as GOMAXPROCS grows at the
// same work; without the idle time, every setting is measured alike.
func gcShare(a, b RuntimeVars) *float64 {
	busy := (b.TotalCPUSeconds - a.TotalCPUSeconds) - (b.IdleCPUSeconds - a.IdleCPUSeconds)
	gc := b.GCCPUSeconds - a.GCCPUSeconds
	if busy <= 0 || gc < 0 || b.IdleCPUSeconds == 0 {
		return nil // a target without the idle class (not the sample) cannot say
	}
	s := gc / busy
	return &s
}

// overlapShare is the share of the target's CPU time (between two
// cpuacct.usage_percpu reads) spent on the generator's CPUs.
func overlapShare(a, b []uint64, gen []int) *float64 {
	if len(a) == 0 || len(a) != len(b) {
		return nil
	}
	var on, all uint64
	for i := range a {
		d := b[i] - a[i]
		all += d
		for _, g := range gen {
			if g == i {
				on += d
			}
		}
	}
	if all == 0 {
		return nil
	}
	s := float64(on) / float64(all)
	return &s
}

// memTrial starts the target cold under a memory limit (and the memory
// study's CPU limit) and drives a fixed load; it fails on an OOM kill, on
// errors, or on a stall.
func (l *Lab) memTrial(ctx context.Context, env map[string]string, cpu float64, limit int64, requests int, maxDur time.Duration) (MemTrial, load.Result) {
	l.sb.Repin()
	start := time.Now()
	t := MemTrial{LimitBytes: limit}
	tr, err := l.sb.Start(ctx, l.cfg.Target, TrialConfig{CPU: cpu, Memory: limit, Env: env})
	if err != nil {
		t.Outcome, t.Detail = Errored, err.Error()
		if se, ok := err.(*StartError); ok {
			t.Outcome = se.Outcome
		}
		t.Seconds = time.Since(start).Seconds()
		return t, load.Result{}
	}
	defer tr.Stop()
	t.ResidentBefore = tr.Resident
	probe := func() (uint64, uint64) {
		m, _ := tr.g.MemoryStats()
		return m.MajorFaults, m.MaxHits
	}
	ld := load.NewLoader(memConcurrency, probe)
	ld.MinRate = l.res.Target.ProbeRPS * stallShare
	defer ld.Close()
	r := ld.Closed(ctx, l.mix(tr), requests, maxDur, memConcurrency)
	exited := tr.Exited()
	tr.Stop()
	s, _ := tr.Stats()
	t.RPS, t.P99, t.Errors = r.RPS, r.P99, r.Errors
	t.PeakBytes, t.PageCacheBytes, t.MajorFaults, t.LimitHits = s.Memory.Peak, s.Memory.File, s.Memory.MajorFaults, s.Memory.MaxHits
	t.Seconds = time.Since(start).Seconds()
	l.memTrialSeconds.sum += t.Seconds
	l.memTrialSeconds.n++
	switch {
	case s.Memory.OOMKills > 0:
		t.Outcome, t.Detail = OOMKilled, fmt.Sprintf("%d OOM kills", s.Memory.OOMKills)
	case r.Stalled:
		t.Outcome, t.Detail = Stalled, fmt.Sprintf("under %.0f rps (%.0f%% of the unlimited rate) for %v while major faults reached %d", ld.MinRate, stallShare*100, ld.Stall, s.Memory.MajorFaults)
	case exited:
		t.Outcome, t.Detail = Errored, "the target exited during the load: "+tr.Output()
	case float64(r.Errors) > maxErrorShare*float64(r.Errors+r.Requests) || r.Requests == 0:
		t.Outcome, t.Detail = Errored, fmt.Sprintf("%d errors in %d requests (%s)", r.Errors, r.Errors+r.Requests, r.ErrorSummary())
	default:
		t.Outcome = OK
	}
	return t, r
}

// healthy says whether a trial kept the unlimited probe's service: at
// least 90% of its throughput with p99 at most twice its p99.
func (l *Lab) healthy(t MemTrial) bool {
	return t.Outcome == OK && t.RPS >= healthyRPSShare*l.res.Target.ProbeRPS && t.P99 <= healthyP99Factor*l.res.Target.ProbeP99
}

const (
	healthyRPSShare  = 0.9
	healthyP99Factor = 2.0
)

func (l *Lab) memoryStudy(ctx context.Context) error {
	// Memory trials run under the CPU limit the CPU study recommends: a
	// slower collector under a small quota needs more headroom, and that
	// is the pair a pod would get.
	l.res.CPUSummary = l.summarizeCPU()
	cpu := l.recommendCPU(&Recommendation{}).cores
	l.res.Target.ProbeCPU = cpu
	// The healthy reference is the median of a few unlimited probes: one
	// probe that met a quiet moment would make every later trial look
	// unhealthy.
	var rpss, p99s, peaks, secs []float64
	for i := 0; i < max(l.cfg.Probes, 1); i++ {
		probe, r := l.memTrial(ctx, l.memEnv(SetNone, 0), cpu, 0, l.cfg.MemRequests, l.probeCap())
		if err := ctx.Err(); err != nil {
			return err
		}
		l.progress("memory probe %d at %s CPU, no memory limit: peak %s, %.0f rps, p99 %.1fms", i+1, cpuLabel(cpu), fit.FormatBytes(int64(probe.PeakBytes)), r.RPS, r.P99)
		if probe.Outcome != OK {
			return fmt.Errorf("%w: even without a memory limit: %s %s", ErrTargetFailed, probe.Outcome, probe.Detail)
		}
		rpss, p99s, peaks, secs = append(rpss, r.RPS), append(p99s, r.P99), append(peaks, float64(probe.PeakBytes)), append(secs, probe.Seconds)
	}
	l.res.Target.PeakBytes = uint64(Summarize(peaks).Max)
	l.res.Target.ProbeRPS, l.res.Target.ProbeP99 = Summarize(rpss).Median, Summarize(p99s).Median
	l.mem = l.planMemory(l.res.Target.ProbeRPS, Summarize(secs).Median)
	peak := int64(l.res.Target.PeakBytes)
	search := FloorSearch{Lo: peak / 4, Hi: peak * 3 / 2, Max: peak * 8, Resolution: l.cfg.Resolution, Need: l.cfg.ConfirmNeed, Of: l.cfg.ConfirmOf, MaxTrials: 16}
	var noKnobFloor int64
	var searched time.Duration // the searches so far, to foresee the next
	for i, setting := range l.cfg.MemSettings {
		// gofit, no knob and the automemlimit peer are the comparison the
		// study exists for: each starts while any budget is left. Any other
		// setting starts only if a search as long as the ones before it
		// (plus the check trial) still fits.
		if i > 0 {
			next := searched/time.Duration(i) + l.checkReserve()
			if setting == SetGofit || setting == SetNone || setting == SetAutoMemLimit {
				next = 0
			}
			if l.now().Sub(l.started)+next > l.cfg.Budget {
				l.budgetNote("the budget (%v) ran out before the memory study of %s", l.cfg.Budget, strings.Join(l.cfg.MemSettings[i:], ", "))
				break
			}
		}
		began := l.now()
		// Each setting's searches get an equal share of the time left.
		search.Allow = l.allowTrial(setting, began.Add(l.mem.end.Sub(began)/time.Duration(len(l.cfg.MemSettings)-i)))
		run := func(label string) func(ctx context.Context, limit int64) MemTrial {
			return func(ctx context.Context, limit int64) MemTrial {
				t, _ := l.memTrial(ctx, l.memEnv(setting, limit), cpu, limit, l.mem.requests, l.mem.maxTrial)
				t.Healthy = l.healthy(t)
				l.progress("memory %-13s %-26s at %-8s %s", label, setting, fit.FormatBytes(limit), t.verdict())
				return t
			}
		}
		floor, trials, err := search.Find(ctx, run("survival"))
		m := MemResult{Setting: setting, Trials: trials, HealthyTrials: []MemTrial{}, Survival: SurvivalCurve(trials)}
		if floor > 0 {
			m.FloorBytes = &floor
		}
		if err == nil && floor > 0 {
			// Healthy is at or above surviving: search up from the floor.
			hs := search
			hs.Lo, hs.Hi, hs.Pass = floor, max(floor, peak*3/2), func(t MemTrial) bool { return t.Healthy }
			var hf int64
			hf, m.HealthyTrials, err = hs.Find(ctx, run("healthy"))
			if m.HealthyTrials == nil {
				m.HealthyTrials = []MemTrial{} // [] in results.json, as when no search ran
			}
			if hf == 0 && err == nil && len(m.HealthyTrials) == 0 {
				// The budget left no trial for the healthy search: the
				// lowest limit the survival search found healthy bounds
				// the healthy floor from above.
				hf = lowestHealthy(trials)
				if hf > 0 {
					l.budgetNote("no time for the healthy search of %s: its healthy floor is the lowest limit the survival search found healthy, %s, an upper bound", setting, fit.FormatBytes(hf))
				}
			}
			if hf > 0 {
				m.HealthyFloorBytes = &hf
			}
		}
		l.res.Memory = append(l.res.Memory, m)
		if err != nil {
			return err
		}
		if setting == SetNone {
			noKnobFloor = floor
		}
		searched += l.now().Sub(began)
	}
	if noKnobFloor == 0 {
		return nil
	}
	measured := make([]string, 0, len(l.res.Memory))
	for _, m := range l.res.Memory {
		measured = append(measured, m.Setting)
	}
	// The table at multiples of the floor is the first thing to give up
	// when time is short: the floors and the check trial matter more.
	// Checked per cell, keeping the check trial's time back.
table:
	for _, mult := range l.cfg.Multiples {
		for _, setting := range measured {
			if l.now().Sub(l.started)+2*l.checkReserve() > l.cfg.Budget {
				l.budgetNote("the budget (%v) ran out during the throughput table, at %gx the floor", l.cfg.Budget, mult)
				break table
			}
			limit := int64(math.Ceil(float64(noKnobFloor)*mult/float64(l.cfg.Resolution))) * l.cfg.Resolution
			t, r := l.memTrial(ctx, l.memEnv(setting, limit), cpu, limit, l.mem.requests, l.mem.maxTrial)
			if err := ctx.Err(); err != nil {
				return err
			}
			l.res.Throughput = append(l.res.Throughput, ThroughputCell{Setting: setting, Multiple: mult, LimitBytes: limit, Outcome: t.Outcome, RPS: r.RPS, P50: r.P50, P99: r.P99})
			l.progress("throughput %-26s at %gx floor (%s): %.0f rps", setting, mult, fit.FormatBytes(limit), r.RPS)
		}
	}
	return nil
}

// checkRecommendation runs the recommended CPU and memory limits and
// environment together once, as the pod would get them.
func (l *Lab) checkRecommendation(ctx context.Context) error {
	rec := &l.res.Recommendation
	if rec.CPULimitCores == 0 || rec.MemoryLimitBytes == 0 || l.sb == nil {
		return nil
	}
	env := l.baseEnv()
	for k, v := range rec.Env {
		env[k] = v
	}
	t, r := l.memTrial(ctx, env, rec.CPULimitCores, rec.MemoryLimitBytes, l.mem.requests, l.mem.maxTrial)
	if err := ctx.Err(); err != nil {
		return err
	}
	t.Healthy = l.healthy(t)
	rec.Check = &CheckTrial{MemTrial: t, P50: r.P50, ProbeRPS: l.res.Target.ProbeRPS, ProbeP99: l.res.Target.ProbeP99}
	l.progress("check: %s CPU + %s memory together: %s, %.0f rps, p99 %.1fms", cpuLabel(rec.CPULimitCores), mebi(rec.MemoryLimitBytes), t.verdict(), r.RPS, r.P99)
	l.res.Lab.Trials = l.done
	l.res.Lab.Failed = l.failure()
	return nil
}

func cpuLabel(c float64) string {
	if c == 0 {
		return "no"
	}
	return millicores(c)
}

// lowestHealthy is the lowest limit of a healthy trial, or 0.
func lowestHealthy(trials []MemTrial) int64 {
	var low int64
	for _, t := range trials {
		if t.Healthy && (low == 0 || t.LimitBytes < low) {
			low = t.LimitBytes
		}
	}
	return low
}

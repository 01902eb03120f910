// Package local is the lab's runner on this machine: the study's trials
// in the lab's sandbox (lab/sandbox), a cgroup per trial, the target by
// path or from an OCI image's root (--image), the load from this process
// on the generator's CPUs.
package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
)

// runner runs trials in the lab's sandbox on this machine: a cgroup per
// trial, the target's processes inside it, the load from this process on
// the generator's CPUs.
type runner struct {
	cfg      trial.Study
	sb       *sandbox.Sandbox
	place    *result.Placement
	progress io.Writer
	// slowestStart is the longest a memory trial's target took to become
	// ready without a memory limit (the probes, the health references);
	// mu guards it: a runner may be shared by goroutines.
	mu           sync.Mutex
	slowestStart time.Duration

	// info is what the study is designed by (Open read it).
	info trial.Info
}

// Info says one trial at a time, on the sandbox's CPUs.
func (r *runner) Info() trial.Info { return r.info }

// Where names this machine.
func (r *runner) Where() trial.Where {
	host, _ := os.Hostname()
	return trial.Where{Runner: "sandbox on " + host}
}

// mix is the request mix for a window on tr: every window starts the
// same seeded order, so --seed replays a run's requests.
func (r *runner) mix(tr *sandbox.Trial) *load.Mix { return load.NewMix(tr.Targets, r.cfg.Seed) }

// cpu starts the target under the quota, warms it up (excluded from
// everything), then measures with the cgroup's CPU counters read right
// before and right after the load, so the CPU window is the load window.
func (r *runner) CPU(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	r.sb.Repin()
	tr, err := r.sb.Start(ctx, r.cfg.Target, sandbox.TrialConfig{CPU: c.Quota, CPUReq: c.Request, Env: c.Env, Warm: true})
	if err != nil {
		return result.CPUCell{}, err
	}
	defer tr.Stop()
	inFlight := r.cfg.Concurrency
	if mode == result.Open {
		inFlight = load.MaxOpenInFlight
	}
	ld := load.NewLoader(inFlight, nil)
	defer ld.Close()
	// Warm up connections, caches and the heap's size at this load.
	if mode == result.Open {
		ld.Open(ctx, r.mix(tr), offered, r.cfg.Warmup)
	} else {
		ld.Closed(ctx, r.mix(tr), 0, r.cfg.Warmup, r.cfg.Concurrency)
	}
	procs := c.Procs
	if v, err := tr.Vars(); err == nil && v.GOMAXPROCS > 0 {
		procs = v.GOMAXPROCS // what the target really runs with
	}
	v0, verr0 := tr.Vars()
	pc0 := tr.CPUOn()
	s0, _ := tr.Stats()
	t0 := time.Now()
	var res load.Result
	if mode == result.Open {
		res = ld.Open(ctx, r.mix(tr), offered, window)
	} else {
		res = ld.Closed(ctx, r.mix(tr), r.cfg.Requests, window, r.cfg.Concurrency)
	}
	s1, _ := tr.Stats()
	cpuWin := time.Since(t0)
	pc1 := tr.CPUOn()
	v1, verr1 := tr.Vars()
	if ctx.Err() != nil {
		return result.CPUCell{}, ctx.Err()
	}
	w := trial.Window{Load: res, Periods: s1.CPU.Periods - s0.CPU.Periods, ThrottledPeriods: s1.CPU.ThrottledPeriods - s0.CPU.ThrottledPeriods,
		ThrottledSec: (s1.CPU.ThrottledTime - s0.CPU.ThrottledTime).Seconds(), UsedSec: (s1.CPU.Usage - s0.CPU.Usage).Seconds(), WindowSec: cpuWin.Seconds(),
		Exited: tr.Exited(), Isolated: r.place != nil && r.place.Isolated}
	if verr0 == nil && verr1 == nil {
		w.V0, w.V1 = v0, v1
	}
	cell := trial.Cell(c, mode, offered, rep, procs, w)
	if r.place != nil && len(r.place.Generator) > 0 {
		cell.OverlapShare = overlapShare(pc0, pc1, r.place.Generator)
	}
	return cell, nil
}

// Memory starts each trial's target cold (its binary's page cache
// evicted) under its limits, in order, then drives their loads at once;
// each fails on an OOM kill, on errors, or on a stall.
func (r *runner) Memory(ctx context.Context, specs ...trial.MemSpec) []trial.MemRun {
	started := make([]*memStarted, len(specs))
	for i, s := range specs {
		tgt := r.cfg.Target
		if s.Reference && r.cfg.RefTarget.Path != "" {
			tgt = r.cfg.RefTarget
		}
		started[i] = r.memStart(ctx, tgt, s.Env, s.CPU, s.Limit)
	}
	out := make([]trial.MemRun, len(specs))
	var wg sync.WaitGroup
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = r.memDrive(ctx, started[i], specs[i].Load)
		}()
	}
	wg.Wait()
	return out
}

// memStarted is a memory trial's target, started and not yet loaded.
type memStarted struct {
	tr    *sandbox.Trial // nil when the start failed (t says why)
	t     result.MemTrial
	began time.Time
}

// memStart starts tgt cold under the limits.
func (r *runner) memStart(ctx context.Context, tgt sandbox.Target, env map[string]string, cpu float64, limit int64) *memStarted {
	r.sb.Repin()
	m := &memStarted{t: result.MemTrial{LimitBytes: limit}, began: time.Now()}
	r.mu.Lock()
	slowest := r.slowestStart
	r.mu.Unlock()
	wait := trial.StartWait(tgt, limit, slowest)
	tgt.ReadyTimeout = wait
	tr, err := r.sb.Start(ctx, tgt, sandbox.TrialConfig{CPU: cpu, Memory: limit, Env: env})
	if err != nil {
		m.t.Outcome, m.t.Detail = result.Errored, err.Error()
		if se, ok := err.(*sandbox.StartError); ok {
			m.t.Outcome = se.Outcome
			if se.TimedOut && limit > 0 && slowest > 0 {
				m.t.Outcome = result.Stalled
				m.t.Detail = fmt.Sprintf("not ready within %v (its slowest start without a limit took %v): %s", wait, slowest.Round(10*time.Millisecond), se.Detail)
			}
		}
		return m
	}
	if limit == 0 {
		r.mu.Lock()
		r.slowestStart = max(r.slowestStart, tr.Ready)
		r.mu.Unlock()
	}
	m.tr = tr
	m.t.ResidentBefore = tr.Resident
	return m
}

// memDrive drives load at a started target, stops it and judges the run.
func (r *runner) memDrive(ctx context.Context, m *memStarted, ml trial.MemLoad) trial.MemRun {
	t, tr := m.t, m.tr
	if tr == nil {
		t.Seconds = time.Since(m.began).Seconds()
		return trial.MemRun{Trial: t}
	}
	defer tr.Stop()
	probe := func() (uint64, uint64) {
		m, _ := tr.MemoryStats()
		return m.MajorFaults, m.MaxHits
	}
	var began time.Time
	if ml.MeasureNonGo {
		began = r.startNonGo(tr)
	}
	var res load.Result
	if ml.Rate > 0 {
		ld := load.NewLoader(load.MaxOpenInFlight, probe)
		ld.MinRate = ml.ProbeRPS * trial.StallShare
		defer ld.Close()
		res = ld.Open(ctx, r.mix(tr), ml.Rate, ml.Window)
	} else {
		ld := load.NewLoader(trial.MemConcurrency, probe)
		ld.MinRate = ml.ProbeRPS * trial.StallShare
		defer ld.Close()
		res = ld.Closed(ctx, r.mix(tr), ml.Requests, ml.MaxDur, trial.MemConcurrency)
	}
	exited := tr.Exited()
	var ng trial.NonGoProbe
	if ml.MeasureNonGo && !exited {
		ng.Measurement, ng.Err = measureNonGo(ctx, tr, began)
	}
	tr.Stop()
	s, _ := tr.Stats()
	t.RPS, t.P99, t.Errors = res.RPS, res.P99, res.Errors
	t.PeakBytes, t.PageCacheBytes, t.MajorFaults, t.LimitHits = s.Memory.Peak, s.Memory.File, s.Memory.MajorFaults, s.Memory.MaxHits
	t.Seconds = time.Since(m.began).Seconds()
	switch {
	case s.Memory.OOMKills > 0:
		t.Outcome, t.Detail = result.OOMKilled, fmt.Sprintf("%d OOM kills", s.Memory.OOMKills)
	case res.Stalled:
		t.Outcome, t.Detail = result.Stalled, fmt.Sprintf("under %.0f rps (%.0f%% of the unlimited rate) for %v while major faults reached %d", ml.ProbeRPS*trial.StallShare, trial.StallShare*100, load.StallWindow, s.Memory.MajorFaults)
	case exited:
		t.Outcome, t.Detail = result.Errored, "the target exited during the load: "+tr.Output()
	case float64(res.Errors) > trial.MaxErrorShare*float64(res.Errors+res.Requests) || res.Requests == 0:
		t.Outcome, t.Detail = result.Errored, fmt.Sprintf("%d errors in %d requests (%s)", res.Errors, res.Errors+res.Requests, res.ErrorSummary())
	default:
		t.Outcome = result.OK
	}
	return trial.MemRun{Trial: t, Load: res, NonGo: ng}
}

// startNonGo clears the target's referenced bits before the probe's load,
// so the file pages referenced after it are the hot ones. It returns when
// it cleared them, or the zero time when it could not.
func (r *runner) startNonGo(tr *sandbox.Trial) time.Time {
	if err := nongo.ClearRefs("/", tr.Pid); err != nil {
		if r.progress != nil {
			// As the lab says its other non-Go lines (not a trial: progress counts trials).
			fmt.Fprintf(r.progress, "lab: non-Go memory: %v: hot file pages will be an upper bound\n", err)
		}
		return time.Time{}
	}
	return time.Now()
}

// measureNonGo measures the target after a probe's load, before it stops.
func measureNonGo(ctx context.Context, tr *sandbox.Trial, began time.Time) (*nongo.Measurement, error) {
	ev, err := nongo.ReadProcess("/", tr.Pid)
	if err != nil {
		return nil, err
	}
	ev.ClearedRefs = !began.IsZero()
	g := nongo.ParseGCTrace(tr.Output())
	ev.GCTrace = &g
	if ms, err := tr.MemoryStats(); err == nil {
		ev.KernelBytes = int64(min(ms.Kernel, 1<<60))
	}
	if tr.VarsURL != "" {
		if rt, err := nongo.FetchRuntime(ctx, tr.VarsURL); err == nil {
			ev.Runtime = &rt
		}
	}
	m, err := nongo.Estimate(ev)
	if err != nil {
		return nil, err
	}
	return &m, nil
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

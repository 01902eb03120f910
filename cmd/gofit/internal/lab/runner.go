package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
)

// A runner runs the lab's trials: it starts the target under a trial's
// limits and environment, drives the trial's load at it, measures, and
// stops it. The study decides what to run and the analysis what it
// means; the runner only runs it. Two run the lab today, each saying
// where its trials ran: the sandbox on this machine (sandboxRunner; the
// target by path or from an OCI image, --image) and the pod runner
// (podRunner, --kube: the target's image in pods on a cluster's nodes).
// Tests use fakes.
type runner interface {
	// cpu runs one CPU window of c in mode: the target started warm
	// under c's limits, warmed up, then measured at offered requests a
	// second (open loop) for window, or in a closed loop.
	cpu(ctx context.Context, c cpuConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error)
	// memory runs memory trials side by side: each started cold, in
	// order, then all loaded at once, so every second of the load meets
	// the same machine in each. One trial (survival, probe, throughput),
	// or a health pair: the limited run and its reference.
	memory(ctx context.Context, specs ...memSpec) []memRun
	// where says where the trials run, for the records.
	where() string
}

// A parallelRunner runs up to parallel() trials at once without their
// sharing CPUs (the pod runner: one per trial node), so the study sends
// a round's CPU runs out in batches of that many.
type parallelRunner interface{ parallel() int }

// parallelism is how many trials r runs at once: 1 unless it says more.
func parallelism(r runner) int {
	if p, ok := r.(parallelRunner); ok {
		return max(p.parallel(), 1)
	}
	return 1
}

// A startCoster says what a trial's start costs before any trial ran
// (the pod runner: its load pod's start), so that the budget planner
// prices the memory study's reserve from the start.
type startCoster interface{ startCost() time.Duration }

// startCostOf is r's own measure of a trial's start, or 0.
func startCostOf(r runner) time.Duration {
	if s, ok := r.(startCoster); ok {
		return s.startCost()
	}
	return 0
}

// memSpec is one memory trial: the limits and environment its target
// starts under, and its load.
type memSpec struct {
	env   map[string]string
	cpu   float64
	limit int64 // bytes; 0: no memory limit
	load  memLoad
	// reference: a health pair's reference, run from its own copy of the
	// binary (Config.RefTarget) where the runner has one, so neither run
	// is charged for page cache the other faulted in.
	reference bool
}

// memRun is what a memory trial measured.
type memRun struct {
	trial result.MemTrial
	load  load.Result
	// nonGo is what a probe (memLoad.measureNonGo) measured of the
	// target's non-Go memory, or why nothing.
	nonGo probeNonGo
}

// memLoad is a memory trial's load: a closed loop of requests (the
// survival trials: as much load as the target takes), or an open loop at
// rate for window (the health trials: the same load at every limit).
type memLoad struct {
	requests int
	maxDur   time.Duration // closed loop: stop here even short of requests (0: no bound)
	rate     float64
	window   time.Duration
	// probeRPS is the unlimited probes' rate: a trial under stallShare
	// of it for load.StallWindow stalls (0: no stall detection).
	probeRPS float64
	// measureNonGo: an unlimited probe measures the target's non-Go
	// memory from outside (nongo.go) before it stops.
	measureNonGo bool
}

// sandboxRunner runs trials in the lab's sandbox on this machine: a
// cgroup per trial, the target's processes inside it, the load from this
// process on the generator's CPUs.
type sandboxRunner struct {
	cfg      Config
	sb       *sandbox.Sandbox
	place    *result.Placement
	progress io.Writer
	// slowestStart is the longest a memory trial's target took to become
	// ready without a memory limit (the probes, the health references);
	// mu guards it: a runner may be shared by goroutines.
	mu           sync.Mutex
	slowestStart time.Duration
}

func newSandboxRunner(cfg Config, sb *sandbox.Sandbox, place *result.Placement) *sandboxRunner {
	return &sandboxRunner{cfg: cfg, sb: sb, place: place, progress: cfg.Progress}
}

func (r *sandboxRunner) where() string {
	host, _ := os.Hostname()
	return "sandbox on " + host
}

// mix is the request mix for a window on tr: every window starts the
// same seeded order, so --seed replays a run's requests.
func (r *sandboxRunner) mix(tr *sandbox.Trial) *load.Mix { return load.NewMix(tr.Targets, r.cfg.Seed) }

// cpu starts the target under the quota, warms it up (excluded from
// everything), then measures with the cgroup's CPU counters read right
// before and right after the load, so the CPU window is the load window.
func (r *sandboxRunner) cpu(ctx context.Context, c cpuConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	r.sb.Repin()
	tr, err := r.sb.Start(ctx, r.cfg.Target, sandbox.TrialConfig{CPU: c.quota, CPUReq: c.request, Env: c.env, Warm: true})
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
	procs := c.procs
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
	w := cpuWindow{res: res, periods: s1.CPU.Periods - s0.CPU.Periods, throttledPeriods: s1.CPU.ThrottledPeriods - s0.CPU.ThrottledPeriods,
		throttledSec: (s1.CPU.ThrottledTime - s0.CPU.ThrottledTime).Seconds(), usedSec: (s1.CPU.Usage - s0.CPU.Usage).Seconds(), windowSec: cpuWin.Seconds(),
		exited: tr.Exited(), isolated: r.place != nil && r.place.Isolated}
	if verr0 == nil && verr1 == nil {
		w.v0, w.v1 = v0, v1
	}
	cell := cpuCell(c, mode, offered, rep, procs, w)
	if r.place != nil && len(r.place.Generator) > 0 {
		cell.OverlapShare = overlapShare(pc0, pc1, r.place.Generator)
	}
	return cell, nil
}

// memory starts each trial's target cold (its binary's page cache
// evicted) under its limits, in order, then drives their loads at once;
// each fails on an OOM kill, on errors, or on a stall.
func (r *sandboxRunner) memory(ctx context.Context, specs ...memSpec) []memRun {
	started := make([]*memStarted, len(specs))
	for i, s := range specs {
		tgt := r.cfg.Target
		if s.reference && r.cfg.RefTarget.Path != "" {
			tgt = r.cfg.RefTarget
		}
		started[i] = r.memStart(ctx, tgt, s.env, s.cpu, s.limit)
	}
	out := make([]memRun, len(specs))
	var wg sync.WaitGroup
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = r.memDrive(ctx, started[i], specs[i].load)
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
func (r *sandboxRunner) memStart(ctx context.Context, tgt sandbox.Target, env map[string]string, cpu float64, limit int64) *memStarted {
	r.sb.Repin()
	m := &memStarted{t: result.MemTrial{LimitBytes: limit}, began: time.Now()}
	r.mu.Lock()
	slowest := r.slowestStart
	r.mu.Unlock()
	wait := startWait(tgt, limit, slowest)
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
// without one was timed (slowest 0); under a limit, startSlowdown × the
// slowest start without one (at least minStartWait), if that is shorter.
func startWait(tgt sandbox.Target, limit int64, slowest time.Duration) time.Duration {
	wait := tgt.ReadyTimeout
	if wait <= 0 {
		wait = sandbox.DefaultReadyTimeout
	}
	if limit == 0 || slowest == 0 {
		return wait
	}
	return min(wait, max(startSlowdown*slowest, minStartWait))
}

// memDrive drives load at a started target, stops it and judges the run.
func (r *sandboxRunner) memDrive(ctx context.Context, m *memStarted, ml memLoad) memRun {
	t, tr := m.t, m.tr
	if tr == nil {
		t.Seconds = time.Since(m.began).Seconds()
		return memRun{trial: t}
	}
	defer tr.Stop()
	probe := func() (uint64, uint64) {
		m, _ := tr.MemoryStats()
		return m.MajorFaults, m.MaxHits
	}
	var began time.Time
	if ml.measureNonGo {
		began = r.startNonGo(tr)
	}
	var res load.Result
	if ml.rate > 0 {
		ld := load.NewLoader(load.MaxOpenInFlight, probe)
		ld.MinRate = ml.probeRPS * stallShare
		defer ld.Close()
		res = ld.Open(ctx, r.mix(tr), ml.rate, ml.window)
	} else {
		ld := load.NewLoader(memConcurrency, probe)
		ld.MinRate = ml.probeRPS * stallShare
		defer ld.Close()
		res = ld.Closed(ctx, r.mix(tr), ml.requests, ml.maxDur, memConcurrency)
	}
	exited := tr.Exited()
	var ng probeNonGo
	if ml.measureNonGo && !exited {
		ng.m, ng.err = measureNonGo(ctx, tr, began)
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
		t.Outcome, t.Detail = result.Stalled, fmt.Sprintf("under %.0f rps (%.0f%% of the unlimited rate) for %v while major faults reached %d", ml.probeRPS*stallShare, stallShare*100, load.StallWindow, s.Memory.MajorFaults)
	case exited:
		t.Outcome, t.Detail = result.Errored, "the target exited during the load: "+tr.Output()
	case float64(res.Errors) > maxErrorShare*float64(res.Errors+res.Requests) || res.Requests == 0:
		t.Outcome, t.Detail = result.Errored, fmt.Sprintf("%d errors in %d requests (%s)", res.Errors, res.Errors+res.Requests, res.ErrorSummary())
	default:
		t.Outcome = result.OK
	}
	return memRun{trial: t, load: res, nonGo: ng}
}

// startNonGo clears the target's referenced bits before the probe's load,
// so the file pages referenced after it are the hot ones. It returns when
// it cleared them, or the zero time when it could not.
func (r *sandboxRunner) startNonGo(tr *sandbox.Trial) time.Time {
	if err := nongo.ClearRefs("/", tr.Pid); err != nil {
		sayNonGo(r.progress, "%v: hot file pages will be an upper bound", err)
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

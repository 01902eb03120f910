package lab

import (
	"context"
	"maps"
	"strconv"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/target"
)

// planEnv is what `gofit run` would hand the target under these limits.
func (l *study) planEnv(cores float64, mem int64) (map[string]string, fit.Plan) {
	return planEnvNonGo(l.cfg, l.rec.NCPU, l.rec.Binary, declared(l.rec.Target), cores, 0, mem)
}

func (l *analysis) planEnv(cores float64, mem int64) (map[string]string, fit.Plan) {
	return planEnvNonGo(l.cfg, l.ncpu, l.rec.Binary, declared(l.rec.Target), cores, 0, mem)
}

// planEnvRequest is planEnv for a container that also requests request
// cores: without a CPU limit, GOMAXPROCS follows the request times
// Config.CPURequestFactor (GOFIT_CPU_REQUEST_FACTOR's policy).
func planEnvRequest(cfg Config, ncpu int, bin target.Binary, cores, request float64, mem int64) (map[string]string, fit.Plan) {
	return planEnvNonGo(cfg, ncpu, bin, fit.NonGo{}, cores, request, mem)
}

// planEnvNonGo is planEnvRequest with non-Go memory declared, as a user
// following the recommendation declares what the probes measured
// (GOFIT_NON_GO): the memory setting's and the recommendation's plan.
func planEnvNonGo(cfg Config, ncpu int, bin target.Binary, nonGo fit.NonGo, cores, request float64, mem int64) (map[string]string, fit.Plan) {
	in := bin.Input(cgroup.Limits{
		// The request as the sandbox writes it (manage.Group.SetCPURequest).
		CPU:    cgroup.CPULimits{Quota: cores, LeafQuota: cores, QuotaGroup: "(trial)", Shares: uint64(request * 1024)},
		Memory: cgroup.MemoryLimits{Max: mem, MaxGroup: "(trial)"},
	}, ncpu, baseEnv(cfg), nonGo)
	pol := fit.Policy{}
	if request > 0 {
		// Validated with the config: New cannot fail here.
		pol, _ = fit.New(fit.Options{CPURequestFactor: cfg.CPURequestFactor})
	}
	p := pol.Plan(in)
	env := maps.Clone(p.Export)
	// The marker only tells a target that imports gofit's library which
	// values are gofit's (p.Export keeps it, for the memory trials and the
	// recommendation). Left out here, identical environments are
	// recognised as one (same_as).
	delete(env, fit.MarkerVar)
	for k, v := range baseEnv(cfg) {
		env[k] = v
	}
	return env, p
}

// cpuEnv is a CPU setting's environment and the GOMAXPROCS it implies.
func (l *study) cpuEnv(setting string, cores float64) (map[string]string, int, string) {
	return l.cpuEnvRequest(setting, cores, 0)
}

// cpuEnvRequest is cpuEnv for a container requesting request cores.
func (l *study) cpuEnvRequest(setting string, cores, request float64) (map[string]string, int, string) {
	env := l.baseEnv()
	genv, plan := planEnvRequest(l.cfg, l.rec.NCPU, l.rec.Binary, cores, request, 0)
	switch setting {
	case result.SetProcs1:
		env["GOMAXPROCS"] = "1"
		return env, 1, "env GOMAXPROCS=1"
	case result.SetProcsNCPU:
		env["GOMAXPROCS"] = strconv.Itoa(l.rec.NCPU)
		return env, l.rec.NCPU, "env GOMAXPROCS=" + strconv.Itoa(l.rec.NCPU)
	case result.SetGofit:
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
func (l *study) memEnv(setting string, limit int64) map[string]string {
	switch setting {
	case result.SetGofit:
		// With the marker, as `gofit run` starts a target: one that
		// imports gofit's library refines these values in-process (it
		// measures the memory outside its heap); others ignore it.
		env, p := l.planEnv(l.rec.Target.ProbeCPU, limit)
		if m, ok := p.Export[fit.MarkerVar]; ok {
			env[fit.MarkerVar] = m
		}
		declareNonGo(env, l.rec.Target.NonGoBytes)
		return env
	case result.SetLimitGCOff:
		env := l.baseEnv()
		env["GOMEMLIMIT"] = strconv.FormatInt(limit, 10)
		env["GOGC"] = "off"
		return env
	case result.SetAutoMemLimit:
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
func (l *study) sandboxMeasure(ctx context.Context, c cpuConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	l.sb.Repin()
	tr, err := l.sb.Start(ctx, l.cfg.Target, sandbox.TrialConfig{CPU: c.quota, CPUReq: c.request, Env: c.env, Warm: true})
	if err != nil {
		return result.CPUCell{}, err
	}
	defer tr.Stop()
	inFlight := l.cfg.Concurrency
	if mode == result.Open {
		inFlight = load.MaxOpenInFlight
	}
	ld := load.NewLoader(inFlight, nil)
	defer ld.Close()
	// Warm up connections, caches and the heap's size at this load.
	if mode == result.Open {
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
	if mode == result.Open {
		r = ld.Open(ctx, l.mix(tr), offered, window)
	} else {
		r = ld.Closed(ctx, l.mix(tr), l.cfg.Requests, window, l.cfg.Concurrency)
	}
	s1, _ := tr.Stats()
	cpuWin := time.Since(t0)
	pc1 := tr.CPUOn()
	v1, verr1 := tr.Vars()
	if ctx.Err() != nil {
		return result.CPUCell{}, ctx.Err()
	}
	cell := result.CPUCell{QuotaCores: c.quota, RequestCores: c.request, Setting: c.setting, SameAs: c.sameAs, Repeat: rep, GOMAXPROCS: procs, GOMAXPROCSFrom: c.from, Mode: mode,
		Isolated: l.place != nil && l.place.Isolated, RPS: r.RPS, P50: r.P50, P90: r.P90, P99: r.P99, P999: r.P999,
		Requests: r.Requests, Errors: r.Errors, Cancelled: r.Cancelled, ErrorKinds: r.ErrorKinds, Seconds: r.Seconds, GeneratorCPUSec: r.GenCPUSec,
		TargetExited: tr.Exited(), Blocks: r.Blocks, Targets: r.Targets}
	if mode == result.Open {
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
func gcShare(a, b sandbox.RuntimeVars) *float64 {
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

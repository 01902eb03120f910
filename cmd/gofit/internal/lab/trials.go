package lab

import (
	"maps"
	"strconv"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/target"
)

// planEnv is what `gofit run` would hand the target of a study with
// these records under these limits.
func planEnv(cfg Config, rec *Records, cores float64, mem int64) (map[string]string, fit.Plan) {
	return planEnvNonGo(cfg, rec.NCPU, rec.Binary, declared(rec.Target), cores, 0, mem)
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

// memEnv is a memory setting's environment at a limit, for the target of
// a study with these records (its probes' CPU and non-Go memory).
func memEnv(cfg Config, rec *Records, setting string, limit int64) map[string]string {
	switch setting {
	case result.SetGofit:
		// With the marker, as `gofit run` starts a target: one that
		// imports gofit's library refines these values in-process (it
		// measures the memory outside its heap); others ignore it.
		env, p := planEnv(cfg, rec, rec.Target.ProbeCPU, limit)
		if m, ok := p.Export[fit.MarkerVar]; ok {
			env[fit.MarkerVar] = m
		}
		declareNonGo(env, rec.Target.NonGoBytes)
		return env
	case result.SetLimitGCOff:
		env := baseEnv(cfg)
		env["GOMEMLIMIT"] = strconv.FormatInt(limit, 10)
		env["GOGC"] = "off"
		return env
	case result.SetAutoMemLimit:
		env := baseEnv(cfg)
		if limit > 0 {
			env["GOMEMLIMIT"] = strconv.FormatInt(int64(float64(limit)*automemlimitRatio), 10)
		}
		return env
	}
	return baseEnv(cfg)
}

// cpuWindow is what a CPU trial's window measured, whichever runner ran
// it: the load's result, the target cgroup's counters' deltas over the
// window, the window's length, and the target's /debug/vars at its edges
// (nil when it has none).
type cpuWindow struct {
	res              load.Result
	periods          uint64
	throttledPeriods uint64
	throttledSec     float64
	usedSec          float64
	windowSec        float64
	v0, v1           *sandbox.RuntimeVars
	exited, isolated bool
}

// cpuCell is one CPU cell from a window: the one place its figures are
// derived, for the sandbox's runner and the pods'.
func cpuCell(c cpuConfig, mode result.Mode, offered float64, rep, procs int, w cpuWindow) result.CPUCell {
	res := w.res
	cell := result.CPUCell{QuotaCores: c.quota, RequestCores: c.request, Setting: c.setting, SameAs: c.sameAs, Repeat: rep, GOMAXPROCS: procs, GOMAXPROCSFrom: c.from, Mode: mode,
		Isolated: w.isolated, RPS: res.RPS, P50: res.P50, P90: res.P90, P99: res.P99, P999: res.P999,
		Requests: res.Requests, Errors: res.Errors, Cancelled: res.Cancelled, ErrorKinds: res.ErrorKinds, Seconds: res.Seconds, GeneratorCPUSec: res.GenCPUSec,
		TargetExited: w.exited, Blocks: res.Blocks, Targets: res.Targets,
		Periods: w.periods, ThrottledPeriods: w.throttledPeriods, ThrottledSeconds: w.throttledSec,
		CPUSeconds: w.usedSec, CPUWindowSeconds: w.windowSec, CPUEfficiency: efficiency(w.usedSec, w.windowSec, c.quota)}
	if mode == result.Open {
		cell.OfferedRPS = offered
	}
	if res.Requests > 0 {
		cell.CPUMsPerRequest = w.usedSec * 1000 / float64(res.Requests)
	}
	if w.v0 != nil && w.v1 != nil {
		cell.GCCPUShare = gcShare(*w.v0, *w.v1)
	}
	return cell
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

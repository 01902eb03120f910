package lab

import (
	"maps"
	"strconv"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

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

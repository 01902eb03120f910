package lab

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/target"
)

// cpuDesign is the CPU study's design: its rows, the distinct
// environments (configs) at each, the order it measures them in, and
// what a run costs. The study runs it and the analysis reads it: one
// value, from the configuration and what the records say of the target
// (the CPUs it saw, its binary).
type cpuDesign struct {
	cfg  Config
	ncpu int
	bin  target.Binary
}

// designOf is the CPU design of a study with these records.
func designOf(cfg Config, rec *Records) cpuDesign {
	return cpuDesign{cfg: cfg, ncpu: rec.NCPU, bin: rec.Binary}
}

func envKey(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + env[k] + "\x00")
	}
	return b.String()
}

// configs are the distinct environments at a row: quota q, or, for the
// request row (q 0, no limit), request cores of CPU weight. Settings
// giving the target the same environment are one cell: measuring both
// would only measure the noise twice. go-default, then gofit, names a
// shared cell.
func (d cpuDesign) configs(q, request float64) []trial.CPUConfig {
	var out []trial.CPUConfig
	idx := map[string]int{}
	order := append([]string(nil), d.cfg.CPUSettings...)
	rank := func(s string) int {
		switch s {
		case result.SetGoDefault:
			return 0
		case result.SetGofit:
			return 1
		}
		return 2
	}
	sort.SliceStable(order, func(i, j int) bool { return rank(order[i]) < rank(order[j]) })
	defaultEnv, defaultProcs, _ := d.env(result.SetGoDefault, q, request)
	for _, s := range order {
		env, procs, from := d.env(s, q, request)
		k := envKey(env)
		if s == result.SetProcsNCPU && procs == defaultProcs && d.bin.GoVersion != "" {
			// Go's default is known to be the CPU count here (a Go >= 1.25
			// target under a quota of 1 core or less on 2 CPUs, or no
			// limit): measuring both would measure the noise twice and
			// spend a third of the row's budget on it.
			k = envKey(defaultEnv)
		}
		if i, ok := idx[k]; ok {
			out[i].SameAs = append(out[i].SameAs, s)
			continue
		}
		idx[k] = len(out)
		out = append(out, trial.CPUConfig{Quota: q, Request: request, Setting: s, SameAs: []string{}, Env: env, Procs: procs, From: from})
	}
	return out
}

// cpuRows are the CPU study's rows: its quotas, then, with
// Config.CPURequest, the request row (no limit, key 0).
func (d cpuDesign) rows() []float64 {
	if d.cfg.CPURequest > 0 {
		return append(append([]float64(nil), d.cfg.Quotas...), 0)
	}
	return d.cfg.Quotas
}

// rowOrder is the CPU study's rows, in the order it measures them, which is
// the order the planner funds them (planRows): first the quotas where gofit's plan and
// Go's default differ (the comparison the recommendation rests on),
// smallest first, then the request row if they differ there, then the
// rest. A row the budget cannot take to a verdict is left out (planRows).
func (d cpuDesign) order() []cpuRow {
	rows := append([]float64(nil), d.rows()...)
	rank := func(q float64) int {
		differs := false
		for _, c := range d.configs(q, d.requestAt(q)) {
			if c.Setting == result.SetGofit {
				differs = true // gofit names a cell of its own: not go-default's
			}
		}
		switch {
		case differs && q > 0:
			return 0
		case differs:
			return 1
		}
		return 2
	}
	sort.SliceStable(rows, func(i, j int) bool {
		ri, rj := rank(rows[i]), rank(rows[j])
		if ri != rj {
			return ri < rj
		}
		return rows[i] < rows[j]
	})
	out := make([]cpuRow, len(rows))
	for i, q := range rows {
		out[i] = cpuRow{q: q, cells: len(d.configs(q, d.requestAt(q))), label: result.RowLabel(q, d.requestAt(q))}
	}
	return out
}

// requestAt is the CPU request of row q: Config.CPURequest for the request
// row, none for a quota.
func (d cpuDesign) requestAt(q float64) float64 {
	if q == 0 {
		return d.cfg.CPURequest
	}
	return 0
}

// closedWindow is the closed loop's window: by time unless --requests
// fixed a count.
func (d cpuDesign) closedWindow() time.Duration {
	if d.cfg.Requests > 0 {
		return 0
	}
	return d.cfg.ClosedWindow
}

// runCost estimates one more run of k from the runs so far, cells.
func (d cpuDesign) runCost(cells []result.CPUCell, k cellKey) time.Duration {
	runs := runsOf(cells, k)
	if len(runs) == 0 {
		return d.cfg.ClosedWindow + d.cfg.Warmup
	}
	var s float64
	for _, r := range runs {
		s += r.Seconds
	}
	return time.Duration((s/float64(len(runs)))*float64(time.Second)) + d.cfg.Warmup + 300*time.Millisecond
}

// env is a CPU setting's environment at cores (a quota; 0: none) and
// request cores, the GOMAXPROCS it implies, and where that comes from.
func (d cpuDesign) env(setting string, cores, request float64) (map[string]string, int, string) {
	env := baseEnv(d.cfg)
	genv, plan := planEnvRequest(d.cfg, d.ncpu, d.bin, cores, request, 0)
	switch setting {
	case result.SetProcs1:
		env["GOMAXPROCS"] = "1"
		return env, 1, "env GOMAXPROCS=1"
	case result.SetProcsNCPU:
		env["GOMAXPROCS"] = strconv.Itoa(d.ncpu)
		return env, d.ncpu, "env GOMAXPROCS=" + strconv.Itoa(d.ncpu)
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

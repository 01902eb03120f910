package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

type cpuConfig struct {
	quota   float64
	request float64 // the request row: no limit (quota 0), CPU weight of this many cores
	setting string
	sameAs  []string
	env     map[string]string
	procs   int
	from    string
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

// configs are the distinct environments at a quota. Settings giving the
// target the same environment are one cell: measuring both would only
// measure the noise twice. go-default, then gofit, names a shared cell.
func (l *study) configs(q float64) []cpuConfig { return l.configsRequest(q, 0) }

// configsRequest is configs for a container with a CPU request: the
// request row has q 0 (no limit).
func (l *study) configsRequest(q, request float64) []cpuConfig {
	var out []cpuConfig
	idx := map[string]int{}
	order := append([]string(nil), l.cfg.CPUSettings...)
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
	defaultEnv, defaultProcs, _ := l.cpuEnvRequest(result.SetGoDefault, q, request)
	for _, s := range order {
		env, procs, from := l.cpuEnvRequest(s, q, request)
		k := envKey(env)
		if s == result.SetProcsNCPU && procs == defaultProcs && l.rec.Binary.GoVersion != "" {
			// Go's default is known to be the CPU count here (a Go >= 1.25
			// target under a quota of 1 core or less on 2 CPUs, or no
			// limit): measuring both would measure the noise twice and
			// spend a third of the row's budget on it.
			k = envKey(defaultEnv)
		}
		if i, ok := idx[k]; ok {
			out[i].sameAs = append(out[i].sameAs, s)
			continue
		}
		idx[k] = len(out)
		out = append(out, cpuConfig{quota: q, request: request, setting: s, sameAs: []string{}, env: env, procs: procs, from: from})
	}
	return out
}

// cpuRows are the CPU study's rows: its quotas, then, with
// Config.CPURequest, the request row (no limit, key 0).
func (l *study) cpuRows() []float64 {
	if l.cfg.CPURequest > 0 {
		return append(append([]float64(nil), l.cfg.Quotas...), 0)
	}
	return l.cfg.Quotas
}

// rowOrder is the CPU study's rows, in the order it measures them, which is
// the order the planner funds them (planRows): first the quotas where gofit's plan and
// Go's default differ (the comparison the recommendation rests on),
// smallest first, then the request row if they differ there, then the
// rest. A row the budget cannot take to a verdict is left out (planRows).
func (l *study) rowOrder() []cpuRow {
	rows := append([]float64(nil), l.cpuRows()...)
	rank := func(q float64) int {
		differs := false
		for _, c := range l.configsRequest(q, l.requestAt(q)) {
			if c.setting == result.SetGofit {
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
		out[i] = cpuRow{q: q, runs: len(l.configsRequest(q, l.requestAt(q))) * l.cfg.MinRepeats * 2, label: result.RowLabel(q, l.requestAt(q))}
	}
	return out
}

// requestAt is the CPU request of row q: Config.CPURequest for the request
// row, none for a quota.
func (l *study) requestAt(q float64) float64 {
	if q == 0 {
		return l.cfg.CPURequest
	}
	return 0
}

type cellKey struct {
	q       float64
	setting string
	mode    result.Mode
}

func (l *study) runsOf(k cellKey) []result.CPUCell    { return runsOf(l.rec.CPU, k) }
func (l *analysis) runsOf(k cellKey) []result.CPUCell { return runsOf(l.rec.CPU, k) }

// runsOf is the runs of cell k among cells, in the order they ran.
func runsOf(cells []result.CPUCell, k cellKey) []result.CPUCell {
	var out []result.CPUCell
	for _, c := range cells {
		if c.QuotaCores == k.q && c.Setting == k.setting && c.Mode == k.mode {
			out = append(out, c)
		}
	}
	return out
}

func pooled(cs []result.CPUCell) stats.Sample {
	s := make(stats.Sample, 0, len(cs))
	for _, c := range cs {
		s = append(s, c.Blocks)
	}
	return s
}

// closedWindow is the closed loop's window: by time unless --requests
// fixed a count.
func (l *study) closedWindow() time.Duration {
	if l.cfg.Requests > 0 {
		return 0
	}
	return l.cfg.ClosedWindow
}

func (l *study) cpuStudy(ctx context.Context) error {
	offered := map[float64]float64{}
	windows := map[float64]time.Duration{}
	all := map[float64][]cpuConfig{}
	runOne := func(c cpuConfig, mode result.Mode, rep int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		win := l.closedWindow()
		if mode == result.Open {
			win = windows[c.quota]
		}
		began := l.now()
		cell, err := l.measure(ctx, c, mode, offered[c.quota], win, rep)
		if err == nil {
			l.plan.ranCPU(l.now().Sub(began) - time.Duration(cell.Seconds*float64(time.Second)))
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var se *sandbox.StartError
			if errors.As(err, &se) {
				// With no memory limit, a start that fails is the target's
				// fault, and nothing measured after it would be trusted.
				return fmt.Errorf("%w: cpu trial %s %s %s-loop: %v", errTargetFailed, result.RowLabel(c.quota, c.request), c.setting, mode, err)
			}
			return fmt.Errorf("cpu trial %s %s %s-loop: %w", result.RowLabel(c.quota, c.request), c.setting, mode, err)
		}
		l.rec.CPU = append(l.rec.CPU, cell)
		for i, t := range cell.Targets {
			if i >= len(l.rec.Targets) {
				// Named as given ({port} and all): each trial has its own port.
				mix := l.cfg.Target.Mix()
				l.rec.Targets = append(l.rec.Targets, load.TargetResult{Method: mix[i].Method, URL: mix[i].URL})
			}
			l.rec.Targets[i].Merge(t)
		}
		l.progress("cpu %-5s %-15s %-6s rep %d: %5.0f rps, p99 %6.1fms", result.RowLabel(c.quota, c.request), c.setting, mode, rep, cell.RPS, cell.P99)
		if cell.TargetExited {
			// No memory limit here: an exit is a crash. Stop rather than
			// measure a dead service for minutes.
			l.rec.Exited = true
			return fmt.Errorf("%w: it exited during the %s %s %s-loop window (%d errors: %s)", errTargetFailed, result.RowLabel(c.quota, c.request), c.setting, mode, cell.Errors, errorKinds(cell.ErrorKinds))
		}
		return nil
	}
	round := func(cs []cpuConfig, mode result.Mode, rep int) error {
		order := append([]cpuConfig(nil), cs...)
		// A fresh order each round, so drift (thermal, noisy neighbours)
		// spreads over all configurations.
		l.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, c := range order {
			if err := runOne(c, mode, rep); err != nil {
				return err
			}
		}
		return nil
	}
	// repeat runs adaptive repeats at rows: first both sides of gofit
	// against go-default at the deciding rows, a run a side at a time
	// until each is decided or at MaxRepeats; then, unless decidingOnly,
	// whatever else is undecided or short of samples, a round at a time
	// (as many cells of it as fit, comparisons in order, each with its
	// go-default). It reports whether the CPU budget stopped it.
	repeat := func(rows []float64, decidingOnly bool) (bool, error) {
		for {
			todo := l.undecided(all, l.adaptiveOrder(rows))
			if n := leadingDeciding(todo); n > 0 {
				todo = todo[:n]
			} else if decidingOnly {
				return false, nil
			}
			if len(todo) == 0 {
				return false, nil
			}
			for _, t := range todo {
				if l.elapsed()+l.runCost(t.key) > l.plan.cpuBudget() {
					return true, nil
				}
				var c cpuConfig
				for _, x := range all[t.key.q] {
					if x.setting == t.key.setting {
						c = x
					}
				}
				if err := runOne(c, t.key.mode, t.rep); err != nil {
					return false, err
				}
			}
		}
	}
	planned := l.plan.planRows(l.rowOrder())
	quotas := make([]float64, len(planned))
	for i, r := range planned {
		quotas[i] = r.q
	}
	least := smallestQuota(quotas)
	for i := 0; i < len(planned); i++ {
		q := planned[i].q
		if need := l.plan.minRowCost(planned[i]); l.elapsed()+need > l.plan.cpuBudget() {
			// Slower than planned, or the deciding row's repeats took
			// it: what is left cannot take this row to a verdict.
			l.plan.cutRow(planned[i], l.plan.cpuBudget()-l.elapsed(), l.elapsed()+need)
			planned = slices.Delete(planned, i, i+1)
			i--
			continue
		}
		cs := l.configsRequest(q, l.requestAt(q))
		all[q] = cs
		for rep := 1; rep <= l.cfg.MinRepeats; rep++ {
			if err := round(cs, result.Closed, rep); err != nil {
				return err
			}
		}
		if l.cfg.TargetRPS > 0 {
			offered[q] = l.cfg.TargetRPS
		} else {
			offered[q] = l.openRate(q, cs)
		}
		windows[q] = l.plan.planOpenWindow(planned, i, offered[q])
		for rep := 1; rep <= l.cfg.MinRepeats; rep++ {
			if err := round(cs, result.Open, rep); err != nil {
				return err
			}
		}
		if q == least {
			// The smallest quota, where gofit's plan and Go's default
			// differ most, is decided before the sweep goes on: the
			// rest of it gets what is left.
			if _, err := repeat([]float64{q}, true); err != nil {
				return err
			}
		}
	}
	rows := make([]float64, len(planned))
	for i, r := range planned {
		rows[i] = r.q
	}
	out, err := repeat(rows, false)
	if err != nil || !out {
		return err
	}
	if left := len(l.undecided(all, rows)); left > 0 {
		l.plan.note("the CPU study's budget (%v of %v) ran out with %d cells undecided or short of samples; they stay undecided, each with the smallest difference it could have shown and the budget that would decide it", l.plan.cpuBudget().Round(time.Second), l.cfg.Budget, left)
	}
	return nil
}

// looksAt reports whether the adaptive repeats look at a comparison's
// interval after n runs a side, to stop it if decided: at MinRepeats, then
// at about ×1.5 more runs each time (3, 5, 8, 12 by default), and at
// MaxRepeats. Every look is a chance of a false verdict: in the A/A study
// (TestAAFalseVerdictRate, docs/results/lab-verdicts.md) looking after
// every run from 3 to 12 gave false verdicts in 4.8% of comparisons (95%
// upper bound 7.3%). The analysis reads a comparison at these looks only
// (stoppedRatio), each with a 97% interval (lookAlpha), so the study and
// its report stop on the same interval, and gives up on a comparison that
// cannot decide by MaxRepeats (Config.futile): 3.3% (at most 4.2%).
func (c Config) looksAt(n int) bool {
	for at := c.MinRepeats; at < c.MaxRepeats; at = max(at+1, (3*at+1)/2) {
		if n == at {
			return true
		}
	}
	return n >= c.MaxRepeats
}

// openRate is the open-loop rate at row q, the same for every setting
// there (equal load): a share (--open-fraction) of the lower closed-loop
// capacity of gofit and go-default, so that neither side of the
// comparison the recommendation rests on is offered more than it serves
// and both p99s are measured, not a queue. Other settings may be
// saturated at it (saturated). Without gofit and go-default among the
// settings, the lowest capacity of all.
func (l *study) openRate(q float64, cs []cpuConfig) float64 {
	var deciding, all []float64
	for _, c := range cs {
		r := pooled(l.runsOf(cellKey{q, c.setting, result.Closed})).RPS()
		if r <= 0 {
			continue
		}
		all = append(all, r)
		if c.setting == result.SetGoDefault || c.setting == result.SetGofit {
			deciding = append(deciding, r)
		}
	}
	if len(deciding) == 0 {
		deciding = all
	}
	if len(deciding) == 0 {
		return 1
	}
	return math.Max(1, math.Round(l.cfg.OpenFraction*slices.Min(deciding)))
}

type repeatTask struct {
	key cellKey
	rep int
	// deciding: a side of gofit against go-default at a row the
	// recommendation rests on (decidingRows).
	deciding bool
}

// leadingDeciding is how many of todo's first tasks are deciding ones.
func leadingDeciding(todo []repeatTask) int {
	n := 0
	for n < len(todo) && todo[n].deciding {
		n++
	}
	return n
}

// adaptiveOrder is the order adaptive repeats go to the rows in: the
// quota the recommendation would pick from what is measured so far, then
// the study's order (rowOrder).
func (l *study) adaptiveOrder(rows []float64) []float64 {
	pick := summarized(l.cfg, &l.rec).recommendCPU(&result.Recommendation{}).cores
	out := []float64{}
	if slices.Contains(rows, pick) {
		out = append(out, pick)
	}
	for _, q := range rows {
		if q != pick {
			out = append(out, q)
		}
	}
	return out
}

// decidingRows are the rows whose gofit-against-go-default comparisons
// the recommendation rests on: the first in rows (the quota it would pick,
// adaptiveOrder) and the smallest quota (where gofit's plan and Go's
// default differ most: 250m by default).
func decidingRows(rows []float64) map[float64]bool {
	out := map[float64]bool{}
	if len(rows) > 0 {
		out[rows[0]] = true
	}
	if least := smallestQuota(rows); least > 0 {
		out[least] = true
	}
	return out
}

// smallestQuota is the smallest quota among rows (the request row, 0, is
// none), or 0 without one.
func smallestQuota(rows []float64) float64 {
	least := 0.0
	for _, q := range rows {
		if q > 0 && (least == 0 || q < least) {
			least = q
		}
	}
	return least
}

// undecided lists the cells to repeat, rows in the given order: both
// sides of every comparison with go-default that is neither decided nor
// at MaxRepeats, and open cells short of OpenSamples. A saturated open
// loop is not repeated: more of it measures the same queue. Both sides of
// gofit against go-default at the deciding rows come first, marked
// deciding.
func (l *study) undecided(all map[float64][]cpuConfig, rows []float64) []repeatTask {
	want := map[cellKey]bool{}
	deciding := map[cellKey]bool{}
	var order []cellKey
	add := func(k cellKey) {
		if !want[k] && len(l.runsOf(k)) < l.cfg.MaxRepeats {
			want[k] = true
			order = append(order, k)
		}
	}
	a := newAnalysis(l.cfg, &l.rec)
	// open: whether the comparison of k with go-default needs more runs.
	open := func(q float64, setting string, mode result.Mode) bool {
		k, base := cellKey{q, setting, mode}, cellKey{q, result.SetGoDefault, mode}
		runs, baseRuns := l.runsOf(k), l.runsOf(base)
		if setting == result.SetGoDefault || len(baseRuns) == 0 || anyFailed(runs) || anyFailed(baseRuns) {
			return false
		}
		// Decided at a look stays decided (runs added later to top up an
		// open loop's latencies do not reopen it); between looks, or
		// undecided at the last one, it runs on.
		st := headline(mode)
		r, n := a.stoppedRatio(k, runs, baseRuns, st)
		_, decided := stats.Verdict(r, st, st.Margin())
		return !decided && !l.cfg.futile(r, n, st)
	}
	saturated := func(q float64, setting string, mode result.Mode) bool {
		return mode == result.Open && (a.saturated(cellKey{q, setting, mode}) != "" || a.saturated(cellKey{q, result.SetGoDefault, mode}) != "")
	}
	modes := []result.Mode{result.Closed, result.Open}
	dr := decidingRows(rows)
	for _, q := range rows {
		if !dr[q] || !slices.ContainsFunc(all[q], func(c cpuConfig) bool { return c.setting == result.SetGofit }) {
			continue // gofit shares go-default's cell here: nothing to decide
		}
		for _, mode := range modes {
			if !saturated(q, result.SetGofit, mode) && open(q, result.SetGofit, mode) {
				for _, k := range []cellKey{{q, result.SetGofit, mode}, {q, result.SetGoDefault, mode}} {
					add(k)
					if want[k] {
						deciding[k] = true
					}
				}
			}
		}
	}
	for _, q := range rows {
		for _, mode := range modes {
			for _, c := range all[q] {
				k := cellKey{q, c.setting, mode}
				if saturated(q, c.setting, mode) {
					continue
				}
				if mode == result.Open && pooled(l.runsOf(k)).Count() < l.cfg.OpenSamples && l.cfg.OpenDuration == 0 {
					add(k)
				}
				if open(q, c.setting, mode) {
					add(k)
					add(cellKey{q, result.SetGoDefault, mode})
				}
			}
		}
	}
	out := make([]repeatTask, len(order))
	for i, k := range order {
		out[i] = repeatTask{k, len(l.runsOf(k)) + 1, deciding[k]}
	}
	return out
}

func anyFailed(cs []result.CPUCell) bool {
	for _, c := range cs {
		if cellFailed(c) {
			return true
		}
	}
	return false
}

func (l *study) runCost(k cellKey) time.Duration    { return runCost(l.cfg, l.rec.CPU, k) }
func (l *analysis) runCost(k cellKey) time.Duration { return runCost(l.cfg, l.rec.CPU, k) }

// runCost estimates one more run of k from the runs so far.
func runCost(cfg Config, cells []result.CPUCell, k cellKey) time.Duration {
	runs := runsOf(cells, k)
	if len(runs) == 0 {
		return cfg.ClosedWindow + cfg.Warmup
	}
	var s float64
	for _, r := range runs {
		s += r.Seconds
	}
	return time.Duration((s/float64(len(runs)))*float64(time.Second)) + cfg.Warmup + 300*time.Millisecond
}

// headline is the statistic a mode's verdict is about.
func headline(mode result.Mode) stats.Stat {
	if mode == result.Open {
		return stats.StatP99
	}
	return stats.StatRPS
}

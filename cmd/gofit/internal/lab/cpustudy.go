package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

type cellKey struct {
	q       float64
	setting string
	mode    result.Mode
}

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

// cpuStudy runs the CPU study: the rows the planner funds, in the
// design's order, each to its minimum rounds in both modes, the smallest
// quota's deciding comparison before the sweep goes on, then adaptive
// repeats while the CPU study's budget lasts.
func (l *study) cpuStudy(ctx context.Context) error {
	s := &cpuSweep{l: l, d: designOf(l.cfg, &l.rec), par: parallelism(l.run),
		offered: map[float64]float64{}, windows: map[float64]time.Duration{}, all: map[float64][]trial.CPUConfig{}}
	planned := l.plan.planRows(s.d.order())
	least := smallestQuota(rowQuotas(planned))
	firstQuota := slices.IndexFunc(planned, func(r cpuRow) bool { return r.q > 0 })
	for i := 0; i < len(planned); i++ {
		if !s.affords(planned[i], i == firstQuota) {
			planned = slices.Delete(planned, i, i+1)
			if i < firstQuota {
				firstQuota--
			}
			i--
			continue
		}
		if err := s.runRow(ctx, planned, i, i == firstQuota); err != nil {
			return err
		}
		if q := planned[i].q; q == least {
			// The smallest quota, where gofit's plan and Go's default
			// differ most, is decided before the sweep goes on: the
			// rest of it gets what is left.
			if _, err := s.repeat(ctx, []float64{q}, true); err != nil {
				return err
			}
		}
	}
	rows := rowQuotas(planned)
	out, err := s.repeat(ctx, rows, false)
	if err != nil || !out {
		return err
	}
	if left := len(undecided(l.cfg, &l.rec, s.all, rows)); left > 0 {
		l.plan.notes.add("the CPU study's budget (%v of %v) ran out with %d cells undecided or short of samples; they stay undecided, each with the smallest difference it could have shown and the budget that would decide it", l.plan.cpuBudget().Round(time.Second), l.cfg.Budget, left)
	}
	return nil
}

// rowQuotas is the quotas of rows, in their order.
func rowQuotas(rows []cpuRow) []float64 {
	qs := make([]float64, len(rows))
	for i, r := range rows {
		qs[i] = r.q
	}
	return qs
}

// cpuSweep is the CPU study under way: the design it runs, and per row
// what it chose once the row started.
type cpuSweep struct {
	l   *study
	d   cpuDesign
	par int // the runner's parallelism: a batch's cells run side by side
	// Per row: the open loop's offered rate and window, and its
	// configurations.
	offered map[float64]float64
	windows map[float64]time.Duration
	all     map[float64][]trial.CPUConfig
}

// measured is one CPU run as it came back from the runner: its cell, its
// wall time, start to stop, and its error.
type measured struct {
	cell result.CPUCell
	took time.Duration
	err  error
}

// affords says whether the CPU study's time left can take row r to a
// verdict (the first quota row: one round of it, rowRepeats takes it on
// from there); where it cannot, it notes the row as not compared.
func (s *cpuSweep) affords(r cpuRow, firstQuota bool) bool {
	l := s.l
	full := l.plan.rows.minCost(r)
	need := full
	if firstQuota {
		need = l.plan.rows.roundsCost(r, 1, 1) // rowRepeats takes it on from one round
	}
	if l.elapsed()+need > l.plan.cpuBudget() {
		// Slower than planned, or the deciding row's repeats took
		// it: what is left cannot take this row to a verdict.
		l.plan.cutRow(r, l.plan.cpuBudget()-l.elapsed(), l.elapsed()+full)
		return false
	}
	return true
}

// runRow runs row i of the funded rows: its closed-loop rounds, then its
// open-loop rounds at a rate the closed loop measured, in a window the
// planner fits to what is left.
func (s *cpuSweep) runRow(ctx context.Context, rows []cpuRow, i int, firstQuota bool) error {
	l := s.l
	q := rows[i].q
	cs := s.d.configs(q, s.d.requestAt(q))
	s.all[q] = cs
	// The first quota row runs as many rounds as the CPU study's time
	// left funds beside the memory study's reserve, re-priced before
	// each round from what the runs so far cost (a pod's start is
	// known only once one started); the other rows their minimum.
	reps := func(done int) int {
		if !firstQuota {
			return l.cfg.MinRepeats
		}
		return l.plan.rowRepeats(rows[i], done)
	}
	closed := 0
	for rep := 1; rep <= l.cfg.MinRepeats && rep <= reps(rep-1); rep++ {
		if err := s.round(ctx, cs, result.Closed, rep); err != nil {
			return err
		}
		closed = rep
	}
	if l.cfg.TargetRPS > 0 {
		s.offered[q] = l.cfg.TargetRPS
	} else {
		s.offered[q] = openRate(l.cfg, l.rec.CPU, q, cs)
	}
	s.windows[q] = l.plan.planOpenWindow(rows, i, s.offered[q])
	for rep, open := 1, min(reps(closed), closed); rep <= open; rep++ {
		if err := s.round(ctx, cs, result.Open, rep); err != nil {
			return err
		}
	}
	return nil
}

// round runs one round of cs in mode.
func (s *cpuSweep) round(ctx context.Context, cs []trial.CPUConfig, mode result.Mode, rep int) error {
	order := append([]trial.CPUConfig(nil), cs...)
	// A fresh order each round, so drift (thermal, noisy neighbours)
	// spreads over all configurations.
	s.l.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	// In batches of the runner's parallelism, each batch's cells side
	// by side (on their own nodes), recorded in the round's order.
	for i := 0; i < len(order); i += s.par {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.runBatch(ctx, order[i:min(i+s.par, len(order))], mode, rep); err != nil {
			return err
		}
	}
	return nil
}

// runBatch runs batch's cells side by side, then keeps them in batch's
// order.
func (s *cpuSweep) runBatch(ctx context.Context, batch []trial.CPUConfig, mode result.Mode, rep int) error {
	out := make([]measured, len(batch))
	var wg sync.WaitGroup
	for j, c := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[j] = s.measure(ctx, c, mode, rep)
		}()
	}
	wg.Wait()
	for j, c := range batch {
		if err := s.keep(ctx, c, mode, rep, out[j]); err != nil {
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
func (s *cpuSweep) repeat(ctx context.Context, rows []float64, decidingOnly bool) (bool, error) {
	l := s.l
	for {
		todo := undecided(l.cfg, &l.rec, s.all, adaptiveOrder(l.cfg, &l.rec, rows))
		if n := leadingDeciding(todo); n > 0 {
			todo = todo[:n]
		} else if decidingOnly {
			return false, nil
		}
		if len(todo) == 0 {
			return false, nil
		}
		for _, t := range todo {
			if l.elapsed()+l.plan.rows.repeatCost(s.d, l.rec.CPU, t.key) > l.plan.cpuBudget() {
				return true, nil
			}
			if err := s.runOne(ctx, s.configOf(t.key), t.key.mode, t.rep); err != nil {
				return false, err
			}
		}
	}
}

// configOf is the configuration of cell k's row and setting.
func (s *cpuSweep) configOf(k cellKey) trial.CPUConfig {
	var c trial.CPUConfig
	for _, x := range s.all[k.q] {
		if x.Setting == k.setting {
			c = x
		}
	}
	return c
}

// runOne runs one cell and keeps it.
func (s *cpuSweep) runOne(ctx context.Context, c trial.CPUConfig, mode result.Mode, rep int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.keep(ctx, c, mode, rep, s.measure(ctx, c, mode, rep))
}

// measure runs one cell; keep records it (in the study's order, one at
// a time, whatever ran side by side).
func (s *cpuSweep) measure(ctx context.Context, c trial.CPUConfig, mode result.Mode, rep int) measured {
	win := s.d.closedWindow()
	if mode == result.Open {
		win = s.windows[c.Quota]
	}
	began := s.l.now()
	cell, err := s.l.run.CPU(ctx, c, mode, s.offered[c.Quota], win, rep)
	return measured{cell, s.l.now().Sub(began), err}
}

// keep records a measured run: its cost to the planner, its cell and
// targets to the records, a line of progress. A run that failed, or
// whose target exited, ends the study.
func (s *cpuSweep) keep(ctx context.Context, c trial.CPUConfig, mode result.Mode, rep int, m measured) error {
	l := s.l
	cell, err := m.cell, m.err
	if err != nil {
		return cpuRunError(ctx, c, mode, err)
	}
	l.plan.costs.ranCPU(m.took - time.Duration(cell.Seconds*float64(time.Second)))
	l.rec.CPU = append(l.rec.CPU, cell)
	for i, t := range cell.Targets {
		if i >= len(l.rec.Targets) {
			// Named as given ({port} and all): each trial has its own port.
			mix := l.cfg.Target.Mix()
			l.rec.Targets = append(l.rec.Targets, load.TargetResult{Method: mix[i].Method, URL: mix[i].URL})
		}
		l.rec.Targets[i].Merge(t)
	}
	l.progress("cpu %-5s %-15s %-6s rep %d: %5.0f rps, p99 %6.1fms", result.RowLabel(c.Quota, c.Request), c.Setting, mode, rep, cell.RPS, cell.P99)
	if cell.TargetExited {
		// No memory limit here: an exit is a crash. Stop rather than
		// measure a dead service for minutes.
		l.rec.Exited = true
		return fmt.Errorf("%w: it exited during the %s %s %s-loop window (%d errors: %s)", errTargetFailed, result.RowLabel(c.Quota, c.Request), c.Setting, mode, cell.Errors, errorKinds(cell.ErrorKinds))
	}
	return nil
}

// cpuRunError is the study's error for a CPU run of c that failed with
// err: ctx's own once it ended.
func cpuRunError(ctx context.Context, c trial.CPUConfig, mode result.Mode, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var se *sandbox.StartError
	if errors.As(err, &se) {
		// With no memory limit, a start that fails is the target's
		// fault, and nothing measured after it would be trusted.
		return fmt.Errorf("%w: cpu trial %s %s %s-loop: %v", errTargetFailed, result.RowLabel(c.Quota, c.Request), c.Setting, mode, err)
	}
	return fmt.Errorf("cpu trial %s %s %s-loop: %w", result.RowLabel(c.Quota, c.Request), c.Setting, mode, err)
}

// openRate is the open-loop rate at row q, the same for every setting
// there (equal load): a share (--open-fraction) of the lower closed-loop
// capacity of gofit and go-default, so that neither side of the
// comparison the recommendation rests on is offered more than it serves
// and both p99s are measured, not a queue. Other settings may be
// saturated at it (saturated). Without gofit and go-default among the
// settings, the lowest capacity of all.
func openRate(cfg Config, cells []result.CPUCell, q float64, cs []trial.CPUConfig) float64 {
	var deciding, all []float64
	for _, c := range cs {
		r := pooled(runsOf(cells, cellKey{q, c.Setting, result.Closed})).RPS()
		if r <= 0 {
			continue
		}
		all = append(all, r)
		if c.Setting == result.SetGoDefault || c.Setting == result.SetGofit {
			deciding = append(deciding, r)
		}
	}
	if len(deciding) == 0 {
		deciding = all
	}
	if len(deciding) == 0 {
		return 1
	}
	return math.Max(1, math.Round(cfg.OpenFraction*slices.Min(deciding)))
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
func adaptiveOrder(cfg Config, rec *Records, rows []float64) []float64 {
	pick := summarized(cfg, rec).recommendCPU(&result.Recommendation{}).cores
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
func undecided(cfg Config, rec *Records, all map[float64][]trial.CPUConfig, rows []float64) []repeatTask {
	want := map[cellKey]bool{}
	deciding := map[cellKey]bool{}
	var order []cellKey
	add := func(k cellKey) {
		if !want[k] && len(runsOf(rec.CPU, k)) < cfg.MaxRepeats {
			want[k] = true
			order = append(order, k)
		}
	}
	a := newAnalysis(cfg, rec)
	// open: whether the comparison of k with go-default needs more runs.
	open := func(q float64, setting string, mode result.Mode) bool {
		k, base := cellKey{q, setting, mode}, cellKey{q, result.SetGoDefault, mode}
		runs, baseRuns := runsOf(rec.CPU, k), runsOf(rec.CPU, base)
		if setting == result.SetGoDefault || len(baseRuns) == 0 || anyFailed(runs) || anyFailed(baseRuns) {
			return false
		}
		// Decided at a look stays decided (runs added later to top up an
		// open loop's latencies do not reopen it); between looks, or
		// undecided at the last one, it runs on.
		st := headline(mode)
		r, n := a.stoppedRatio(k, runs, baseRuns, st)
		_, decided := stats.Verdict(r, st, st.Margin())
		return !decided && !cfg.futile(r, n, st)
	}
	saturated := func(q float64, setting string, mode result.Mode) bool {
		return mode == result.Open && (a.saturated(cellKey{q, setting, mode}) != "" || a.saturated(cellKey{q, result.SetGoDefault, mode}) != "")
	}
	modes := []result.Mode{result.Closed, result.Open}
	dr := decidingRows(rows)
	for _, q := range rows {
		if !dr[q] || !slices.ContainsFunc(all[q], func(c trial.CPUConfig) bool { return c.Setting == result.SetGofit }) {
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
				k := cellKey{q, c.Setting, mode}
				if saturated(q, c.Setting, mode) {
					continue
				}
				if mode == result.Open && pooled(runsOf(rec.CPU, k)).Count() < cfg.OpenSamples && cfg.OpenDuration == 0 {
					add(k)
				}
				if open(q, c.Setting, mode) {
					add(k)
					add(cellKey{q, result.SetGoDefault, mode})
				}
			}
		}
	}
	out := make([]repeatTask, len(order))
	for i, k := range order {
		out[i] = repeatTask{k, len(runsOf(rec.CPU, k)) + 1, deciding[k]}
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

// headline is the statistic a mode's verdict is about.
func headline(mode result.Mode) stats.Stat {
	if mode == result.Open {
		return stats.StatP99
	}
	return stats.StatRPS
}

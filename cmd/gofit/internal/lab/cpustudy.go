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
		case SetGoDefault:
			return 0
		case SetGofit:
			return 1
		}
		return 2
	}
	sort.SliceStable(order, func(i, j int) bool { return rank(order[i]) < rank(order[j]) })
	defaultEnv, defaultProcs, _ := l.cpuEnvRequest(SetGoDefault, q, request)
	for _, s := range order {
		env, procs, from := l.cpuEnvRequest(s, q, request)
		k := envKey(env)
		if s == SetProcsNCPU && procs == defaultProcs && l.rec.Binary.GoVersion != "" {
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
	mode    Mode
}

func (l *study) runsOf(k cellKey) []CPUCell    { return runsOf(l.rec.CPU, k) }
func (l *analysis) runsOf(k cellKey) []CPUCell { return runsOf(l.rec.CPU, k) }

// runsOf is the runs of cell k among cells, in the order they ran.
func runsOf(cells []CPUCell, k cellKey) []CPUCell {
	var out []CPUCell
	for _, c := range cells {
		if c.QuotaCores == k.q && c.Setting == k.setting && c.Mode == k.mode {
			out = append(out, c)
		}
	}
	return out
}

func pooled(cs []CPUCell) stats.Sample {
	s := make(stats.Sample, 0, len(cs))
	for _, c := range cs {
		s = append(s, c.blocks)
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

// openWindow is the open loop's window per run at rate: long enough that
// the minimum repeats pool OpenSamples latencies.
func (l *study) openWindow(rate float64) time.Duration {
	if l.cfg.OpenDuration > 0 {
		return l.cfg.OpenDuration
	}
	need := float64(l.cfg.OpenSamples) / rate / float64(l.cfg.MinRepeats)
	d := time.Duration(math.Ceil(need*10) / 10 * float64(time.Second))
	return max(d, l.cfg.MinOpenWindow)
}

func (l *study) cpuStudy(ctx context.Context) error {
	offered := map[float64]float64{}
	windows := map[float64]time.Duration{}
	all := map[float64][]cpuConfig{}
	runOne := func(c cpuConfig, mode Mode, rep int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		win := l.closedWindow()
		if mode == Open {
			win = windows[c.quota]
		}
		began := l.now()
		cell, err := l.measure(ctx, c, mode, offered[c.quota], win, rep)
		if err == nil {
			l.overheadSum += max(l.now().Sub(began)-time.Duration(cell.Seconds*float64(time.Second)), 0)
			l.overheadRuns++
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var se *startError
			if errors.As(err, &se) {
				// With no memory limit, a start that fails is the target's
				// fault, and nothing measured after it would be trusted.
				return fmt.Errorf("%w: cpu trial %s %s %s-loop: %v", errTargetFailed, rowLabel(c.quota, c.request), c.setting, mode, err)
			}
			return fmt.Errorf("cpu trial %s %s %s-loop: %w", rowLabel(c.quota, c.request), c.setting, mode, err)
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
		l.progress("cpu %-5s %-15s %-6s rep %d: %5.0f rps, p99 %6.1fms", rowLabel(c.quota, c.request), c.setting, mode, rep, cell.RPS, cell.P99)
		if cell.TargetExited {
			// No memory limit here: an exit is a crash. Stop rather than
			// measure a dead service for minutes.
			l.rec.Exited = true
			return fmt.Errorf("%w: it exited during the %s %s %s-loop window (%d errors: %s)", errTargetFailed, rowLabel(c.quota, c.request), c.setting, mode, cell.Errors, errorKinds(cell.ErrorKinds))
		}
		return nil
	}
	round := func(cs []cpuConfig, mode Mode, rep int) error {
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
	rows := l.planRows()
	for i := 0; i < len(rows); i++ {
		q := rows[i]
		if need := l.minRowCost(q); l.elapsed()+need > l.cpuBudget() {
			// Slower than planned: what is left cannot take this row to
			// a verdict.
			l.cutRow(q, l.cpuBudget()-l.elapsed(), l.elapsed()+need)
			rows = slices.Delete(rows, i, i+1)
			i--
			continue
		}
		cs := l.configsRequest(q, l.requestAt(q))
		all[q] = cs
		for rep := 1; rep <= l.cfg.MinRepeats; rep++ {
			if err := round(cs, Closed, rep); err != nil {
				return err
			}
		}
		// Equal load: every setting at this quota gets the same rate, a
		// share of the median capacity over settings (or --target-rps).
		if l.cfg.TargetRPS > 0 {
			offered[q] = l.cfg.TargetRPS
		} else {
			var caps []float64
			for _, c := range cs {
				if r := pooled(l.runsOf(cellKey{q, c.setting, Closed})).RPS(); r > 0 {
					caps = append(caps, r)
				}
			}
			offered[q] = math.Max(1, math.Round(l.cfg.OpenFraction*summarize(caps).Median))
		}
		windows[q] = l.planOpenWindow(rows, i, offered[q])
		for rep := 1; rep <= l.cfg.MinRepeats; rep++ {
			if err := round(cs, Open, rep); err != nil {
				return err
			}
		}
	}
	// Adaptive: repeat what is still undecided, or short of samples, while
	// the budget lasts; when it cannot fit a whole round, as many cells of
	// it as fit, comparisons in order (each with its go-default).
	for {
		todo := l.undecided(all, l.adaptiveOrder(rows))
		if len(todo) == 0 {
			return nil
		}
		ran := 0
		for _, t := range todo {
			if l.elapsed()+l.runCost(t.key) > l.cpuBudget() {
				break
			}
			var c cpuConfig
			for _, x := range all[t.key.q] {
				if x.setting == t.key.setting {
					c = x
				}
			}
			if err := runOne(c, t.key.mode, t.rep); err != nil {
				return err
			}
			ran++
		}
		if ran < len(todo) {
			left := len(l.undecided(all, rows))
			if left > 0 {
				l.budgetNote("the CPU study's budget (%v of %v) ran out with %d cells undecided or short of samples; they stay undecided, each with the smallest difference it could have shown and the budget that would decide it", l.cpuBudget().Round(time.Second), l.cfg.Budget, left)
			}
			return nil
		}
	}
}

type repeatTask struct {
	key cellKey
	rep int
}

// adaptiveOrder is the order adaptive repeats go to the rows in: the
// quota the recommendation would pick from what is measured so far, then
// the study's order (rowOrder).
func (l *study) adaptiveOrder(rows []float64) []float64 {
	pick := summarized(l.cfg, &l.rec).recommendCPU(&Recommendation{}).cores
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

// undecided lists the cells to repeat, rows in the given order: both
// sides of every comparison with go-default that is neither decided nor
// at MaxRepeats, and open cells short of OpenSamples. A saturated open
// loop is not repeated: more of it measures the same queue.
func (l *study) undecided(all map[float64][]cpuConfig, rows []float64) []repeatTask {
	want := map[cellKey]bool{}
	var order []cellKey
	add := func(k cellKey) {
		if !want[k] && len(l.runsOf(k)) < l.cfg.MaxRepeats {
			want[k] = true
			order = append(order, k)
		}
	}
	for _, q := range rows {
		for _, mode := range []Mode{Closed, Open} {
			base := cellKey{q, SetGoDefault, mode}
			baseRuns := l.runsOf(base)
			for _, c := range all[q] {
				k := cellKey{q, c.setting, mode}
				runs := l.runsOf(k)
				if a := newAnalysis(l.cfg, &l.rec); mode == Open && (a.saturated(k) != "" || a.saturated(base) != "") {
					continue
				}
				if mode == Open && pooled(runs).Count() < l.cfg.OpenSamples && l.cfg.OpenDuration == 0 {
					add(k)
				}
				if c.setting == SetGoDefault || len(baseRuns) == 0 || anyFailed(runs) || anyFailed(baseRuns) {
					continue
				}
				st := headline(mode)
				_, decided := stats.Verdict(l.boot.Ratio(pooled(runs), pooled(baseRuns), st), st, st.Margin())
				if !decided {
					add(k)
					add(base)
				}
			}
		}
	}
	out := make([]repeatTask, len(order))
	for i, k := range order {
		out[i] = repeatTask{k, len(l.runsOf(k)) + 1}
	}
	return out
}

func anyFailed(cs []CPUCell) bool {
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
func runCost(cfg Config, cells []CPUCell, k cellKey) time.Duration {
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
func headline(mode Mode) stats.Stat {
	if mode == Open {
		return stats.StatP99
	}
	return stats.StatRPS
}

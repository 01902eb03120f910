package lab

import (
	"fmt"
	"math"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

// The budget planner. Every phase is planned against --budget before it
// starts and cut against it while it runs, so the study ends within the
// budget plus one trial whatever the target's speed:
//
//   - the memory study's minimum (memBudget.reserve: the probes,
//     memMinSurvival limited trials of its first setting, the check
//     trial) is kept back from the start, priced at what a trial costs
//     on this runner (a pod's start on a cluster: tens of seconds on a
//     slow node), and re-priced as trials measure it;
//   - the CPU study gets cpuShare of the budget, or what the memory
//     reserve leaves if that is less; each open-loop window is as long
//     as OpenSamples needs or as the CPU study's time left allows,
//     whichever is shorter; adaptive repeats run only while one more
//     fits. Where its first quota row's minimum does not fit and one
//     round does, that row runs as many rounds as fit (its verdicts
//     then stay undecided, and the memory trials have a CPU limit to
//     run under); the start says so and names the --budget that would
//     fund both. A row not even one round of which fits is not started;
//   - the memory study gets the rest, less the check trial: the probes a
//     fixed share of it, and each memory trial as many requests as the
//     planned number of trials leaves time for; each setting's searches
//     stop (FloorSearch.Allow) at that setting's share of the time left,
//     the first setting's survival search never before memMinSurvival
//     limited trials ran;
//   - the check trial is kept back from the start.
//
// A target too slow to reach the sample minimums within the budget gets
// the samples it has, wider intervals, and a note in lab.budget_notes
// (lab.budget_limited is set). A memory figure says how many limited
// trials it rests on and whether its search found the floor or only
// bounded it (result.Finding): "not measured" rather than a figure
// without limited trials behind it.

// cpuShare is the part of the budget the CPU study may spend.
const cpuShare = 0.5

// adaptiveReserve is the share of the CPU study's budget that funding
// rows and sizing open-loop windows leave for the adaptive repeats.
const adaptiveReserve = 0.15

// planner is the budget planner: the one place the study asks what it can
// afford (rows, windows, requests per trial, the time kept back for the
// check trial) and tells what its runs cost. Its parts: what runs cost
// (costs, and rows for the CPU study's rows on this runner), the memory
// study's side (mem), and the notes it writes; itself it funds the CPU
// study's rows, rounds and open-loop windows.
type planner struct {
	cfg     *Config              // the study's configuration, read only
	elapsed func() time.Duration // the study's wall time so far
	costs   *trialCosts
	rows    *rowCosts
	mem     *memBudget
	notes   *budgetNotes
	// shortAt is the rounds each short row was last said to get.
	shortAt map[float64]int
}

func newPlanner(cfg *Config, elapsed func() time.Duration, lab *result.LabInfo) *planner {
	notes := &budgetNotes{cfg: cfg, lab: lab}
	costs := &trialCosts{cfg: cfg}
	return &planner{cfg: cfg, elapsed: elapsed, costs: costs, notes: notes,
		rows: &rowCosts{cfg: cfg, costs: costs},
		mem:  &memBudget{cfg: cfg, elapsed: elapsed, costs: costs, notes: notes, plan: memPlan{requests: cfg.MemRequests}}}
}

// budgetNotes is what the planner tells the user: each cut in the
// records' lab section (budget_notes, not_compared), and on the progress
// stream.
type budgetNotes struct {
	cfg *Config         // the study's configuration, read only
	lab *result.LabInfo // where cuts are noted
}

// add records that the budget cut a phase short.
func (n *budgetNotes) add(format string, a ...any) {
	n.lab.BudgetLimited = true
	addNote(n.cfg.Progress, &n.lab.BudgetNotes, "budget", fmt.Sprintf(format, a...))
}

// notCompared records that a row of the CPU study is not compared, and
// why.
func (n *budgetNotes) notCompared(msg string) {
	n.lab.NotCompared = append(n.lab.NotCompared, msg)
	n.add("%s", msg)
}

// cpuBudget is the part of the budget the CPU study may spend, adaptive
// repeats included: cpuShare of it, or what the memory study's minimum
// (memBudget.reserve) leaves if that is less. The memory study needs the
// rest.
func (p *planner) cpuBudget() time.Duration {
	share := time.Duration(float64(p.cfg.Budget) * cpuShare)
	return max(min(share, p.cfg.Budget-p.mem.reserve()), 0)
}

// budgetFor is the --budget that funds cpuNeed of CPU runs (before the
// adaptive reserve) and the memory study's minimum, in whole minutes.
func (p *planner) budgetFor(cpuNeed time.Duration) time.Duration {
	cpu := time.Duration(float64(cpuNeed) / (1 - adaptiveReserve))
	b := max(time.Duration(float64(cpu)/cpuShare), cpu+p.mem.reserve())
	return (b + time.Minute - 1).Truncate(time.Minute)
}

// openFloor is the shortest open-loop window the planner gives a run:
// the configured minimum (50 CFS periods), or --open-duration.
func openFloor(cfg *Config) time.Duration {
	if cfg.OpenDuration > 0 {
		return cfg.OpenDuration
	}
	return cfg.MinOpenWindow
}

// planRows funds the CPU study's rows, in the order given (rowOrder), while their minimum runs
// fit in the CPU budget less the adaptive reserve. A row that does not fit
// is not started: with fewer than stats.MinRuns runs a side its
// comparisons could only be undecided, and the time is better spent
// deciding the rows before it. Each left-out row is named in
// lab.not_compared with what it would have taken. The first row with a
// quota is funded with fewer rounds (rowRepeats) where one round of it
// fits and its minimum does not: the memory study runs under the CPU
// limit the CPU study recommends, and a recommendation needs its
// open-loop cells; the start says its verdicts will stay undecided.
func (p *planner) planRows(rows []cpuRow) []cpuRow {
	avail := time.Duration(float64(p.cpuBudget())*(1-adaptiveReserve)) - p.elapsed()
	var funded []cpuRow
	var spent time.Duration
	first := true
	for _, r := range rows {
		cost := p.rows.minCost(r)
		if spent+cost <= avail || first && r.q > 0 && spent+p.rows.roundsCost(r, 1, 1) <= avail {
			if spent+cost > avail {
				k := p.repeatsFit(r, avail-spent, 0)
				cost = p.rows.roundsCost(r, k, k)
				p.shortRow(r, k)
			}
			funded = append(funded, r)
			spent += cost
			first = first && r.q <= 0
			continue
		}
		p.cutRow(r, avail-spent, spent+cost)
	}
	return funded
}

// repeatsFit is the most rounds of each mode of row r (MinRepeats at
// most, 1 at least) whose runs fit in left, done of its closed rounds
// run already.
func (p *planner) repeatsFit(r cpuRow, left time.Duration, done int) int {
	for k := max(p.cfg.MinRepeats, 1); k > 1; k-- {
		if p.rows.roundsCost(r, max(k-done, 0), k) <= left {
			return k
		}
	}
	return 1
}

// rowRepeats is how many rounds of each mode the CPU study's time left
// funds at row r, done of its closed rounds run: MinRepeats, or fewer
// (never under 1) where the memory study's reserve leaves less; a cut is
// noted (shortRow).
func (p *planner) rowRepeats(r cpuRow, done int) int {
	left := time.Duration(float64(p.cpuBudget())*(1-adaptiveReserve)) - p.elapsed()
	k := p.repeatsFit(r, left, done)
	if k < p.cfg.MinRepeats {
		p.shortRow(r, k)
	}
	return k
}

// shortRow says, once per count, that row r gets k rounds of the
// MinRepeats its verdicts need, at what a trial costs, what the memory
// study keeps back, and the --budget that would fund both.
func (p *planner) shortRow(r cpuRow, k int) {
	if n, ok := p.shortAt[r.q]; ok && n <= k {
		return
	}
	if p.shortAt == nil {
		p.shortAt = map[float64]int{}
	}
	p.shortAt[r.q] = k
	need := p.rows.roundsCost(r, p.cfg.MinRepeats, p.cfg.MinRepeats)
	p.notes.add("at %s a trial (its start and stop included), --budget %v funds %d of the %d rounds the CPU study's verdicts at %s need%s: its verdicts there stay undecided; --budget %v would fund them and the memory study's minimum",
		p.costs.trialStart().Round(time.Second), p.cfg.Budget, k, p.cfg.MinRepeats, r.label, p.reserveNote(need), p.budgetFor(need))
}

// reserveNote names the memory study's reserve where it, not the CPU
// study's share, is what keeps need (CPU runs, before the adaptive
// reserve) out of the CPU study ("" otherwise).
func (p *planner) reserveNote(need time.Duration) string {
	share := time.Duration(float64(p.cfg.Budget) * cpuShare)
	if p.cfg.Budget-p.mem.reserve() >= share || need > time.Duration(float64(share)*(1-adaptiveReserve)) {
		return ""
	}
	return fmt.Sprintf(" beside the memory study's minimum (%d probes, %d limited trials and the check trial at %s a trial: %s, kept back)",
		p.cfg.Probes, memMinSurvival, p.costs.trialStart().Round(time.Second), p.mem.reserve().Round(time.Second))
}

// cutRow records that row r is not compared: left is what the budget had
// for it, need what the funded rows and this one would have cost.
func (p *planner) cutRow(r cpuRow, left, need time.Duration) {
	perRun := p.rows.minCost(r) / time.Duration(p.cfg.MinRepeats)
	funds := 0
	if left > 0 && perRun > 0 {
		funds = int(left / perRun)
	}
	// The budget whose CPU share, less the reserve, covers need.
	budget := p.budgetFor(need)
	p.notes.notCompared(fmt.Sprintf("not compared at %s: the budget funds %d of the %d runs a verdict needs%s (--budget %v would fund them)",
		r.label, min(funds, p.cfg.MinRepeats), p.cfg.MinRepeats, p.reserveNote(need), budget))
}

// openWindow is the open loop's window per run at rate: long enough that
// the minimum repeats pool OpenSamples latencies.
func openWindow(cfg *Config, rate float64) time.Duration {
	if cfg.OpenDuration > 0 {
		return cfg.OpenDuration
	}
	need := float64(cfg.OpenSamples) / rate / float64(cfg.MinRepeats)
	d := time.Duration(math.Ceil(need*10) / 10 * float64(time.Second))
	return max(d, cfg.MinOpenWindow)
}

// planOpenWindow is the open-loop window per run at rate for row q, the
// i-th of the funded rows: what OpenSamples needs, cut so that the minimum
// open runs of this and every later funded row, and the closed runs of the
// later ones, fit in the CPU study's time less the adaptive reserve. It
// never goes under openFloor: below it, runs could not carry a verdict.
func (p *planner) planOpenWindow(rows []cpuRow, i int, rate float64) time.Duration {
	want := openWindow(p.cfg, rate)
	if p.cfg.OpenDuration > 0 {
		return want
	}
	var closedLater time.Duration
	openRuns := 0
	for j, r := range rows[i:] {
		n := p.rows.batches(r)
		openRuns += n
		if j > 0 {
			closedLater += time.Duration(n) * (p.cfg.ClosedWindow + p.costs.runOverhead())
		}
	}
	left := time.Duration(float64(p.cpuBudget())*(1-adaptiveReserve)) - p.elapsed() - closedLater
	fit := left/time.Duration(max(openRuns, 1)) - p.costs.runOverhead()
	if fit >= want {
		return want
	}
	win := max(fit, openFloor(p.cfg)).Round(100 * time.Millisecond)
	if win >= want {
		return want // the floor is all OpenSamples needs: nothing was cut
	}
	p.notes.add("open loop at %s: %v windows (%d latencies per cell at %.0f rps) instead of the %v that %d latencies need; p99 intervals are wider",
		rows[i].label, win, int(rate*win.Seconds())*p.cfg.MinRepeats, rate, want, p.cfg.OpenSamples)
	return win
}

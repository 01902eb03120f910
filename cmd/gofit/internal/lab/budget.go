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
//   - the memory study's minimum (memReserve: the probes, memMinSurvival
//     limited trials of its first setting, the check trial) is kept back
//     from the start, priced at what a trial costs on this runner (a
//     pod's start on a cluster: tens of seconds on a slow node), and
//     re-priced as trials measure it;
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
// check trial) and tells what its runs cost. It notes each cut in the
// records' lab section (budget_notes, not_compared).
type planner struct {
	cfg     *Config              // the study's configuration, read only
	elapsed func() time.Duration // the study's wall time so far
	lab     *result.LabInfo      // where cuts are noted
	// What runs have cost so far: CPU runs beyond their window, and
	// health pairs.
	overheadSum  time.Duration
	overheadRuns int
	pairSum      time.Duration
	pairN        int
	// mem is the survival trials' plan, sized once the probes ran.
	mem memPlan
	// parallel is how many trials the runner runs at once (runner
	// parallelism: 1 locally, a cluster's trial nodes with --kube).
	parallel int
	// startHint is what the runner says a trial's start costs before any
	// trial measured it (the pod runner: its load pod's start); 0: none.
	startHint time.Duration
	// What memory trials have cost so far, each start to stop.
	memSum time.Duration
	memN   int
	// The last CPU run's cost beside its window and the last memory
	// trial's: a node that gets busier midway makes every trial after
	// dearer, and the mean since the start would lag behind (kube/e2e's
	// lab-pods, 2026-12-07: planned at 28 s a trial, 7 minutes over an
	// 8-minute budget).
	lastOverhead, lastMem time.Duration
	// overrunSaid is set once the memory study's minimum was said not
	// to fit in what the budget has left.
	overrunSaid bool
	// shortAt is the rounds each short row was last said to get.
	shortAt map[float64]int
}

func newPlanner(cfg *Config, elapsed func() time.Duration, lab *result.LabInfo) *planner {
	return &planner{cfg: cfg, elapsed: elapsed, lab: lab, mem: memPlan{requests: cfg.MemRequests}}
}

// cpuBudget is the part of the budget the CPU study may spend, adaptive
// repeats included: cpuShare of it, or what the memory study's minimum
// (memReserve) leaves if that is less. The memory study needs the rest.
func (p *planner) cpuBudget() time.Duration {
	share := time.Duration(float64(p.cfg.Budget) * cpuShare)
	return max(min(share, p.cfg.Budget-p.memReserve()), 0)
}

// memMinSurvival is how many limited survival trials of its first
// setting the memory study is never without: the bracket's top (a limit
// that survives), its bottom and a bisection between them, and one more
// at the edge. Fewer bound no floor on both sides; the planner keeps
// their time back from the start (memReserve).
const memMinSurvival = 4

// trialStart is what a trial costs besides its load: starting the
// target (a pod, on a cluster), and stopping it. Measured from the CPU
// runs (less their warm-up) once there are any, else the runner's own
// measure (startHint), else a second.
func (p *planner) trialStart() time.Duration {
	if p.overheadRuns > 0 {
		return max(p.runOverhead()-p.cfg.Warmup, 500*time.Millisecond)
	}
	return max(p.startHint, time.Second)
}

// ranMemory tells the planner what a memory trial cost, start to stop.
func (p *planner) ranMemory(took time.Duration) {
	p.memSum += max(took, 0)
	p.memN++
	p.lastMem = max(took, 0)
}

// memTrialCost is what one memory trial costs: the mean of those run so
// far or the last, whichever is more, else a start and a closed-loop
// window's load.
func (p *planner) memTrialCost() time.Duration {
	if p.memN > 0 {
		return max(p.memSum/time.Duration(p.memN), p.lastMem)
	}
	return p.trialStart() + p.cfg.ClosedWindow
}

// sayOverrun notes, once, that what is left of the memory study's
// minimum (the probes and the first setting's memMinSurvival limited
// trials not yet run, and one pair of the check) no longer fits in what
// the budget has left at what trials cost now, and by how much the study
// will outrun it: the minimum runs all the same (no memory figure rests
// on fewer limited trials), and the note names the --budget that would
// have held it. The memory study asks before its first trial and after
// each.
func (p *planner) sayOverrun() {
	if p.overrunSaid || len(p.cfg.MemSettings) == 0 {
		return
	}
	trials := max(p.cfg.Probes+memMinSurvival-p.memN, 0)
	need, left := time.Duration(trials)*p.memTrialCost()+p.pairCost(), p.cfg.Budget-p.elapsed()
	if need <= left {
		return
	}
	p.overrunSaid = true
	p.note("trials now cost about %v each: what is left of the memory study's minimum (%d trials of its probes and first %d limited survival trials, and one pair of the check) needs %v, and the budget has %v left; it runs all the same, and the study will end about %v past its budget (--budget %v would hold it)",
		p.memTrialCost().Round(time.Second), trials, memMinSurvival, need.Round(time.Second), max(left, 0).Round(time.Second),
		(need - max(left, 0)).Round(time.Second), (p.elapsed() + need + time.Minute - 1).Truncate(time.Minute))
}

// memReserve is the memory study's minimum, kept back from the CPU
// study: the unlimited probes, memMinSurvival limited trials of the first
// setting, and the check trial.
func (p *planner) memReserve() time.Duration {
	if len(p.cfg.MemSettings) == 0 {
		return 0
	}
	return time.Duration(p.cfg.Probes+memMinSurvival)*p.memTrialCost() + p.checkReserve()
}

// budgetFor is the --budget that funds cpuNeed of CPU runs (before the
// adaptive reserve) and the memory study's minimum, in whole minutes.
func (p *planner) budgetFor(cpuNeed time.Duration) time.Duration {
	cpu := time.Duration(float64(cpuNeed) / (1 - adaptiveReserve))
	b := max(time.Duration(float64(cpu)/cpuShare), cpu+p.memReserve())
	return (b + time.Minute - 1).Truncate(time.Minute)
}

// note records that the budget cut a phase short.
func (p *planner) note(format string, a ...any) {
	p.lab.BudgetLimited = true
	addNote(p.cfg.Progress, &p.lab.BudgetNotes, "budget", fmt.Sprintf(format, a...))
}

// ranCPU tells the planner what a CPU run cost besides its window.
func (p *planner) ranCPU(overhead time.Duration) {
	p.overheadSum += max(overhead, 0)
	p.overheadRuns++
	p.lastOverhead = max(overhead, 0)
}

// ranPair tells the planner what a health pair cost.
func (p *planner) ranPair(took time.Duration) {
	p.pairSum += took
	p.pairN++
}

// runOverhead is what a CPU run costs besides its window: start, warm-up,
// reads, statistics. Measured from the runs so far: their mean or the
// last, whichever is more.
func (p *planner) runOverhead() time.Duration {
	if p.overheadRuns == 0 {
		return p.cfg.Warmup + max(p.startHint, time.Second)
	}
	return max(p.overheadSum/time.Duration(p.overheadRuns), p.lastOverhead)
}

// openFloor is the shortest open-loop window the planner gives a run:
// the configured minimum (50 CFS periods), or --open-duration.
func (p *planner) openFloor() time.Duration {
	if p.cfg.OpenDuration > 0 {
		return p.cfg.OpenDuration
	}
	return p.cfg.MinOpenWindow
}

// cpuRow is a row of the CPU study as the planner funds it: its quota (0:
// the request row), how many runs its verdicts need (every distinct
// environment at the row, each MinRepeats times, in both modes), and its
// name in notes.
type cpuRow struct {
	q     float64
	cells int // distinct environments at the row: a round's cells, per mode
	label string
}

// batches is how many batches of runs one mode of a row's minimum takes:
// MinRepeats rounds of its cells, each round going out p.parallel cells
// at a time (one per node on a cluster), so a round of 4 cells on 3
// nodes is 2 batches, not 4/3.
func (p *planner) batches(r cpuRow) int {
	n := max(p.parallel, 1)
	return max(p.cfg.MinRepeats, 1) * ((r.cells + n - 1) / n)
}

// minRowCost is what a row's minimum runs cost at the shortest open-loop
// window: what the row needs before any of its verdicts can be decided.
func (p *planner) minRowCost(r cpuRow) time.Duration {
	// Its wall time is that of its batches.
	half := time.Duration(p.batches(r))
	return half*(p.cfg.ClosedWindow+p.runOverhead()) + half*(p.openFloor()+p.runOverhead())
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
		cost := p.minRowCost(r)
		if spent+cost <= avail || first && r.q > 0 && spent+p.roundsCost(r, 1, 1) <= avail {
			if spent+cost > avail {
				k := p.repeatsFit(r, avail-spent, 0)
				cost = p.roundsCost(r, k, k)
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

// roundsCost is what closed and open rounds of row r cost.
func (p *planner) roundsCost(r cpuRow, closed, open int) time.Duration {
	n := max(p.parallel, 1)
	b := time.Duration((r.cells + n - 1) / n)
	return time.Duration(closed)*b*(p.cfg.ClosedWindow+p.runOverhead()) + time.Duration(open)*b*(p.openFloor()+p.runOverhead())
}

// repeatsFit is the most rounds of each mode of row r (MinRepeats at
// most, 1 at least) whose runs fit in left, done of its closed rounds
// run already.
func (p *planner) repeatsFit(r cpuRow, left time.Duration, done int) int {
	for k := max(p.cfg.MinRepeats, 1); k > 1; k-- {
		if p.roundsCost(r, max(k-done, 0), k) <= left {
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
	need := p.roundsCost(r, p.cfg.MinRepeats, p.cfg.MinRepeats)
	p.note("at %s a trial (its start and stop included), --budget %v funds %d of the %d rounds the CPU study's verdicts at %s need%s: its verdicts there stay undecided; --budget %v would fund them and the memory study's minimum",
		p.trialStart().Round(time.Second), p.cfg.Budget, k, p.cfg.MinRepeats, r.label, p.reserveNote(need), p.budgetFor(need))
}

// reserveNote names the memory study's reserve where it, not the CPU
// study's share, is what keeps need (CPU runs, before the adaptive
// reserve) out of the CPU study ("" otherwise).
func (p *planner) reserveNote(need time.Duration) string {
	share := time.Duration(float64(p.cfg.Budget) * cpuShare)
	if p.cfg.Budget-p.memReserve() >= share || need > time.Duration(float64(share)*(1-adaptiveReserve)) {
		return ""
	}
	return fmt.Sprintf(" beside the memory study's minimum (%d probes, %d limited trials and the check trial at %s a trial: %s, kept back)",
		p.cfg.Probes, memMinSurvival, p.trialStart().Round(time.Second), p.memReserve().Round(time.Second))
}

// cutRow records that row r is not compared: left is what the budget had
// for it, need what the funded rows and this one would have cost.
func (p *planner) cutRow(r cpuRow, left, need time.Duration) {
	perRun := p.minRowCost(r) / time.Duration(p.cfg.MinRepeats)
	funds := 0
	if left > 0 && perRun > 0 {
		funds = int(left / perRun)
	}
	// The budget whose CPU share, less the reserve, covers need.
	budget := p.budgetFor(need)
	msg := fmt.Sprintf("not compared at %s: the budget funds %d of the %d runs a verdict needs%s (--budget %v would fund them)",
		r.label, min(funds, p.cfg.MinRepeats), p.cfg.MinRepeats, p.reserveNote(need), budget)
	p.lab.NotCompared = append(p.lab.NotCompared, msg)
	p.note("%s", msg)
}

// openWindow is the open loop's window per run at rate: long enough that
// the minimum repeats pool OpenSamples latencies.
func (p *planner) openWindow(rate float64) time.Duration {
	if p.cfg.OpenDuration > 0 {
		return p.cfg.OpenDuration
	}
	need := float64(p.cfg.OpenSamples) / rate / float64(p.cfg.MinRepeats)
	d := time.Duration(math.Ceil(need*10) / 10 * float64(time.Second))
	return max(d, p.cfg.MinOpenWindow)
}

// planOpenWindow is the open-loop window per run at rate for row q, the
// i-th of the funded rows: what OpenSamples needs, cut so that the minimum
// open runs of this and every later funded row, and the closed runs of the
// later ones, fit in the CPU study's time less the adaptive reserve. It
// never goes under openFloor: below it, runs could not carry a verdict.
func (p *planner) planOpenWindow(rows []cpuRow, i int, rate float64) time.Duration {
	want := p.openWindow(rate)
	if p.cfg.OpenDuration > 0 {
		return want
	}
	var closedLater time.Duration
	openRuns := 0
	for j, r := range rows[i:] {
		n := p.batches(r)
		openRuns += n
		if j > 0 {
			closedLater += time.Duration(n) * (p.cfg.ClosedWindow + p.runOverhead())
		}
	}
	left := time.Duration(float64(p.cpuBudget())*(1-adaptiveReserve)) - p.elapsed() - closedLater
	fit := left/time.Duration(max(openRuns, 1)) - p.runOverhead()
	if fit >= want {
		return want
	}
	win := max(fit, p.openFloor()).Round(100 * time.Millisecond)
	if win >= want {
		return want // the floor is all OpenSamples needs: nothing was cut
	}
	p.note("open loop at %s: %v windows (%d latencies per cell at %.0f rps) instead of the %v that %d latencies need; p99 intervals are wider",
		rows[i].label, win, int(rate*win.Seconds())*p.cfg.MinRepeats, rate, want, p.cfg.OpenSamples)
	return win
}

// memPlan is the memory study's plan for its closed-loop (survival)
// trials: requests per trial and a time cap per trial.
type memPlan struct {
	requests int
	maxTrial time.Duration
}

// memTrialsPlanned is how many closed-loop trials the memory study
// expects per setting: about six to bracket and bisect, and at most
// ConfirmOf runs on each of the ConfirmSpan steps that confirm the edge.
func memTrialsPlanned(cfg Config) int {
	if cfg.ConfirmOf <= 1 {
		return 6
	}
	return 6 + cfg.ConfirmOf*max(cfg.ConfirmSpan, 1)
}

// survivalTrialsMax bounds one survival search: what is planned, and as
// many again for an edge that does not hold and the climb past it.
func survivalTrialsMax(cfg Config) int {
	return max(16, 2*memTrialsPlanned(cfg))
}

// planMemory sizes the survival trials to the time left (and keeps the
// plan for survivalLoad), from the probes'
// throughput: the same request count for every trial, so their peaks
// compare, and no more than a third of each setting's share (the healthy
// search gets the rest, memory.go) per planned trial allows.
func (p *planner) planMemory(probeRPS, probeSeconds float64) memPlan {
	m := memPlan{requests: p.cfg.MemRequests}
	if probeRPS <= 0 {
		p.mem = m
		return m
	}
	left := max(p.cfg.Budget-p.elapsed()-p.checkReserve(), 0)
	trials := len(p.cfg.MemSettings) * memTrialsPlanned(*p.cfg)
	per := left / 3 / time.Duration(max(trials, 1))
	// A trial's start-up and stop cost what the probes' did beyond their
	// load.
	overhead := time.Duration(max(probeSeconds-float64(p.cfg.MemRequests)/probeRPS, 0.5) * float64(time.Second))
	if n := int(probeRPS * (per - overhead).Seconds()); n < m.requests {
		m.requests = max(n, minMemRequests)
		p.note("survival trials of %d requests instead of %d: at %.0f rps, %d trials in a third of the %v left need it; peaks and floors rest on a shorter load",
			m.requests, p.cfg.MemRequests, probeRPS, trials, left.Round(time.Second))
	}
	// A trial that takes four times its plan is cut there: a target that
	// slow at this limit is not healthy.
	m.maxTrial = max(4*time.Duration(float64(m.requests)/probeRPS*float64(time.Second)), 5*time.Second)
	p.mem = m
	return m
}

// defaultCheckReserve is the time kept back for the check trial until
// the health trials have measured what a pair costs.
const defaultCheckReserve = 20 * time.Second

// pairCost is what one health pair (a reference and a limited run side by
// side, started cold) has cost so far: the mean over every pair run, or
// before any the health window and two starts (on one trial node a
// pair's pods start one after the other).
func (p *planner) pairCost() time.Duration {
	if p.pairN == 0 {
		return p.cfg.HealthWindow + 2*p.trialStart()
	}
	return p.pairSum / time.Duration(p.pairN)
}

// checkReserve is the time kept back from the budget for the check trial:
// the pairs it needs before its interval may decide, at what pairs have
// cost so far (a slow target's start-up makes them dearer).
func (p *planner) checkReserve() time.Duration {
	return max(defaultCheckReserve, time.Duration(p.cfg.HealthPairs)*p.pairCost())
}

// minMemRequests is the fewest requests a survival trial sends.
const minMemRequests = 50

// probeCap is the time cap of one unlimited memory probe: a slow target
// must not spend the memory study on its probes.
func (p *planner) probeCap() time.Duration {
	left := p.cfg.Budget - p.elapsed() - p.checkReserve()
	return max(left/time.Duration(5*max(p.cfg.Probes, 1)), 5*time.Second)
}

// repeatCost is what one more run of cell k costs: its mean window so
// far (the design's estimate, runCost) plus what a run has cost besides
// its window, where that is more (a pod's start on a cluster).
func (p *planner) repeatCost(d cpuDesign, cells []result.CPUCell, k cellKey) time.Duration {
	est := d.runCost(cells, k)
	win := p.cfg.ClosedWindow
	if runs := runsOf(cells, k); len(runs) > 0 {
		var s float64
		for _, r := range runs {
			s += r.Seconds
		}
		win = time.Duration(s / float64(len(runs)) * float64(time.Second))
	}
	return max(est, win+p.runOverhead())
}

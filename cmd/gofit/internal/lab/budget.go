package lab

import (
	"fmt"
	"sort"
	"time"
)

// The budget planner. Every phase is planned against --budget before it
// starts and cut against it while it runs, so the study ends within the
// budget plus one trial whatever the target's speed:
//
//   - the CPU study gets cpuShare of the budget; each open-loop window is
//     as long as OpenSamples needs or as the CPU study's time left allows,
//     whichever is shorter; adaptive repeats run only while one more fits;
//   - the memory study gets the rest, less the check trial: the probes a
//     fixed share of it, and each memory trial as many requests as the
//     planned number of trials leaves time for; each setting's searches
//     stop (FloorSearch.Allow) at that setting's share of the time left;
//   - the check trial is kept back from the start.
//
// A target too slow to reach the sample minimums within the budget gets
// the samples it has, wider intervals, and a note in lab.budget_notes
// (lab.budget_limited is set).

// cpuShare is the part of the budget the CPU study may spend.
const cpuShare = 0.5

// adaptiveReserve is the share of the CPU study's budget that funding
// rows and sizing open-loop windows leave for the adaptive repeats.
const adaptiveReserve = 0.15

// cpuBudget is the part of the budget the CPU study may spend, adaptive
// repeats included; the memory study needs the rest.
func (l *study) cpuBudget() time.Duration {
	return time.Duration(float64(l.cfg.Budget) * cpuShare)
}

// elapsed is the study's wall time so far, statistics included.
func (l *study) elapsed() time.Duration { return l.now().Sub(l.started) }

// budgetNote records that the budget cut a phase short.
func (l *study) budgetNote(format string, a ...any) {
	l.rec.Lab.BudgetLimited = true
	l.note(&l.rec.Lab.BudgetNotes, "budget", fmt.Sprintf(format, a...))
}

// runOverhead is what a CPU run costs besides its window: start, warm-up,
// reads, statistics. Measured from the runs so far.
func (l *study) runOverhead() time.Duration {
	if l.overheadRuns == 0 {
		return l.cfg.Warmup + time.Second
	}
	return l.overheadSum / time.Duration(l.overheadRuns)
}

// rowOrder is the order the CPU study measures its rows in, which is the
// order the planner funds them: first the quotas where gofit's plan and
// Go's default differ (the comparison the recommendation rests on),
// smallest first, then the request row if they differ there, then the
// rest. A row the budget cannot take to a verdict is left out (planRows).
func (l *study) rowOrder() []float64 {
	rows := append([]float64(nil), l.cpuRows()...)
	rank := func(q float64) int {
		differs := false
		for _, c := range l.configsRequest(q, l.requestAt(q)) {
			if c.setting == SetGofit {
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
	return rows
}

// openFloor is the shortest open-loop window the planner gives a run:
// the configured minimum (50 CFS periods), or --open-duration.
func (l *study) openFloor() time.Duration {
	if l.cfg.OpenDuration > 0 {
		return l.cfg.OpenDuration
	}
	return l.cfg.MinOpenWindow
}

// runsFor is how many runs a row's verdicts need: every distinct
// environment at the row, each MinRepeats times, in both modes.
func (l *study) runsFor(q float64) int {
	return len(l.configsRequest(q, l.requestAt(q))) * l.cfg.MinRepeats * 2
}

// minRowCost is what a row's minimum runs cost at the shortest open-loop
// window: what the row needs before any of its verdicts can be decided.
func (l *study) minRowCost(q float64) time.Duration {
	half := time.Duration(l.runsFor(q) / 2)
	return half*(l.cfg.ClosedWindow+l.runOverhead()) + half*(l.openFloor()+l.runOverhead())
}

// planRows funds the CPU study's rows in rowOrder while their minimum runs
// fit in the CPU budget less the adaptive reserve. A row that does not fit
// is not started: with fewer than stats.MinRuns runs a side its
// comparisons could only be undecided, and the time is better spent
// deciding the rows before it. Each left-out row is named in
// lab.not_compared with what it would have taken.
func (l *study) planRows() []float64 {
	avail := time.Duration(float64(l.cpuBudget())*(1-adaptiveReserve)) - l.elapsed()
	var funded []float64
	var spent time.Duration
	for _, q := range l.rowOrder() {
		cost := l.minRowCost(q)
		if spent+cost <= avail {
			funded = append(funded, q)
			spent += cost
			continue
		}
		l.cutRow(q, avail-spent, spent+cost)
	}
	return funded
}

// cutRow records that row q is not compared: left is what the budget had
// for it, need what the funded rows and this one would have cost.
func (l *study) cutRow(q float64, left, need time.Duration) {
	perRun := l.minRowCost(q) / time.Duration(l.cfg.MinRepeats)
	funds := 0
	if left > 0 && perRun > 0 {
		funds = int(left / perRun)
	}
	// The budget whose CPU share, less the reserve, covers need.
	budget := time.Duration(float64(need) / (1 - adaptiveReserve) / cpuShare)
	budget = (budget + time.Minute - 1).Truncate(time.Minute)
	msg := fmt.Sprintf("not compared at %s: the budget funds %d of the %d runs a verdict needs (--budget %v would fund them)",
		rowLabel(q, l.requestAt(q)), min(funds, l.cfg.MinRepeats), l.cfg.MinRepeats, budget)
	l.rec.Lab.NotCompared = append(l.rec.Lab.NotCompared, msg)
	l.budgetNote("%s", msg)
}

// planOpenWindow is the open-loop window per run at rate for row q, the
// i-th of the funded rows: what OpenSamples needs, cut so that the minimum
// open runs of this and every later funded row, and the closed runs of the
// later ones, fit in the CPU study's time less the adaptive reserve. It
// never goes under openFloor: below it, runs could not carry a verdict.
func (l *study) planOpenWindow(rows []float64, i int, rate float64) time.Duration {
	want := l.openWindow(rate)
	if l.cfg.OpenDuration > 0 {
		return want
	}
	var closedLater time.Duration
	openRuns := 0
	for j, q := range rows[i:] {
		n := l.runsFor(q) / 2
		openRuns += n
		if j > 0 {
			closedLater += time.Duration(n) * (l.cfg.ClosedWindow + l.runOverhead())
		}
	}
	left := time.Duration(float64(l.cpuBudget())*(1-adaptiveReserve)) - l.elapsed() - closedLater
	fit := left/time.Duration(max(openRuns, 1)) - l.runOverhead()
	if fit >= want {
		return want
	}
	win := max(fit, l.openFloor()).Round(100 * time.Millisecond)
	l.budgetNote("open loop at %s: %v windows (%d latencies per cell at %.0f rps) instead of the %v that %d latencies need; p99 intervals are wider",
		rowLabel(rows[i], l.requestAt(rows[i])), win, int(rate*win.Seconds())*l.cfg.MinRepeats, rate, want, l.cfg.OpenSamples)
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
func (l *study) memTrialsPlanned() int {
	if l.cfg.ConfirmOf <= 1 {
		return 6
	}
	return 6 + l.cfg.ConfirmOf*max(l.cfg.ConfirmSpan, 1)
}

// survivalTrialsMax bounds one survival search: what is planned, and as
// many again for an edge that does not hold and the climb past it.
func (l *study) survivalTrialsMax() int {
	return max(16, 2*l.memTrialsPlanned())
}

// planMemory sizes the survival trials to the time left, from the probes'
// throughput: the same request count for every trial, so their peaks
// compare, and no more than a third of each setting's share (the healthy
// search gets the rest, memory.go) per planned trial allows.
func (l *study) planMemory(probeRPS, probeSeconds float64) memPlan {
	p := memPlan{requests: l.cfg.MemRequests}
	if probeRPS <= 0 {
		return p
	}
	left := l.cfg.Budget - l.elapsed() - l.checkReserve()
	trials := len(l.cfg.MemSettings) * l.memTrialsPlanned()
	per := left / 3 / time.Duration(max(trials, 1))
	// A trial's start-up and stop cost what the probes' did beyond their
	// load.
	overhead := time.Duration(max(probeSeconds-float64(l.cfg.MemRequests)/probeRPS, 0.5) * float64(time.Second))
	if n := int(probeRPS * (per - overhead).Seconds()); n < p.requests {
		p.requests = max(n, minMemRequests)
		l.budgetNote("survival trials of %d requests instead of %d: at %.0f rps, %d trials in a third of the %v left need it; peaks and floors rest on a shorter load",
			p.requests, l.cfg.MemRequests, probeRPS, trials, left.Round(time.Second))
	}
	// A trial that takes four times its plan is cut there: a target that
	// slow at this limit is not healthy.
	p.maxTrial = max(4*time.Duration(float64(p.requests)/probeRPS*float64(time.Second)), 5*time.Second)
	return p
}

// defaultCheckReserve is the time kept back for the check trial until
// the health trials have measured what a pair costs.
const defaultCheckReserve = 20 * time.Second

// pairCost is what one health pair (a reference and a limited run side by
// side, started cold) has cost so far: the mean over every pair run, or
// the health window plus the probes' start-up before any.
func (l *study) pairCost() time.Duration {
	if l.pairN == 0 {
		return l.cfg.HealthWindow + 2*time.Second
	}
	return l.pairSum / time.Duration(l.pairN)
}

// checkReserve is the time kept back from the budget for the check trial:
// the pairs it needs before its interval may decide, at what pairs have
// cost so far (a slow target's start-up makes them dearer).
func (l *study) checkReserve() time.Duration {
	return max(defaultCheckReserve, time.Duration(l.cfg.HealthPairs)*l.pairCost())
}

// minMemRequests is the fewest requests a survival trial sends.
const minMemRequests = 50

// probeCap is the time cap of one unlimited memory probe: a slow target
// must not spend the memory study on its probes.
func (l *study) probeCap() time.Duration {
	left := l.cfg.Budget - l.elapsed() - l.checkReserve()
	return max(left/time.Duration(5*max(l.cfg.Probes, 1)), 5*time.Second)
}

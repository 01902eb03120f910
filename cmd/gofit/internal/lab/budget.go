package lab

import (
	"fmt"
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
const cpuShare = 0.45

// minOpenWindow is the shortest open-loop window the planner cuts to: 20
// CFS periods. Below it a window says little about a quota.
const minOpenWindow = 2 * time.Second

// cpuBudget is the part of the budget the CPU study may spend, adaptive
// repeats included; the memory study needs the rest.
func (l *Lab) cpuBudget() time.Duration {
	return time.Duration(float64(l.cfg.Budget) * cpuShare)
}

// elapsed is the study's wall time so far, statistics included.
func (l *Lab) elapsed() time.Duration { return l.now().Sub(l.started) }

// budgetNote records that the budget cut a phase short.
func (l *Lab) budgetNote(format string, a ...any) {
	l.res.Lab.BudgetLimited = true
	l.note(&l.res.Lab.BudgetNotes, "budget", fmt.Sprintf(format, a...))
}

// runOverhead is what a CPU run costs besides its window: start, warm-up,
// reads, statistics. Measured from the runs so far.
func (l *Lab) runOverhead() time.Duration {
	if l.overheadRuns == 0 {
		return l.cfg.Warmup + time.Second
	}
	return l.overheadSum / time.Duration(l.overheadRuns)
}

// planOpenWindow is the open-loop window per run at rate for the quota
// at index qi: what OpenSamples needs, cut so that the minimum open runs
// of this and every later quota, and the closed runs of the later ones,
// fit in the CPU study's time left.
func (l *Lab) planOpenWindow(qi int, rate float64, configs int) time.Duration {
	want := l.openWindow(rate)
	if l.cfg.OpenDuration > 0 {
		return want
	}
	later := len(l.cfg.Quotas) - qi - 1
	runs := float64(configs * l.cfg.MinRepeats)
	closedLater := time.Duration(float64(later)*runs) * (l.cfg.ClosedWindow + l.runOverhead())
	left := l.cpuBudget() - l.elapsed() - closedLater
	openRuns := float64(later+1) * runs
	fit := time.Duration(float64(left)/openRuns) - l.runOverhead()
	if fit >= want {
		return want
	}
	win := max(fit, minOpenWindow).Round(100 * time.Millisecond)
	l.budgetNote("open loop at %s: %v windows (%d latencies per cell at %.0f rps) instead of the %v that %d latencies need; p99 intervals are wider",
		millicores(l.cfg.Quotas[qi]), win, int(rate*win.Seconds())*l.cfg.MinRepeats, rate, want, l.cfg.OpenSamples)
	return win
}

// memPlan is the memory study's plan: requests per trial and a time cap
// per trial.
type memPlan struct {
	requests int
	maxTrial time.Duration
	end      time.Time // the memory study's end, the check trial kept back
}

// memTrialsPlanned is how many trials the memory study expects per
// setting (survival and healthy searches with their confirmations).
func (l *Lab) memTrialsPlanned() int {
	if l.cfg.ConfirmOf <= 1 {
		return 8
	}
	return 12
}

// planMemory sizes memory trials to the time left, from the probes'
// throughput: the same request count for every trial, so their peaks
// compare, and no more than the time left per planned trial allows.
func (l *Lab) planMemory(probeRPS float64, probeSeconds float64) memPlan {
	end := l.started.Add(l.cfg.Budget - l.checkReserve())
	left := end.Sub(l.now())
	trials := len(l.cfg.MemSettings) * l.memTrialsPlanned()
	per := left / time.Duration(max(trials, 1))
	p := memPlan{requests: l.cfg.MemRequests, end: end}
	// A trial's start-up and stop cost what the probes' did beyond their
	// load.
	overhead := time.Duration(max(probeSeconds-float64(l.cfg.MemRequests)/max(probeRPS, 1e-9), 0.5) * float64(time.Second))
	if probeRPS > 0 {
		if n := int(probeRPS * (per - overhead).Seconds()); n < p.requests {
			p.requests = max(n, minMemRequests)
			l.budgetNote("memory trials of %d requests instead of %d: at %.0f rps, %d trials in the %v left need it; peaks and floors rest on a shorter load",
				p.requests, l.cfg.MemRequests, probeRPS, trials, left.Round(time.Second))
		}
		// A trial that takes four times its plan is cut there: a target
		// that slow at this limit is not healthy.
		p.maxTrial = max(4*time.Duration(float64(p.requests)/probeRPS*float64(time.Second)), 5*time.Second)
	}
	return p
}

// minMemRequests is the fewest requests a memory trial sends.
const minMemRequests = 50

// probeCap is the time cap of one unlimited memory probe: a slow target
// must not spend the memory study on its probes.
func (l *Lab) probeCap() time.Duration {
	left := l.cfg.Budget - l.elapsed() - l.checkReserve()
	return max(left/time.Duration(5*max(l.cfg.Probes, 1)), 5*time.Second)
}

// checkReserve is the time kept back for the check trial: what a memory
// trial took so far, or a fixed guess before any ran.
func (l *Lab) checkReserve() time.Duration {
	if l.memTrialSeconds.n == 0 {
		return defaultCheckReserve
	}
	return max(time.Duration(l.memTrialSeconds.sum/float64(l.memTrialSeconds.n)*1.5*float64(time.Second)), 5*time.Second)
}

// defaultCheckReserve is the check trial's reserve before any memory trial
// has shown how long one takes.
const defaultCheckReserve = 20 * time.Second

// allowTrial is a FloorSearch.Allow: one more memory trial fits before
// until.
func (l *Lab) allowTrial(setting string, until time.Time) func() bool {
	return func() bool {
		next := l.checkReserve() * 2 / 3 // one trial
		if l.now().Add(next).After(until) {
			l.budgetNote("the memory search of %s stopped at its share of the budget; its floor is the lowest limit that passed so far", setting)
			return false
		}
		return true
	}
}

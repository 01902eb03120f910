package lab

import (
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

// trialCosts is the budget planner's prices: what the study's runs have
// cost so far (CPU runs beyond their window, memory trials, health
// pairs), told by the study as each ends, and what the next one will
// cost by that measure.
type trialCosts struct {
	cfg *Config // the study's configuration, read only
	// startHint is what the runner says a trial's start costs before any
	// trial measured it (the pod runner: its load pod's start); 0: none.
	startHint time.Duration
	// What runs have cost so far: CPU runs beyond their window, and
	// health pairs.
	overheadSum  time.Duration
	overheadRuns int
	pairSum      time.Duration
	pairN        int
	// What memory trials have cost so far, each start to stop.
	memSum time.Duration
	memN   int
	// The last CPU run's cost beside its window and the last memory
	// trial's: a node that gets busier midway makes every trial after
	// dearer, and the mean since the start would lag behind (kube/e2e's
	// lab-pods, 2026-12-07: planned at 28 s a trial, 7 minutes over an
	// 8-minute budget).
	lastOverhead, lastMem time.Duration
}

// ranCPU tells the planner what a CPU run cost besides its window.
func (c *trialCosts) ranCPU(overhead time.Duration) {
	c.overheadSum += max(overhead, 0)
	c.overheadRuns++
	c.lastOverhead = max(overhead, 0)
}

// ranMemory tells the planner what a memory trial cost, start to stop.
func (c *trialCosts) ranMemory(took time.Duration) {
	c.memSum += max(took, 0)
	c.memN++
	c.lastMem = max(took, 0)
}

// ranPair tells the planner what a health pair cost.
func (c *trialCosts) ranPair(took time.Duration) {
	c.pairSum += took
	c.pairN++
}

// runOverhead is what a CPU run costs besides its window: start, warm-up,
// reads, statistics. Measured from the runs so far: their mean or the
// last, whichever is more.
func (c *trialCosts) runOverhead() time.Duration {
	if c.overheadRuns == 0 {
		return c.cfg.Warmup + max(c.startHint, time.Second)
	}
	return max(c.overheadSum/time.Duration(c.overheadRuns), c.lastOverhead)
}

// trialStart is what a trial costs besides its load: starting the
// target (a pod, on a cluster), and stopping it. Measured from the CPU
// runs (less their warm-up) once there are any, else the runner's own
// measure (startHint), else a second.
func (c *trialCosts) trialStart() time.Duration {
	if c.overheadRuns > 0 {
		return max(c.runOverhead()-c.cfg.Warmup, 500*time.Millisecond)
	}
	return max(c.startHint, time.Second)
}

// memTrialCost is what one memory trial costs: the mean of those run so
// far or the last, whichever is more, else a start and a closed-loop
// window's load.
func (c *trialCosts) memTrialCost() time.Duration {
	if c.memN > 0 {
		return max(c.memSum/time.Duration(c.memN), c.lastMem)
	}
	return c.trialStart() + c.cfg.ClosedWindow
}

// pairCost is what one health pair (a reference and a limited run side by
// side, started cold) has cost so far: the mean over every pair run, or
// before any the health window and two starts (on one trial node a
// pair's pods start one after the other).
func (c *trialCosts) pairCost() time.Duration {
	if c.pairN == 0 {
		return c.cfg.HealthWindow + 2*c.trialStart()
	}
	return c.pairSum / time.Duration(c.pairN)
}

// rowCosts prices the CPU study's rows on this runner: a row's rounds go
// out in batches of the runner's parallelism, each run at what
// trialCosts says a run costs now.
type rowCosts struct {
	cfg   *Config // the study's configuration, read only
	costs *trialCosts
	// parallel is how many trials the runner runs at once (runner
	// parallelism: 1 locally, a cluster's trial nodes with --kube).
	parallel int
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
// MinRepeats rounds of its cells, each round going out parallel cells
// at a time (one per node on a cluster), so a round of 4 cells on 3
// nodes is 2 batches, not 4/3.
func (c *rowCosts) batches(r cpuRow) int {
	n := max(c.parallel, 1)
	return max(c.cfg.MinRepeats, 1) * ((r.cells + n - 1) / n)
}

// minCost is what a row's minimum runs cost at the shortest open-loop
// window: what the row needs before any of its verdicts can be decided.
func (c *rowCosts) minCost(r cpuRow) time.Duration {
	// Its wall time is that of its batches.
	half := time.Duration(c.batches(r))
	return half*(c.cfg.ClosedWindow+c.costs.runOverhead()) + half*(openFloor(c.cfg)+c.costs.runOverhead())
}

// roundsCost is what closed and open rounds of row r cost.
func (c *rowCosts) roundsCost(r cpuRow, closed, open int) time.Duration {
	n := max(c.parallel, 1)
	b := time.Duration((r.cells + n - 1) / n)
	return time.Duration(closed)*b*(c.cfg.ClosedWindow+c.costs.runOverhead()) + time.Duration(open)*b*(openFloor(c.cfg)+c.costs.runOverhead())
}

// repeatCost is what one more run of cell k costs: its mean window so
// far (the design's estimate, runCost) plus what a run has cost besides
// its window, where that is more (a pod's start on a cluster).
func (c *rowCosts) repeatCost(d cpuDesign, cells []result.CPUCell, k cellKey) time.Duration {
	est := d.runCost(cells, k)
	win := c.cfg.ClosedWindow
	if runs := runsOf(cells, k); len(runs) > 0 {
		var s float64
		for _, r := range runs {
			s += r.Seconds
		}
		win = time.Duration(s / float64(len(runs)) * float64(time.Second))
	}
	return max(est, win+c.costs.runOverhead())
}

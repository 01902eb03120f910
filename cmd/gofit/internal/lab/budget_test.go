package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
)

// A slow target (node_exporter at 250m: ~25 rps closed loop, 15 rps
// offered) used to wait 333 s per open-loop cell for 5,000 latencies. The
// planner cuts the open windows to what the CPU study's share of the
// budget allows, says so, and the study ends within that share plus one
// run.
func TestSlowTargetFitsTheBudget(t *testing.T) {
	l, f := newFakeLab(t, 4*time.Minute)
	l.cfg.Quotas = []float64{0.25}
	l.cfg.CPUSettings = []string{result.SetProcs1, result.SetGoDefault, result.SetGofit}
	f.rps = map[string]float64{result.SetGoDefault: 25, result.SetGofit: 25, result.SetProcsNCPU: 25}
	var windows []time.Duration
	inner := f.measure
	fakeOf(l).measure = func(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
		if mode == result.Open {
			windows = append(windows, window)
		}
		return inner(ctx, c, mode, offered, window, rep)
	}
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(windows) == 0 {
		t.Fatal("no open-loop run")
	}
	want := openWindow(&l.cfg, 15)
	for _, w := range windows {
		if w >= want {
			t.Errorf("open window %v: the %v that 5,000 latencies at 15 rps need does not fit a 4m budget", w, want)
		}
	}
	if took, most := l.elapsed(), l.plan.cpuBudget()+l.cfg.ClosedWindow+l.cfg.Warmup+time.Second; took > most {
		t.Errorf("the CPU study took %v of the fake clock, want at most its share %v plus one run", took, l.plan.cpuBudget())
	}
	if !l.rec.Lab.BudgetLimited || !strings.Contains(strings.Join(l.rec.Lab.BudgetNotes, "\n"), "open loop at 250m") {
		t.Errorf("budget_limited %v, notes %q: want a note on the open loop", l.rec.Lab.BudgetLimited, l.rec.Lab.BudgetNotes)
	}
}

// Survival trials of a slow target are sized to the time left: fewer
// requests, the same for every trial, and a note; a fast target keeps
// them all.
func TestPlanMemoryForASlowTarget(t *testing.T) {
	l, f := newFakeLab(t, 4*time.Minute)
	l.cfg.MemSettings = []string{result.SetGofit, result.SetAutoMemLimit}
	l.cfg.ConfirmNeed, l.cfg.ConfirmOf, l.cfg.MemRequests = 1, 1, 800
	f.now = f.now.Add(110 * time.Second) // the CPU study's share spent
	p := l.plan.mem.planSurvival(25, 40) // node_exporter: 25 rps, 800 requests took ~40 s
	if p.requests >= l.cfg.MemRequests || p.requests < minMemRequests {
		t.Errorf("%d requests per survival trial at 25 rps with ~110 s left", p.requests)
	}
	trials := time.Duration(len(l.cfg.MemSettings) * memTrialsPlanned(l.cfg))
	if total, left := trials*time.Duration(float64(p.requests)/25*float64(time.Second)), l.cfg.Budget-l.elapsed()-l.plan.mem.checkReserve(); total > left/3 {
		t.Errorf("planned survival trials take %v of load, over a third of the %v left", total, left)
	}
	if !l.rec.Lab.BudgetLimited {
		t.Error("no budget note")
	}
	l2, _ := newFakeLab(t, 15*time.Minute)
	if p := l2.plan.mem.planSurvival(5000, 1.5); p.requests != l2.cfg.MemRequests || l2.rec.Lab.BudgetLimited {
		t.Errorf("fast target: %d requests, budget_limited %v", p.requests, l2.rec.Lab.BudgetLimited)
	}
}

// The three settings the study compares get the memory budget first:
// with equal shares, GOGC=off's climb once cut gofit's healthy search.
func TestMemShareComparedFirst(t *testing.T) {
	all := []string{result.SetGofit, result.SetNone, result.SetAutoMemLimit, result.SetLimitGCOff}
	for _, c := range []struct {
		settings []string
		want     time.Duration
	}{
		{all, 30 * time.Minute},     // gofit: a third, not a quarter
		{all[2:], 90 * time.Minute}, // automemlimit: all, GOGC=off after it
		{all[3:], 90 * time.Minute}, // GOGC=off: what the others left
		{[]string{result.SetLimitGCOff, result.SetGofit}, 45 * time.Minute},
		{nil, 90 * time.Minute},
	} {
		if got := memShare(90*time.Minute, c.settings); got != c.want {
			t.Errorf("share of %v: %v, want %v", c.settings, got, c.want)
		}
	}
	if got := memShare(-time.Minute, all); got != 0 {
		t.Errorf("share of an overspent budget: %v, want 0", got)
	}
}

// The planner is asked without a study: it funds rows in the order given
// while their minimum runs fit, names the rest in not_compared, and
// prices runs from what they have cost.
func TestPlannerFundsRowsInOrder(t *testing.T) {
	cfg := defaultConfig(true)
	var lab result.LabInfo
	p := newPlanner(&cfg, func() time.Duration { return 0 }, &lab)
	if got := p.costs.runOverhead(); got != cfg.Warmup+time.Second {
		t.Errorf("overhead before any run %v, want warm-up + 1s", got)
	}
	p.costs.ranCPU(5 * time.Second)
	p.costs.ranCPU(3 * time.Second)
	if got := p.costs.runOverhead(); got != 4*time.Second {
		t.Errorf("overhead after runs of 5s and 3s: %v, want their mean, 4s", got)
	}
	// A run dearer than the mean prices the next ones: the node got
	// busier (TestSlowerPodsMidwayKeepTheBudget).
	p.costs.ranCPU(7 * time.Second)
	if got := p.costs.runOverhead(); got != 7*time.Second {
		t.Errorf("overhead after runs of 5s, 3s and 7s: %v, want the last, 7s", got)
	}
	p.costs.overheadSum, p.costs.overheadRuns, p.costs.lastOverhead = 8*time.Second, 2, 3*time.Second
	rows := []cpuRow{{q: 0.5, cells: 3, label: "500m"}, {q: 0.25, cells: 3, label: "250m"}, {q: 1, cells: 3, label: "1000m"}}
	cost := p.rows.minCost(rows[0])
	// The CPU study's share less the adaptive reserve holds a row and a half.
	cfg.Budget = time.Duration(1.5 * float64(cost) / (1 - adaptiveReserve) / cpuShare)
	funded := p.planRows(rows)
	if len(funded) != 1 || funded[0].q != 0.5 {
		t.Errorf("funded %+v, want the first row only", funded)
	}
	if len(lab.NotCompared) != 2 || !strings.Contains(lab.NotCompared[0], "at 250m") || !strings.Contains(lab.NotCompared[1], "at 1000m") || !lab.BudgetLimited {
		t.Errorf("not compared %q, budget_limited %v", lab.NotCompared, lab.BudgetLimited)
	}
	// Three trial nodes run a round's three cells side by side: a row
	// costs a third, and the same budget holds all three rows.
	p.rows.parallel = 3
	if got := p.rows.minCost(rows[0]); got != cost/3 {
		t.Errorf("a row of 3 cells on 3 nodes costs %v, want a third of %v", got, cost)
	}
	if funded := p.planRows(rows); len(funded) != 3 {
		t.Errorf("on 3 nodes funded %d rows, want 3", len(funded))
	}
	// Rounds are not pooled: each of a row's MinRepeats rounds of 4 cells
	// on 3 nodes is 2 batches (3 cells, then 1), so its minimum is 6
	// batches a mode, not the 4 that 12 runs over 3 nodes would be.
	if got := p.rows.batches(cpuRow{q: 1, cells: 4}); got != 2*cfg.MinRepeats {
		t.Errorf("4 cells on 3 nodes: %d batches a mode, want %d", got, 2*cfg.MinRepeats)
	}
}

// TestOpenWindowNotesOnlyACut: a window at the floor that is also all
// OpenSamples needs was not cut, and the report must not say it was (a
// default run of the sample said "5s windows instead of the 5s that 5000
// latencies need" at 500m and 1000m).
func TestOpenWindowNotesOnlyACut(t *testing.T) {
	cfg := defaultConfig(false)
	var lab result.LabInfo
	elapsed := cfg.Budget // the CPU study's time is gone: every window is cut to the floor
	p := newPlanner(&cfg, func() time.Duration { return elapsed }, &lab)
	rows := []cpuRow{{q: 0.5, cells: 2, label: "500m"}}
	if got := p.planOpenWindow(rows, 0, 2000); got != cfg.MinOpenWindow || len(lab.BudgetNotes) != 0 || lab.BudgetLimited {
		t.Errorf("at 2000 rps: window %v, notes %q; want %v and no note", got, lab.BudgetNotes, cfg.MinOpenWindow)
	}
	if got := p.planOpenWindow(rows, 0, 50); got != cfg.MinOpenWindow || len(lab.BudgetNotes) != 1 || !strings.Contains(lab.BudgetNotes[0], "instead of the 33.4s") {
		t.Errorf("at 50 rps: window %v, notes %q; want %v, cut from 33.4s", got, lab.BudgetNotes, cfg.MinOpenWindow)
	}
}

// The memory study's minimum is kept back from the CPU study, priced at
// what a trial's start costs on the runner: on this machine (a second)
// the CPU study keeps its half of --quick's 4 minutes; at a pod's 40 s
// start, 13 minutes leave the CPU study what the reserve does not take,
// and the --budget named to fund a row covers the reserve too.
func TestPlannerKeepsTheMemoryReserve(t *testing.T) {
	cfg := defaultConfig(true)
	var lab result.LabInfo
	p := newPlanner(&cfg, func() time.Duration { return 0 }, &lab)
	if got, want := p.cpuBudget(), cfg.Budget/2; got != want {
		t.Errorf("sandbox, 4m: CPU budget %v, want %v (reserve %v)", got, want, p.mem.reserve())
	}
	cfg.Budget = 13 * time.Minute
	p.costs.startHint = 40 * time.Second
	reserve := p.mem.reserve()
	// 2 probes and 4 survival trials at a start and a window each, and
	// the check trial's 2 pairs of two starts each.
	if want := 6*(40*time.Second+cfg.ClosedWindow) + 2*(cfg.HealthWindow+80*time.Second); reserve != want {
		t.Errorf("reserve at 40 s a start: %v, want %v", reserve, want)
	}
	if got := p.cpuBudget(); got != cfg.Budget-reserve || got >= cfg.Budget/2 {
		t.Errorf("pods, 13m: CPU budget %v, want the %v the reserve %v leaves", got, cfg.Budget-reserve, reserve)
	}
	row := cpuRow{q: 0.25, cells: 2, label: "250m"}
	if k := p.repeatsFit(row, time.Duration(float64(p.cpuBudget())*(1-adaptiveReserve)), 0); k != 1 {
		t.Errorf("%d rounds of 250m fit, want 1", k)
	}
	need := p.rows.roundsCost(row, cfg.MinRepeats, cfg.MinRepeats)
	if b := p.budgetFor(need); time.Duration(float64(b-p.mem.reserve())*(1-adaptiveReserve)) < need || time.Duration(float64(b)*cpuShare*(1-adaptiveReserve)) < need {
		t.Errorf("--budget %v named to fund %v of CPU runs and a %v reserve does not", b, need, p.mem.reserve())
	}
}

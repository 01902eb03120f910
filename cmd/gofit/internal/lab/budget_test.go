package lab

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The memory search asks the planner before every trial; once the
// setting's share of the budget is spent it stops with the lowest limit
// that passed, and the study notes that the budget cut it.
func TestFloorSearchStopsAtTheBudget(t *testing.T) {
	l, f := newFakeLab(t, 4*time.Minute)
	tr := &fake{floor: 37 * mib}
	until := f.now.Add(50 * time.Second)
	s := FloorSearch{Lo: 8 * mib, Hi: 128 * mib, Max: 512 * mib, Resolution: mib, Need: 1, Of: 1,
		Allow: l.allowTrial("gofit", until)}
	floor, trials, err := s.Find(context.Background(), func(ctx context.Context, limit int64) MemTrial {
		f.now = f.now.Add(10 * time.Second) // each trial takes 10 s
		return tr.run(ctx, limit)
	})
	if err != nil {
		t.Fatal(err)
	}
	// 20 s reserve (two thirds of it per trial) and 10 s trials: the
	// trials that start before 50 s minus ~13 s, four of them.
	if len(trials) == 0 || len(trials) > 4 {
		t.Errorf("%d trials in a 50 s allowance of 10 s trials", len(trials))
	}
	if floor < 37*mib || floor > 128*mib {
		t.Errorf("floor %d MiB: want the lowest limit that passed, at or above the true 37 MiB", floor/mib)
	}
	if !l.res.Lab.BudgetLimited || !strings.Contains(strings.Join(l.res.Lab.BudgetNotes, " "), "memory search of gofit") {
		t.Errorf("budget_limited %v, notes %q", l.res.Lab.BudgetLimited, l.res.Lab.BudgetNotes)
	}
}

// Memory trials of a slow target are sized to the time left: fewer
// requests, the same for every trial, and a note.
func TestPlanMemoryForASlowTarget(t *testing.T) {
	l, f := newFakeLab(t, 4*time.Minute)
	l.cfg = DefaultConfig(true)
	l.started = f.now
	f.now = f.now.Add(110 * time.Second) // the CPU study's share spent
	p := l.planMemory(25, 40)            // node_exporter: 25 rps, 800 requests took ~40 s
	if p.requests >= l.cfg.MemRequests || p.requests < minMemRequests {
		t.Errorf("%d requests per memory trial at 25 rps with ~110 s left for %d trials", p.requests, len(l.cfg.MemSettings)*l.memTrialsPlanned())
	}
	total := time.Duration(len(l.cfg.MemSettings)*l.memTrialsPlanned()) * time.Duration(float64(p.requests)/25*float64(time.Second))
	if left := p.end.Sub(f.now); total > left {
		t.Errorf("planned trials take %v of load, over the %v left", total, left)
	}
	if !l.res.Lab.BudgetLimited {
		t.Error("no budget note")
	}
	// A fast target keeps the full request count.
	l2, _ := newFakeLab(t, 15*time.Minute)
	if p := l2.planMemory(5000, 1.5); p.requests != l2.cfg.MemRequests || l2.res.Lab.BudgetLimited {
		t.Errorf("fast target: %d requests, budget_limited %v", p.requests, l2.res.Lab.BudgetLimited)
	}
}

// When the budget leaves no trial for the healthy search, the lowest limit
// the survival search found healthy stands in for the healthy floor.
func TestLowestHealthy(t *testing.T) {
	trials := []MemTrial{{LimitBytes: 52 * mib, Outcome: OK, Healthy: true}, {LimitBytes: 12 * mib, Outcome: Stalled},
		{LimitBytes: 32 * mib, Outcome: OK, Healthy: true}, {LimitBytes: 24 * mib, Outcome: OK}}
	if got := lowestHealthy(trials); got != 32*mib {
		t.Errorf("lowest healthy limit %d MiB, want 32", got/mib)
	}
	if got := lowestHealthy(trials[1:2]); got != 0 {
		t.Errorf("no healthy trial: %d", got)
	}
}

package lab

import (
	"bytes"
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// slowPods is a runner whose every trial starts as slowly as a pod on
// the emulated e2e node (tens of seconds from creation to Ready), on one
// trial node: the CPU cells are fakeCPU's and the memory trials
// fakeMem's, each after its start, on one fake clock.
type slowPods struct {
	cpuF  *fakeCPU
	memF  *fakeMem
	clock *time.Time
	start time.Duration // each trial pod's start and deletion
	hint  time.Duration // the load pod's start, before any trial
	// limited counts the trials that ran under a memory limit.
	limited int
}

func (s *slowPods) where() string                { return "slow pods" }
func (s *slowPods) startCost() time.Duration     { return s.hint }
func (s *slowPods) advance(d time.Duration)      { *s.clock = s.clock.Add(d); s.cpuF.now = *s.clock }
func (s *slowPods) sync()                        { *s.clock = s.cpuF.now }
func (s *slowPods) elapsedSince(t time.Time) int { return int(s.clock.Sub(t).Seconds()) }

func (s *slowPods) cpu(ctx context.Context, c cpuConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	s.advance(s.start)
	cell, err := s.cpuF.measure(ctx, c, mode, offered, window, rep)
	s.sync()
	return cell, err
}

func (s *slowPods) memory(ctx context.Context, specs ...memSpec) []memRun {
	out := make([]memRun, len(specs))
	for i, sp := range specs {
		// One trial node: a pair's two pods start one after the other.
		began := *s.clock
		s.advance(s.start)
		if sp.limit > 0 {
			s.limited++
		}
		t, r := s.memF.run(ctx, sp.env, sp.cpu, sp.limit, sp.load)
		s.cpuF.now = *s.clock
		t.Seconds = s.clock.Sub(began).Seconds()
		out[i] = memRun{trial: t, load: r}
	}
	return out
}

// The quick study on one slow node (issue 57: `gofit lab --kube --quick
// --budget 13m` spent 864 s and wrote one memory setting with no limited
// trial): the planner keeps the memory study's minimum back from the
// start, says before the first trial that the budget cannot fund both
// studies and which --budget would, and the records hold limited
// trials behind every memory figure.
func TestSlowPodsKeepTheMemoryStudy(t *testing.T) {
	cfg := defaultConfig(true)
	cfg.Budget = 13 * time.Minute
	cfg.Resamples = 150
	var progress bytes.Buffer
	cfg.Progress = &progress
	l := newLab(cfg)
	l.rec.NCPU = 2
	clock := time.Unix(0, 0)
	cf := &fakeCPU{rng: rand.New(rand.NewSource(3)), now: clock, runs: map[string]int{}, rates: map[float64][]float64{},
		rps:   map[string]float64{result.SetGoDefault: 300, result.SetGofit: 330, result.SetProcs1: 330},
		noise: map[string]float64{result.SetGoDefault: 0.05, result.SetGofit: 0.05, result.SetProcs1: 0.05},
		ms:    map[string]float64{result.SetGoDefault: 10, result.SetGofit: 8, result.SetProcs1: 8}}
	mf := &fakeMem{rng: rand.New(rand.NewSource(3)), floor: 24 * mib, edge: 32 * mib, peak: 40 * mib, base: 5, mood: 0.1, own: 0.05, clock: &clock}
	run := &slowPods{cpuF: cf, memF: mf, clock: &clock, start: 45 * time.Second, hint: 40 * time.Second}
	l.started = clock
	l.now = func() time.Time { return clock }
	l.run = run
	res, rec, err := l.execute(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	took := clock.Sub(l.started)
	t.Logf("%v of fake time, %d CPU cells, %d limited memory trials\n%s", took, len(rec.CPU), run.limited, progress.String())

	// Said at the start: before the first trial, naming the flag.
	out := progress.String()
	say, first := strings.Index(out, "--budget 13m0s funds"), strings.Index(out, "lab [")
	if say < 0 || first >= 0 && say > first {
		t.Errorf("the budget's shortfall is not said before the first trial (at %d, first trial at %d)", say, first)
	}
	if !strings.Contains(out, "would fund both") {
		t.Errorf("no --budget that would fund both studies is named")
	}
	if len(rec.CPU) == 0 {
		t.Fatal("no CPU cell: the memory trials have no CPU limit to run under")
	}
	// The memory study's minimum ran, under memory limits.
	if len(rec.Memory) == 0 {
		t.Fatal("no memory study")
	}
	if n := len(rec.Memory[0].Survival); n < memMinSurvival {
		t.Errorf("%s: %d limited survival trials, want at least %d", rec.Memory[0].Setting, n, memMinSurvival)
	}
	// No memory figure without limited trials behind it.
	for _, m := range res.Memory {
		if m.FloorBytes != nil && len(m.Trials) == 0 || m.HealthyFloorBytes != nil && len(m.HealthyTrials) == 0 {
			t.Errorf("%s: a floor without a limited trial", m.Setting)
		}
	}
	if r := res.Recommendation; r.MemoryLimitBytes > 0 && !strings.Contains(strings.Join(r.Reasons, "\n"), "trials") {
		t.Errorf("a memory recommendation without the trials it rests on: %q", r.Reasons)
	}
	// Within the budget and the memory study's minimum past it.
	if most := cfg.Budget + 2*(run.start+10*time.Second); took > most {
		t.Errorf("the study took %v of a %v budget", took, cfg.Budget)
	}
	_ = load.Result{}
}

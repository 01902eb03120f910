package lab

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// fakeRunner is the tests' runner: scripted trials, no processes.
type fakeRunner struct {
	measure func(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error)
	// mem runs one memory trial; pair a health pair.
	mem  func(ctx context.Context, env map[string]string, cpu float64, limit int64, ml trial.MemLoad) (result.MemTrial, load.Result)
	pair func(ctx context.Context, ref, env map[string]string, cpu float64, limit int64, ml trial.MemLoad) (result.MemTrial, load.Result, result.MemTrial, load.Result)
}

func (f *fakeRunner) CPU(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	return f.measure(ctx, c, mode, offered, window, rep)
}

func (f *fakeRunner) Memory(ctx context.Context, specs ...trial.MemSpec) []trial.MemRun {
	if len(specs) == 2 {
		l, ref := specs[0], specs[1]
		rt, rr, lt, lr := f.pair(ctx, ref.Env, l.Env, l.CPU, l.Limit, l.Load)
		return []trial.MemRun{{Trial: lt, Load: lr}, {Trial: rt, Load: rr}}
	}
	s := specs[0]
	t, r := f.mem(ctx, s.Env, s.CPU, s.Limit, s.Load)
	return []trial.MemRun{{Trial: t, Load: r}}
}

func (f *fakeRunner) Info() trial.Info   { return trial.Info{} }
func (f *fakeRunner) Where() trial.Where { return trial.Where{Runner: "fake"} }

// fakeOf is l's fake runner.
func fakeOf(l *study) *fakeRunner { return l.run.(*fakeRunner) }

// healthVerdict is l.healthTrial's verdict alone.
func healthVerdict(l *study, ctx context.Context, ref, env map[string]string, cpu float64, limit int64) result.MemTrial {
	t, _ := l.healthTrial(ctx, "test", ref, env, cpu, limit)
	return t
}

// parFake is a runner of par trials at once: each CPU run takes a
// moment, counts how many were in flight, and measures what its
// (setting, mode, repeat) always measures.
type parFake struct {
	par      int
	inFlight atomic.Int32
	most     atomic.Int32
}

func (f *parFake) Info() trial.Info   { return trial.Info{Parallel: f.par} }
func (f *parFake) Where() trial.Where { return trial.Where{Runner: "parallel fake"} }
func (f *parFake) Memory(ctx context.Context, specs ...trial.MemSpec) []trial.MemRun {
	panic("no memory trials here")
}

func (f *parFake) CPU(_ context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(30 * time.Millisecond)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%s/%d", c.Setting, mode, rep)
	rng := rand.New(rand.NewSource(int64(h.Sum64())))
	rate := 1000.0
	if mode == result.Open {
		rate = offered
	}
	bs := fakeBlocks(rng, 5, rate, 0.05, 5)
	s := stats.Sample{bs}
	return result.CPUCell{QuotaCores: c.Quota, Setting: c.Setting, SameAs: c.SameAs, Mode: mode, Repeat: rep, OfferedRPS: offered, RPS: s.RPS(), P99: s.Quantile(0.99),
		Requests: int(s.RPS() * 5), Seconds: 5, Blocks: bs}, nil
}

// TestParallelRounds: a runner with N trial nodes gets a round's CPU
// runs N at a time, and the records come out as a one-at-a-time run
// of the same seed records them: same cells, same order.
func TestParallelRounds(t *testing.T) {
	run := func(par int) ([]string, int32) {
		cfg := defaultConfig(false)
		cfg.Quotas = []float64{0.5}
		cfg.CPURequest = 0
		cfg.CPUSettings = []string{result.SetGoDefault, result.SetGofit, result.SetProcsNCPU}
		cfg.MinRepeats, cfg.MaxRepeats = 3, 3
		cfg.Budget = time.Hour
		cfg.Resamples = 50
		l := newLab(cfg)
		l.rec.NCPU = 4
		f := &parFake{par: par}
		l.run = f
		l.plan.rows.parallel = parallelism(f)
		if err := l.cpuStudy(context.Background()); err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, c := range l.rec.CPU {
			order = append(order, fmt.Sprintf("%s/%s/%d", c.Setting, c.Mode, c.Repeat))
		}
		return order, f.most.Load()
	}
	one, most1 := run(1)
	three, most3 := run(3)
	if most1 != 1 {
		t.Errorf("parallelism 1: %d runs at once", most1)
	}
	if most3 < 2 || most3 > 3 {
		t.Errorf("parallelism 3: at most %d runs at once, want 2 or 3 (a round's cells side by side, never more than the nodes)", most3)
	}
	if strings.Join(one, " ") != strings.Join(three, " ") || len(one) < 12 {
		t.Errorf("records differ:\n one at a time: %v\n three at once: %v", one, three)
	}
}

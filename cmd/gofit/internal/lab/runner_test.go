package lab

import (
	"context"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// fakeRunner is the tests' runner: scripted trials, no processes.
type fakeRunner struct {
	measure func(ctx context.Context, c cpuConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error)
	// mem runs one memory trial; pair a health pair.
	mem  func(ctx context.Context, env map[string]string, cpu float64, limit int64, ml memLoad) (result.MemTrial, load.Result)
	pair func(ctx context.Context, ref, env map[string]string, cpu float64, limit int64, ml memLoad) (result.MemTrial, load.Result, result.MemTrial, load.Result)
}

func (f *fakeRunner) cpu(ctx context.Context, c cpuConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	return f.measure(ctx, c, mode, offered, window, rep)
}

func (f *fakeRunner) memory(ctx context.Context, specs ...memSpec) []memRun {
	if len(specs) == 2 {
		l, ref := specs[0], specs[1]
		rt, rr, lt, lr := f.pair(ctx, ref.env, l.env, l.cpu, l.limit, l.load)
		return []memRun{{trial: lt, load: lr}, {trial: rt, load: rr}}
	}
	s := specs[0]
	t, r := f.mem(ctx, s.env, s.cpu, s.limit, s.load)
	return []memRun{{trial: t, load: r}}
}

func (f *fakeRunner) where() string { return "fake" }

// fakeOf is l's fake runner.
func fakeOf(l *study) *fakeRunner { return l.run.(*fakeRunner) }

// healthVerdict is l.healthTrial's verdict alone.
func healthVerdict(l *study, ctx context.Context, ref, env map[string]string, cpu float64, limit int64) result.MemTrial {
	t, _ := l.healthTrial(ctx, "test", ref, env, cpu, limit)
	return t
}

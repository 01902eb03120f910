package lab

import (
	"context"
	"flag"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

var (
	aaStudies = flag.Int("aa.studies", 60, "A/A studies TestAAFalseVerdictRate simulates")
	aaFrom    = flag.Int("aa.from", 0, "the first A/A study's index: shards of one long run (-aa.from=500 -aa.studies=500 is the second half of 1,000)")
)

// TestAAFalseVerdictRate is the A/A study of the CPU study's whole
// procedure: the minimum runs, then adaptive repeats that look at the
// interval after every run and stop once it decides, up to MaxRepeats.
// Looking and stopping early is what inflates a nominal 5% error rate,
// so the rate is measured on the procedure, not on one interval. The two
// sides are the same simulated service under two names (gofit and
// go-default at 500m on 4 CPUs, which the lab runs as two cells), with
// the noise a shared machine has: within a run (block to block) and
// between runs (a whole run slower or faster). Every better or worse
// verdict is false. docs/results/lab-verdicts.md has a 1,000-study run
// (go test -run TestAAFalseVerdictRate -args -aa.studies=1000).
func TestAAFalseVerdictRate(t *testing.T) {
	if testing.Short() {
		t.Skip("the A/A simulation takes half a minute; -short leaves it out")
	}
	n := *aaStudies
	var comparisons, falseVerdicts, decidedSame int
	runs := 0
	for i := *aaFrom; i < *aaFrom+n; i++ {
		l, f := newFakeLab(t, time.Hour)
		l.cfg.CPUSettings = []string{result.SetGoDefault, result.SetGofit}
		l.cfg.Seed = int64(1000 + i)
		l.rng = rand.New(rand.NewSource(l.cfg.Seed))
		f.rng = rand.New(rand.NewSource(int64(7000 + i)))
		f.rps[result.SetGofit], f.noise[result.SetGofit], f.ms[result.SetGofit] = f.rps[result.SetGoDefault], f.noise[result.SetGoDefault], f.ms[result.SetGoDefault]
		f.runNoise = 0.05
		if err := l.cpuStudy(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, s := range l.results().CPUSummary {
			if s.Setting != result.SetGofit || s.Verdict == nil {
				continue
			}
			comparisons++
			runs += s.Repeats
			switch *s.Verdict {
			case stats.Better, stats.Worse:
				falseVerdicts++
			case stats.Same:
				if s.Decided {
					decidedSame++
				}
			}
		}
	}
	rate := float64(falseVerdicts) / float64(comparisons)
	hi := wilsonHigh(falseVerdicts, comparisons)
	t.Logf("A/A: %d false verdicts in %d comparisons (%.1f%%, 95%% upper bound %.1f%%); %d decided same; %.1f runs a side on average",
		falseVerdicts, comparisons, 100*rate, 100*hi, decidedSame, float64(runs)/float64(comparisons))
	if rate > 0.05 {
		t.Errorf("false-verdict rate %.1f%% (%d of %d) over the nominal 5%%", 100*rate, falseVerdicts, comparisons)
	}
}

// wilsonHigh is the upper end of the 95% Wilson score interval of k in n.
func wilsonHigh(k, n int) float64 {
	const z = 1.96
	p, nf := float64(k)/float64(n), float64(n)
	c := p + z*z/(2*nf)
	w := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf))
	return (c + w) / (1 + z*z/nf)
}

var healthAATrials = flag.Int("health.aa", 0, "health trials TestHealthAAFalseVerdictRate simulates per case, at a ratio of 1 as well as at the boundary (0: 100, at the boundary alone)")

// TestHealthAAFalseVerdictRate is the health judgement's A/A study: the
// health trial's whole procedure (pairs until a look decides, from
// HealthPairs to HealthMaxPairs, judgeTrial) on a limited run whose true
// p99 is a fixed multiple of its reference's, under a machine whose moment
// moves both runs of a pair together and each run a little on its own.
// At exactly healthP99Factor (the boundary), "unhealthy" is false (the
// ratio is not over the factor) and "healthy" is as false as it would be
// a hair above it: each decided verdict's rate there bounds its false
// verdicts at any ratio. At a ratio of 1 (the limit costs nothing),
// "unhealthy" is false. docs/results/lab-verdicts.md has a larger run of
// both (go test -run TestHealthAAFalseVerdictRate -args -health.aa=1000).
func TestHealthAAFalseVerdictRate(t *testing.T) {
	n, ratios := 100, []float64{healthP99Factor}
	if *healthAATrials > 0 {
		n, ratios = *healthAATrials, []float64{healthP99Factor, 1}
	}
	for _, quick := range []bool{false, true} {
		for _, ratio := range ratios {
			healthy, unhealthy, pairs := 0, 0, 0
			for i := 0; i < n; i++ {
				l, f := newFakeMemLab(t, int64(i), quick)
				l.cfg.Seed = int64(3000 + i)
				l.rec.Target.HealthRPS, l.rec.Target.ProbeRPS = 100, 400
				rng := f.rng
				fakeOf(l).pair = func(_ context.Context, _, _ map[string]string, _ float64, limit int64, ml trial.MemLoad) (result.MemTrial, load.Result, result.MemTrial, load.Result) {
					moment := math.Exp(0.3 * rng.NormFloat64())
					run := func(ms float64) (result.MemTrial, load.Result) {
						bs := fakeBlocks(rng, int(ml.Window.Seconds()), ml.Rate, 0.02, ms*moment*math.Exp(0.15*rng.NormFloat64()))
						s := stats.Sample{bs}
						return result.MemTrial{Outcome: result.OK, RPS: s.RPS(), P99: s.Quantile(0.99)}, load.Result{RPS: s.RPS(), P99: s.Quantile(0.99), Blocks: bs}
					}
					rt, rr := run(5)
					lt, lr := run(5 * ratio)
					lt.LimitBytes = limit
					return rt, rr, lt, lr
				}
				tr := healthVerdict(l, context.Background(), nil, nil, 0.5, 64*mib)
				pairs += tr.Pairs
				switch {
				case tr.Decided && tr.Healthy:
					healthy++
				case tr.Decided:
					unhealthy++
				}
			}
			t.Logf("quick %v, true p99 ratio %g: decided healthy in %d, unhealthy in %d of %d trials (%.1f%%, %.1f%%; 95%% upper bounds %.1f%%, %.1f%%); %.2f pairs on average",
				quick, ratio, healthy, unhealthy, n, 100*float64(healthy)/float64(n), 100*float64(unhealthy)/float64(n),
				100*wilsonHigh(healthy, n), 100*wilsonHigh(unhealthy, n), float64(pairs)/float64(n))
			if unhealthy*20 > n || ratio > 1 && healthy*20 > n {
				t.Errorf("quick %v, true ratio %g: %d healthy and %d unhealthy verdicts decided in %d trials: over 5%% false", quick, ratio, healthy, unhealthy, n)
			}
		}
	}
}

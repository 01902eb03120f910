package lab

import (
	"context"
	"encoding/json"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// fakeBlocks makes n one-second blocks whose throughput is rps with a
// relative spread, and whose latencies are exponential with mean ms.
func fakeBlocks(rng *rand.Rand, n int, rps, spread, ms float64) []stats.Block {
	bs := make([]stats.Block, n)
	for i := range bs {
		k := int(math.Max(1, rps*(1+spread*rng.NormFloat64())))
		b := stats.Block{Seconds: 1, OK: k}
		for j := 0; j < k; j++ {
			b.Lat = append(b.Lat, float32(rng.ExpFloat64()*ms))
		}
		bs[i] = b
	}
	return bs
}

// runs splits blocks into n runs.
func runs(n int, bs []stats.Block) stats.Sample {
	var s stats.Sample
	per := len(bs) / n
	for i := 0; i < n; i++ {
		s = append(s, bs[i*per:(i+1)*per])
	}
	return s
}

// fakeCPU is a CPU study's runner with scripted distributions per
// setting and a clock that advances by each window.
type fakeCPU struct {
	rng   *rand.Rand
	now   time.Time
	rps   map[string]float64 // closed-loop capacity per setting
	noise map[string]float64
	ms    map[string]float64 // mean latency per setting, open loop
	runs  map[string]int
	rates map[float64][]float64
	// runNoise is the spread of a whole run's speed (a neighbour's
	// build, a migration): every block of the run moves together.
	runNoise float64
}

func (f *fakeCPU) measure(_ context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	f.runs[c.Setting+"/"+string(mode)]++
	secs := window.Seconds()
	f.now = f.now.Add(window + time.Second)
	n := int(secs)
	speed := math.Max(0.5, 1+f.runNoise*f.rng.NormFloat64())
	var bs []stats.Block
	if mode == result.Closed {
		bs = fakeBlocks(f.rng, n, f.rps[c.Setting]*speed, f.noise[c.Setting], 1)
	} else {
		f.rates[c.Quota] = append(f.rates[c.Quota], offered)
		bs = fakeBlocks(f.rng, n, offered, 0.01, f.ms[c.Setting]/speed)
	}
	s := stats.Sample{bs}
	return result.CPUCell{QuotaCores: c.Quota, Setting: c.Setting, SameAs: c.SameAs, Mode: mode, Repeat: rep, OfferedRPS: offered, RPS: s.RPS(), P99: s.Quantile(0.99),
		Requests: int(s.RPS() * secs), Seconds: secs, Blocks: bs}, nil
}

func newFakeLab(t *testing.T, budget time.Duration) (*study, *fakeCPU) {
	t.Helper()
	cfg := defaultConfig(false)
	cfg.Quotas = []float64{0.5}
	cfg.CPURequest = 0 // TestRequestRow has the request row
	cfg.CPUSettings = []string{result.SetGoDefault, result.SetGofit, result.SetProcs1, result.SetProcsNCPU}
	cfg.Budget = budget
	cfg.Resamples = 150
	l := newLab(cfg)
	l.rec.NCPU = 4
	f := &fakeCPU{rng: rand.New(rand.NewSource(11)), now: time.Unix(0, 0), runs: map[string]int{}, rates: map[float64][]float64{},
		// gofit (= gomaxprocs=1 at 500m) is truly 10% faster than
		// go-default but noisy; gomaxprocs=ncpu is clearly slower.
		rps:   map[string]float64{result.SetGoDefault: 1000, result.SetGofit: 1100, result.SetProcsNCPU: 800},
		noise: map[string]float64{result.SetGoDefault: 0.07, result.SetGofit: 0.07, result.SetProcsNCPU: 0.02},
		ms:    map[string]float64{result.SetGoDefault: 10, result.SetGofit: 5, result.SetProcsNCPU: 30}}
	l.started = f.now
	l.now = func() time.Time { return f.now }
	l.run = &fakeRunner{measure: f.measure}
	return l, f
}

func TestAdaptiveRepeats(t *testing.T) {
	l, f := newFakeLab(t, time.Hour)
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	sums := l.results().CPUSummary
	got := map[string]result.CPUSummary{}
	for _, s := range sums {
		got[s.Setting+"/"+string(s.Mode)] = s
	}
	// Identical environments are one cell with both names.
	if g := got[result.SetGofit+"/closed"]; len(g.SameAs) != 1 || g.SameAs[0] != result.SetProcs1 {
		t.Errorf("gofit at 500m on 4 CPUs: same_as %v, want [%s]", g.SameAs, result.SetProcs1)
	}
	if f.runs[result.SetProcs1+"/closed"] != 0 {
		t.Errorf("gomaxprocs=1 measured on its own %d times; it is gofit's cell", f.runs[result.SetProcs1+"/closed"])
	}
	// Equal load: one offered rate at the quota.
	for _, r := range f.rates[0.5] {
		if r != f.rates[0.5][0] {
			t.Errorf("open-loop rates at 500m differ: %v", f.rates[0.5])
			break
		}
	}
	for k, want := range map[string]string{result.SetGofit + "/closed": stats.Better, result.SetProcsNCPU + "/closed": stats.Worse, result.SetGofit + "/open": stats.Better, result.SetProcsNCPU + "/open": stats.Worse} {
		s := got[k]
		if s.Verdict == nil || *s.Verdict != want {
			t.Errorf("%s: verdict %v, want %s (ratio %+v, %d repeats)", k, s.Verdict, want, s.VerdictRatio, s.Repeats)
		}
		if s.RPS.CILow > s.RPS.Value || s.RPS.CIHigh < s.RPS.Value {
			t.Errorf("%s: rps %.0f outside [%.0f, %.0f]", k, s.RPS.Value, s.RPS.CILow, s.RPS.CIHigh)
		}
	}
	if got[result.SetGoDefault+"/closed"].Verdict != nil {
		t.Errorf("go-default has a verdict against itself")
	}
	// The clear difference stops as soon as a verdict may be decided
	// (stats.MinRuns a side); the noisy one was repeated until decided.
	if n, want := f.runs[result.SetProcsNCPU+"/closed"], max(l.cfg.MinRepeats, stats.MinRuns); n != want {
		t.Errorf("gomaxprocs=ncpu closed loop ran %d times; decided at once, want %d", n, want)
	}
	if n := f.runs[result.SetGofit+"/closed"]; n <= l.cfg.MinRepeats || n > l.cfg.MaxRepeats {
		t.Errorf("gofit closed loop ran %d times, want adaptive repeats in (%d, %d]", n, l.cfg.MinRepeats, l.cfg.MaxRepeats)
	}
	if s := got[result.SetGofit+"/open"]; s.Samples < l.cfg.OpenSamples {
		t.Errorf("gofit open loop pooled %d latencies, want at least %d", s.Samples, l.cfg.OpenSamples)
	}
}

func TestAdaptiveRepeatsStopAtBudget(t *testing.T) {
	// Five minutes fund the row's minimum runs (2.5 minutes for the CPU
	// study) and a few adaptive repeats, not enough to decide a true tie.
	l, f := newFakeLab(t, 5*time.Minute)
	f.rps[result.SetGofit] = f.rps[result.SetGoDefault] // no true difference: only more data could show "same"
	start := f.now
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took, most := f.now.Sub(start), l.plan.cpuBudget()+8*time.Second; took > most {
		t.Errorf("the CPU study took %v, over its budget %v plus one run", took, l.plan.cpuBudget())
	}
	if n := f.runs[result.SetGofit+"/closed"]; n < stats.MinRuns {
		t.Errorf("gofit closed loop ran %d times in a funded row, want at least %d", n, stats.MinRuns)
	}
	res := l.results()
	if _, err := json.Marshal(res); err != nil {
		t.Errorf("results.json: %v", err)
	}
	undecided := 0
	for _, s := range res.CPUSummary {
		if s.Verdict != nil && !s.Decided {
			if s.Repeats < l.cfg.MaxRepeats {
				undecided++ // stopped by the budget, not by --max-repeats
			}
			if !hasNote(s.Notes, "undecided: a difference under ×") {
				t.Errorf("%s %s undecided without the smallest difference it could show: %q", s.Setting, s.Mode, s.Notes)
			}
		}
		if s.Setting == result.SetGofit && s.Mode == result.Closed && s.Verdict != nil && *s.Verdict != stats.Same {
			t.Errorf("gofit closed: verdict %v on a true tie", *s.Verdict)
		}
	}
	if undecided > 0 && !hasNote(l.rec.Lab.BudgetNotes, "the CPU study's budget") {
		t.Errorf("%d comparisons undecided and no note that the budget ran out: %v", undecided, l.rec.Lab.BudgetNotes)
	}
}

func TestRowTheBudgetCannotDecideIsNotStarted(t *testing.T) {
	l, f := newFakeLab(t, time.Minute) // 30 s for the CPU study: not one row's minimum runs
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(f.runs); n != 0 {
		t.Errorf("ran %v; a row that cannot reach %d runs a side must not start", f.runs, stats.MinRuns)
	}
	want := "not compared at 500m: the budget funds 0 of the 3 runs a verdict needs (--budget 5m0s would fund them)"
	if len(l.rec.Lab.NotCompared) != 1 || l.rec.Lab.NotCompared[0] != want {
		t.Errorf("not_compared %q, want [%q]", l.rec.Lab.NotCompared, want)
	}
	if v := summarized(l.cfg, &l.rec).cpuVerdicts(); len(v) != 1 || v[0] != want {
		t.Errorf("verdicts %q: want only the row left out, never \"no setting differs\"", v)
	}
}

// results is what the study's records analyse to so far.
func (l *study) results() result.Results { return analyse(l.cfg, l.rec) }

// hasNote reports whether any note starts with prefix.
func hasNote(notes []string, prefix string) bool {
	for _, n := range notes {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

func TestRecommendationRefusesFailedCells(t *testing.T) {
	l, _ := newFakeLab(t, time.Hour)
	fakeOf(l).measure = func(_ context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
		bs := []stats.Block{{Seconds: 1, OK: 10, Errors: 400}, {Seconds: 1, OK: 10, Errors: 400}}
		for i := range bs {
			for j := 0; j < 410; j++ {
				bs[i].Lat = append(bs[i].Lat, 1)
			}
		}
		return result.CPUCell{QuotaCores: c.Quota, Setting: c.Setting, Mode: mode, RPS: 10, Requests: 20, Errors: 800, ErrorKinds: map[string]int{"HTTP 500 Internal Server Error": 800}, Seconds: 2, Blocks: bs}, nil
	}
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := l.results()
	if res.Recommendation.CPULimitCores != 0 || res.Recommendation.Confident {
		t.Errorf("recommended %v cores (confident %v) from cells that are 98%% errors", res.Recommendation.CPULimitCores, res.Recommendation.Confident)
	}
	if !strings.Contains(res.Lab.Failed, "HTTP 500 Internal Server Error") {
		t.Errorf("failure %q does not name the HTTP status", res.Lab.Failed)
	}
	for _, s := range res.CPUSummary {
		if !s.Failed {
			t.Errorf("%s %s not marked failed", s.Setting, s.Mode)
		}
	}
}

func TestRecommendForTargetRPS(t *testing.T) {
	l, f := newFakeLab(t, time.Hour)
	l.cfg.Quotas = []float64{0.25, 0.5}
	l.cfg.TargetRPS, l.cfg.SLOP99 = 300, 20*time.Millisecond
	inner := f.measure
	fakeOf(l).measure = func(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
		if offered != 0 && offered != 300 {
			t.Errorf("open loop at %v rps, want the target rate 300", offered)
		}
		// 250m is too slow for the SLO: five times the latency.
		if c.Quota == 0.25 {
			f.ms = map[string]float64{result.SetGoDefault: 50, result.SetGofit: 25, result.SetProcsNCPU: 150}
		} else {
			f.ms = map[string]float64{result.SetGoDefault: 10, result.SetGofit: 2, result.SetProcsNCPU: 30}
		}
		return inner(ctx, c, mode, offered, window, rep)
	}
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := l.results().Recommendation
	if rec.CPULimitCores != 0.5 || rec.Setting != result.SetGofit || rec.TargetRPS != 300 || rec.SLOP99Ms != 20 || !rec.Confident {
		t.Errorf("recommendation %+v, want gofit at 500m for 300 rps within 20ms", rec)
	}
}

// TestDecidingComparisonsFirst: adaptive repeats go to gofit against
// go-default at the rows the recommendation rests on until those are
// decided or at --max-repeats; the rest of the sweep gets what is left.
// Spread evenly, as before, the budget left every comparison at 4 or 5
// runs a side, none decided.
func TestDecidingComparisonsFirst(t *testing.T) {
	l, f := newFakeLab(t, 16*time.Minute)
	l.cfg.Quotas = []float64{0.25, 0.5, 1}
	// A true tie, too noisy to decide "same" in 12 runs: every
	// comparison of gofit stays open until it is given up on.
	f.rps[result.SetGofit], f.ms[result.SetGofit] = f.rps[result.SetGoDefault], f.ms[result.SetGoDefault]
	f.noise[result.SetGofit], f.noise[result.SetGoDefault] = 0.2, 0.2
	f.runNoise = 0.15
	type ran struct {
		q   float64
		rep int
	}
	var order []ran
	measure := fakeOf(l).measure
	fakeOf(l).measure = func(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
		order = append(order, ran{c.Quota, rep})
		return measure(ctx, c, mode, offered, window, rep)
	}
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := func(q float64, mode result.Mode) int {
		return len(runsOf(l.rec.CPU, cellKey{q, result.SetGofit, mode}))
	}
	if got := n(0.25, result.Closed); got <= l.cfg.MinRepeats {
		t.Errorf("gofit at 250m (the deciding row): %d closed runs, want adaptive repeats beyond %d", got, l.cfg.MinRepeats)
	}
	// 250m's adaptive repeats, up to the look each comparison stopped at
	// (decided, given up on, or the last), all come before any repeat of
	// another row; and those rows then get the time left.
	stopped := 0
	for _, s := range l.results().CPUSummary {
		if s.QuotaCores == 0.25 && s.Setting == result.SetGofit {
			stopped = max(stopped, s.VerdictRuns)
		}
	}
	firstOther, lastDeciding := len(order), -1
	for i, r := range order {
		switch {
		case r.q == 0.25 && r.rep <= stopped:
			lastDeciding = i
		case r.q != 0.25 && r.rep > l.cfg.MinRepeats && i < firstOther:
			firstOther = i
		}
	}
	if stopped <= l.cfg.MinRepeats || lastDeciding > firstOther {
		t.Errorf("250m's comparisons stopped at %d runs a side, its last run %d of %d; another row's first repeat was run %d", stopped, lastDeciding+1, len(order), firstOther+1)
	}
	if firstOther == len(order) {
		t.Errorf("no other row got a repeat after 250m's comparisons stopped at %d runs a side, in a budget of %v", stopped, l.cfg.Budget)
	}
}

// TestLooks: the CPU study's schedule from --repeats to --max-repeats,
// each look read at lookAlpha.
func TestLooks(t *testing.T) {
	for _, c := range []struct {
		min, max int
		want     []int
	}{{3, 12, []int{3, 5, 8, 12}}, {3, 8, []int{3, 5, 8}}, {3, 3, []int{3}}, {2, 4, []int{2, 3, 4}}, {5, 6, []int{5, 6}}} {
		l := Config{MinRepeats: c.min, MaxRepeats: c.max}
		var got []int
		for n := 1; n <= c.max; n++ {
			if l.looks().IsLook(float64(n)) {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("min %d, max %d: looks at %v, want %v", c.min, c.max, got, c.want)
		}
		if !l.looks().IsLook(float64(c.max + 3)) {
			t.Errorf("min %d, max %d: no look past the cap", c.min, c.max)
		}
		if lv := l.looks().Level(float64(c.min), 1); lv != lookAlpha {
			t.Errorf("min %d, max %d: the first look read at %g, want lookAlpha %g", c.min, c.max, lv, lookAlpha)
		}
	}
}

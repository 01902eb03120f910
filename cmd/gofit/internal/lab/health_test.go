package lab

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/fit"
)

func TestJudgeHealth(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	pairs := func(n int, ms float64) []healthPair {
		var ps []healthPair
		for i := 0; i < n; i++ {
			// Each pair meets its own moment of the machine: both of its
			// runs slower or faster together.
			mood := math.Exp(0.4 * rng.NormFloat64())
			ps = append(ps, healthPair{RefBlocks: fakeBlocks(rng, 4, 200, 0.02, 10*mood), LimitedBlocks: fakeBlocks(rng, 4, 200, 0.02, ms*mood)})
		}
		return ps
	}
	for _, tc := range []struct {
		name             string
		pairs            []healthPair
		healthy, decided bool
	}{
		{"as fast as without a limit", pairs(4, 10), true, true},
		{"a fifth slower", pairs(4, 12), true, true},
		{"five times slower", pairs(4, 50), false, true},
		{"one pair: no interval", pairs(1, 10), true, false},
		{"no pair", nil, false, false},
	} {
		h, d, r := judgeHealth(stats.NewBootstrap(400, 1), tc.pairs)
		if h != tc.healthy || d != tc.decided {
			t.Errorf("%s: healthy %v decided %v (ratio %+v), want %v %v", tc.name, h, d, r, tc.healthy, tc.decided)
		}
	}
}

// Pairs keep a shared moment out of the ratio: with a machine whose mood
// moves each pair's runs together by ±50%, the paired interval of equal
// services still decides "healthy", where resampling the two sides
// independently (Bootstrap.Ratio) cannot tell.
func TestPairedRatioNarrowerThanIndependent(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	var ps []healthPair
	var lim, refs stats.Sample
	for i := 0; i < 3; i++ {
		mood := []float64{0.5, 1, 2}[i]
		p := healthPair{RefBlocks: fakeBlocks(rng, 4, 200, 0.02, 10*mood), LimitedBlocks: fakeBlocks(rng, 4, 200, 0.02, 10*mood)}
		ps = append(ps, p)
		lim, refs = append(lim, p.LimitedBlocks), append(refs, p.RefBlocks)
	}
	paired := stats.NewBootstrap(1000, 1).PairedRatio(lim, refs, stats.StatP99)
	indep := stats.NewBootstrap(1000, 1).Ratio(lim, refs, stats.StatP99)
	if paired.High-paired.Low >= (indep.High-indep.Low)/2 {
		t.Errorf("paired interval %+v not under half the independent one %+v", paired, indep)
	}
	if h, d, _ := judgeHealth(stats.NewBootstrap(1000, 1), ps); !h || !d {
		t.Errorf("equal services under a moody machine: healthy %v decided %v", h, d)
	}
}

// fakeMem is a service whose memory behaviour is scripted: it is OOM
// killed under floor; above it, latency at the health rate is
// base × (1 + ((edge−floor)/(limit−floor))³), twice base at edge. Every
// run (with or without a limit) meets the machine's mood: a factor drawn
// per run, as a neighbour's build on a shared machine would be.
type fakeMem struct {
	rng         *rand.Rand
	floor, edge int64
	peak        int64
	base        float64 // ms, mean latency without a limit
	mood        float64 // σ of the log factor of the machine's moment, per run (or per pair: both runs)
	own         float64 // σ of each run's own log factor beside its pair
	clock       *time.Time
	runs        int
	maxRunLimit int64
	// A band from floor up to floor+band where a run survives with
	// probability bandP and otherwise stalls (0: a sharp edge).
	band  int64
	bandP float64
}

func (f *fakeMem) run(_ context.Context, _ map[string]string, _ float64, limit int64, ml trial.MemLoad) (result.MemTrial, load.Result) {
	secs := ml.Window.Seconds()
	if ml.Rate == 0 {
		secs = 2
	}
	*f.clock = f.clock.Add(time.Duration(secs+1) * time.Second)
	return f.runAt(limit, ml, math.Exp(f.mood*f.rng.NormFloat64()))
}

// pair runs the reference and the limited run side by side: the moment
// of the machine (shared) reaches both, and each has a little noise of
// its own.
func (f *fakeMem) pair(_ context.Context, _, _ map[string]string, _ float64, limit int64, ml trial.MemLoad) (result.MemTrial, load.Result, result.MemTrial, load.Result) {
	*f.clock = f.clock.Add(ml.Window + 2*time.Second)
	moment := math.Exp(f.mood * f.rng.NormFloat64())
	own := func() float64 { return moment * math.Exp(f.own*f.rng.NormFloat64()) }
	rt, rr := f.runAt(0, ml, own())
	lt, lr := f.runAt(limit, ml, own())
	return rt, rr, lt, lr
}

func (f *fakeMem) runAt(limit int64, ml trial.MemLoad, mood float64) (result.MemTrial, load.Result) {
	f.runs++
	f.maxRunLimit = max(f.maxRunLimit, limit)
	secs := ml.Window.Seconds()
	if ml.Rate == 0 {
		secs = 2
	}
	t := result.MemTrial{LimitBytes: limit, Outcome: result.OK, PeakBytes: uint64(f.peak)}
	if limit > 0 && limit < f.floor {
		t.Outcome = result.OOMKilled
		return t, load.Result{}
	}
	if limit > 0 && limit < f.floor+f.band && f.rng.Float64() >= f.bandP {
		t.Outcome = result.Stalled
		return t, load.Result{}
	}
	if limit > 0 {
		t.PeakBytes = uint64(min(limit, f.peak))
	}
	ms := f.base * mood
	if limit > 0 {
		ms *= 1 + math.Pow(float64(f.edge-f.floor)/float64(limit-f.floor+1), 3)
	}
	rate := ml.Rate
	if rate == 0 {
		rate = 600
	}
	bs := fakeBlocks(f.rng, int(secs), rate, 0.02, ms)
	s := stats.Sample{bs}
	r := load.Result{Requests: int(rate * secs), RPS: s.RPS(), P99: s.Quantile(0.99), Blocks: bs}
	t.RPS, t.P99 = r.RPS, r.P99
	return t, r
}

func newFakeMemLab(t *testing.T, seed int64, quick bool) (*study, *fakeMem) {
	t.Helper()
	cfg := defaultConfig(quick)
	cfg.Resamples = 200
	cfg.Budget = 10 * time.Hour
	cfg.Multiples = nil
	l := newLab(cfg)
	clock := time.Unix(0, 0)
	f := &fakeMem{rng: rand.New(rand.NewSource(seed)), floor: 60 * mib, edge: 80 * mib, peak: 100 * mib, base: 5, mood: 0.3, own: 0.1, clock: &clock}
	l.started = clock
	l.now = func() time.Time { return clock }
	l.run = &fakeRunner{mem: f.run, pair: f.pair}
	return l, f
}

// Studies of the same service, meeting different noise, find healthy
// floors within one resolution step of each other, never above 1.25 × the
// peak plus a step, and never under the survival floor: issue 15's two
// default runs gave automemlimit 88 and 759 MiB. The fake's edge sits on
// a step, where a trial is a coin flip, so "within one step" is asked of
// back-to-back pairs of studies as a rate: more than one pair in ten
// two steps apart fails.
func TestHealthyFloorRepeats(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: 24 simulated memory studies (13 s; minutes under -race), no concurrency of their own; make test runs them")
	}
	for _, quick := range []bool{false, true} {
		floors := map[string][]int64{}
		var res int64
		var seeds []int64
		for s := int64(1); s <= 12; s++ {
			seeds = append(seeds, s)
		}
		for _, seed := range seeds {
			l, f := newFakeMemLab(t, seed, quick)
			res = l.cfg.HealthResolution
			if err := l.memoryStudy(context.Background()); err != nil {
				t.Fatal(err)
			}
			if l.rec.Target.HealthRPS != math.Round(l.cfg.HealthShare*l.rec.Target.ProbeRPS) {
				t.Errorf("health rate %.0f, want %g × %.0f", l.rec.Target.HealthRPS, l.cfg.HealthShare, l.rec.Target.ProbeRPS)
			}
			if f.maxRunLimit > 2*f.peak {
				t.Errorf("seed %d: a trial ran at %d MiB, over twice the peak", seed, f.maxRunLimit/mib)
			}
			for _, m := range l.results().Memory {
				if m.HealthyFloorBytes == nil || m.FloorBytes == nil {
					t.Fatalf("seed %d, %s: no floor (%v, %v); trials %+v", seed, m.Setting, m.FloorBytes, m.HealthyFloorBytes, m.HealthyTrials)
				}
				h := *m.HealthyFloorBytes
				if h < *m.FloorBytes || h > f.peak*5/4+res {
					t.Errorf("seed %d, %s: healthy floor %d MiB outside [survival %d, 1.25 × peak + step]", seed, m.Setting, h>>20, *m.FloorBytes>>20)
				}
				healthyAt := 0
				for _, ht := range m.HealthyTrials {
					if ht.Pairs < l.cfg.HealthPairs && ht.Outcome == result.OK || ht.Pairs > l.cfg.HealthMaxPairs {
						t.Errorf("seed %d: a health trial of %d pairs (min %d, max %d)", seed, ht.Pairs, l.cfg.HealthPairs, l.cfg.HealthMaxPairs)
					}
					if ht.LimitBytes == h && ht.Healthy {
						healthyAt++
					}
				}
				// One healthy trial at the edge is a coin flip: the floor
				// is a limit found healthy twice.
				if healthyAt < 2 {
					t.Errorf("seed %d, %s: healthy floor %d MiB rests on %d healthy trial(s) there", seed, m.Setting, h>>20, healthyAt)
				}
				floors[m.Setting] = append(floors[m.Setting], h)
			}
		}
		for s, fs := range floors {
			apart := 0
			for i := 1; i < len(fs); i++ {
				if d := fs[i] - fs[i-1]; d > res || -d > res {
					apart++
				}
			}
			if apart*10 > len(fs)-1 {
				t.Errorf("quick %v, %s: healthy floors %v MiB: %d of %d back-to-back pairs differ by more than one step (%d MiB)", quick, s, mibs(fs), apart, len(fs)-1, res>>20)
			}
		}
	}
}

// A service that survives 60 and 64 MiB in only 6 runs of 10 and every
// run from 68 MiB (an edge two steps wide, as the sample's was under
// automemlimit: 88 and 92 MiB survived 4 of 7 runs in two default runs)
// gets survival floors within a step of each other in back-to-back
// studies, at the band's top. With the edge confirmed 2 of 3 at one step,
// 17 of the 76 pairs were two steps apart (60 against 68 MiB).
func TestSurvivalFloorRepeatsOverABand(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: 20 simulated memory studies (15 s; minutes under -race), no concurrency of their own; make test runs them")
	}
	var floors []int64
	apart, pairs := 0, 0
	for seed := int64(1); seed <= 20; seed++ {
		l, f := newFakeMemLab(t, seed, false)
		f.band, f.bandP = 8*mib, 0.6
		if err := l.memoryStudy(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, m := range l.results().Memory {
			if m.FloorBytes == nil {
				t.Fatalf("seed %d, %s: no survival floor; trials %v", seed, m.Setting, m.Survival)
			}
			fl := *m.FloorBytes
			if fl < f.floor || fl > f.floor+f.band+l.cfg.Resolution {
				t.Errorf("seed %d, %s: survival floor %d MiB outside [%d, %d] MiB", seed, m.Setting, fl/mib, f.floor/mib, (f.floor+f.band+l.cfg.Resolution)/mib)
			}
			if seed > 1 {
				prev := floors[len(floors)-len(l.rec.Memory)]
				if d := fl - prev; d > l.cfg.Resolution || -d > l.cfg.Resolution {
					apart++
				}
				pairs++
			}
			floors = append(floors, fl)
		}
	}
	t.Logf("%d of %d back-to-back pairs differ by more than a step", apart, pairs)
	if apart*10 > pairs {
		t.Errorf("survival floors %v MiB: %d of %d back-to-back pairs differ by more than a step", mibs(floors), apart, pairs)
	}
}

// The health trials run the reference (no limit) beside the limited run,
// both at the health rate; a limited run that is OOM killed ends the
// judgement at once.
func TestHealthTrialPairs(t *testing.T) {
	l, f := newFakeMemLab(t, 5, false)
	l.rec.Target.HealthRPS, l.rec.Target.ProbeRPS = 200, 400
	calls := 0
	pair := f.pair
	fakeOf(l).pair = func(ctx context.Context, ref, env map[string]string, cpu float64, limit int64, ml trial.MemLoad) (result.MemTrial, load.Result, result.MemTrial, load.Result) {
		calls++
		if ml.Rate != 200 || ml.Window != l.cfg.HealthWindow {
			t.Errorf("health run at %g rps for %v, want 200 for %v", ml.Rate, ml.Window, l.cfg.HealthWindow)
		}
		return pair(ctx, ref, env, cpu, limit, ml)
	}
	tr := healthVerdict(l, context.Background(), nil, nil, 0.5, 96*mib)
	if !tr.Healthy || !tr.Decided || tr.Pairs < l.cfg.HealthPairs || tr.Pairs > l.cfg.HealthMaxPairs || calls != tr.Pairs || tr.P99Ratio == nil {
		t.Errorf("far above the edge: %d pairs run, %+v", calls, tr)
	}
	calls = 0
	tr = healthVerdict(l, context.Background(), nil, nil, 0.5, 40*mib)
	if tr.Healthy || tr.Outcome != result.OOMKilled || calls != 1 {
		t.Errorf("under the floor: %+v after %d pairs; want OOM killed after one", tr, calls)
	}
}

// The recommendation never needs more memory than the 0.9 ratio: where
// automemlimit's rule was healthy lower than gofit's plan, the ratio and
// its floor are recommended (before, gofit's floor was, whatever the
// ratio's).
func TestRecommendMemoryNeverAboveTheRatio(t *testing.T) {
	p := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name              string
		gofit, ratio      int64
		wantLimit         int64
		wantRatioGOMEMLIM bool
	}{
		{"gofit lower", 80 * mib, 96 * mib, 100 * mib, false},
		{"ratio lower", 120 * mib, 96 * mib, 120 * mib, true},
		{"tie: gofit", 96 * mib, 96 * mib, 120 * mib, false},
		{"gofit none found", 0, 96 * mib, 120 * mib, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(defaultConfig(true))
			g := result.MemResult{Setting: result.SetGofit, FloorBytes: p(64 * mib)}
			if tc.gofit > 0 {
				g.HealthyFloorBytes = p(tc.gofit)
			}
			mem := []result.MemResult{g, {Setting: result.SetAutoMemLimit, FloorBytes: p(64 * mib), HealthyFloorBytes: p(tc.ratio)}}
			rec := analyseMemory(l.cfg, l.rec, mem, nil).Recommendation
			if rec.MemoryLimitBytes != tc.wantLimit {
				t.Errorf("limit %d MiB, want %d MiB; reasons %q", rec.MemoryLimitBytes/mib, tc.wantLimit/mib, rec.Reasons)
			}
			ratio := strconv.FormatInt(int64(float64(rec.MemoryLimitBytes)*automemlimitRatio), 10)
			if tc.wantRatioGOMEMLIM && rec.Env["GOMEMLIMIT"] != ratio {
				t.Errorf("GOMEMLIMIT %q, want the ratio's %s", rec.Env["GOMEMLIMIT"], ratio)
			}
			from := `with setting "gofit"`
			if tc.wantRatioGOMEMLIM {
				from = `with setting "automemlimit"`
			}
			if !strings.Contains(strings.Join(rec.Reasons, "\n"), from) {
				t.Errorf("reasons do not say %s: %q", from, rec.Reasons)
			}
			// gofit's own GOMEMLIMIT carries the marker, so a target with
			// gofit's library refines it; the ratio's is not gofit's.
			// (Where the ratio's value is what gofit's plan gives, it is.)
			planned, _ := planEnv(l.cfg, &l.rec, 0, rec.MemoryLimitBytes)
			marked := strings.Contains(rec.Env[fit.MarkerVar], "GOMEMLIMIT="+rec.Env["GOMEMLIMIT"])
			if want := planned["GOMEMLIMIT"] == rec.Env["GOMEMLIMIT"]; marked != want || !tc.wantRatioGOMEMLIM && !marked {
				t.Errorf("env %v (gofit's plan %v): GOMEMLIMIT in the marker %v, want %v", rec.Env, planned, marked, want)
			}
			if !strings.Contains(rec.YAML, fit.MarkerVar) && !tc.wantRatioGOMEMLIM {
				t.Errorf("YAML without the marker:\n%s", rec.YAML)
			}
		})
	}
}

// The gofit memory setting starts a target as `gofit run` does, marker
// included, so a target importing gofit's library may refine the values
// in-process; the CPU cells and the recommended env go without it.
func TestGofitMemoryEnvCarriesTheMarker(t *testing.T) {
	l := newLab(defaultConfig(true))
	env := memEnv(l.cfg, &l.rec, result.SetGofit, 256*mib)
	if m := env[fit.MarkerVar]; !strings.Contains(m, "GOMEMLIMIT="+env["GOMEMLIMIT"]) || env["GOMEMLIMIT"] == "" {
		t.Errorf("memory env %v: want GOMEMLIMIT and the marker naming it", env)
	}
	if env := memEnv(l.cfg, &l.rec, result.SetAutoMemLimit, 256*mib); env[fit.MarkerVar] != "" {
		t.Errorf("automemlimit env %v carries gofit's marker", env)
	}
	if env, _, _ := designOf(l.cfg, &l.rec).env(result.SetGofit, 0.5, 0); env[fit.MarkerVar] != "" {
		t.Errorf("cpu env %v carries the marker", env)
	}
}

// The request row runs without a CPU limit at the request's CPU weight;
// gofit's GOMAXPROCS there comes from the request (max(2, ceil(R ×
// factor))), not the CPUs. It gets verdicts like a quota, a column of its
// own, and no recommendation rests on it.
func TestRequestRow(t *testing.T) {
	l, _ := newFakeLab(t, time.Hour)
	l.cfg.CPURequest, l.cfg.CPURequestFactor = 0.25, 1
	l.cfg.MaxRepeats = 2
	var requests []float64
	measure := fakeOf(l).measure
	fakeOf(l).measure = func(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
		if c.Quota == 0 {
			requests = append(requests, c.Request)
		}
		cell, err := measure(ctx, c, mode, offered, window, rep)
		cell.RequestCores = c.Request
		cell.GOMAXPROCS = c.Procs
		return cell, err
	}
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(requests) == 0 {
		t.Fatal("no cell ran without a limit")
	}
	for _, r := range requests {
		if r != 0.25 {
			t.Errorf("a request-row cell asked for %g cores, want 0.25", r)
		}
	}
	res := l.results()
	procs := map[string]int{}
	for _, s := range res.CPUSummary {
		if s.QuotaCores == 0 {
			procs[s.Setting] = s.GOMAXPROCS
			if s.RequestCores != 0.25 {
				t.Errorf("request row summary %s: request %g", s.Setting, s.RequestCores)
			}
			if s.Setting != result.SetGoDefault && s.Verdict == nil && !s.Failed {
				t.Errorf("request row %s %s: no verdict against go-default", s.Setting, s.Mode)
			}
		}
	}
	if procs[result.SetGofit] != 2 || procs[result.SetGoDefault] != 4 {
		t.Errorf("request row GOMAXPROCS %v: want gofit 2 (from the 250m request), go-default 4 (the CPUs)", procs)
	}
	if qs := summarized(l.cfg, &l.rec).quotas(); len(qs) != 1 || qs[0] != 0.5 {
		t.Errorf("quotas a recommendation may rest on: %v, want [0.5]", qs)
	}
	if rec := l.results().Recommendation; rec.CPULimitCores != 0.5 && rec.CPULimitCores != 0 {
		t.Errorf("recommended %g cores", rec.CPULimitCores)
	}
	// The verdict tables' columns: the quota, then the request row.
	var sum strings.Builder
	report.Summary(&sum, &res)
	want := fmt.Sprintf("  %-16s %-30s %-30s", "setting", "500m", "no limit, request 250m")
	if !strings.Contains(sum.String(), want+"\n") {
		t.Errorf("the summary has no verdict table with columns 500m and the request row:\n%s", sum.String())
	}
}

// A health trial starts no pair that would end after the budget: the
// check trial runs last, and before it did, --quick ended 10–17 s over its
// 4 minutes on slow targets (issue 17).
func TestHealthTrialStopsAtTheBudget(t *testing.T) {
	l, f := newFakeMemLab(t, 5, true)
	l.rec.Target.HealthRPS, l.rec.Target.ProbeRPS = 200, 400
	f.mood = 1.5                               // a noisy machine: the interval would want every pair
	pair := l.cfg.HealthWindow + 2*time.Second // what the fake's pairs cost
	// One and a half pairs left.
	*f.clock = l.started.Add(l.cfg.Budget - pair*3/2)
	tr := healthVerdict(l, context.Background(), nil, nil, 0.5, 96*mib)
	if tr.Pairs != 1 || !tr.BudgetCut {
		t.Errorf("%d pairs (cut %v) with one and a half pairs of budget left, want 1 and cut", tr.Pairs, tr.BudgetCut)
	}
	if end := l.started.Add(l.cfg.Budget); f.clock.After(end) {
		t.Errorf("the trial ended %v after the budget", f.clock.Sub(end))
	}
	if got := l.plan.mem.checkReserve(); got != max(defaultCheckReserve, time.Duration(l.cfg.HealthPairs)*pair) {
		t.Errorf("check reserve %v after pairs of %v each", got, pair)
	}
	// With time enough it runs its pairs as before.
	*f.clock = l.started
	if tr := healthVerdict(l, context.Background(), nil, nil, 0.5, 96*mib); tr.BudgetCut || tr.Pairs < l.cfg.HealthPairs {
		t.Errorf("with the whole budget: %d pairs, cut %v", tr.Pairs, tr.BudgetCut)
	}
}

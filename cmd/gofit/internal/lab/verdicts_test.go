package lab

import (
	"context"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// An open loop offered more than a setting can serve measures its queue:
// the comparison is "saturated", never better or worse, it is not
// repeated, the recommendation's reasons say so, and the plot rings it.
func TestSaturatedIsNotAVerdict(t *testing.T) {
	l, f := newFakeLab(t, time.Hour)
	// Offered 60% of the lower of gofit and go-default (1000): 600 rps, over the 500
	// gomaxprocs=ncpu serves.
	f.rps[result.SetProcsNCPU] = 500
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := l.results()
	var sat result.CPUSummary
	for _, s := range res.CPUSummary {
		if s.Mode == result.Open && s.Setting == result.SetProcsNCPU {
			sat = s
		}
		if s.Mode == result.Open && s.Setting == result.SetGofit && s.Saturated {
			t.Errorf("gofit (1100 rps of capacity at 600 offered) marked saturated: %q", s.Notes)
		}
	}
	if !sat.Saturated || sat.Verdict == nil || *sat.Verdict != result.Saturated || !sat.Decided {
		t.Fatalf("gomaxprocs=ncpu open loop at 600 rps with 500 rps of capacity: saturated %v, verdict %v, decided %v", sat.Saturated, sat.Verdict, sat.Decided)
	}
	if !hasNote(sat.Notes, "saturated: offered ") || !strings.Contains(sat.Notes[0], "of its own closed-loop capacity") {
		t.Errorf("notes %q: want the reason, with the capacity", sat.Notes)
	}
	if n := f.runs[result.SetProcsNCPU+"/open"]; n != l.cfg.MinRepeats {
		t.Errorf("the saturated open loop ran %d times, want %d: repeating it measures the same queue", n, l.cfg.MinRepeats)
	}
	reasons := strings.Join(res.Recommendation.Reasons, "\n")
	if !strings.Contains(reasons, "gomaxprocs=ncpu saturated in the open loop at ") || !strings.Contains(reasons, "rps (no p99 verdict)") {
		t.Errorf("reasons do not name the saturated cell:\n%s", reasons)
	}
	dir := t.TempDir()
	if _, err := report.Write(dir, &res); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "◯ saturated") || !strings.Contains(string(html), `class="saturated"`) {
		t.Errorf("report.html neither rings the saturated cell in the p99 plot nor marks it in the verdict table")
	}
}

// An undecided comparison says the smallest difference it could have
// shown and what would decide it; "no setting differs significantly"
// appears only where every comparison was decided the same.
func TestUndecidedSaysWhatItCouldNotSee(t *testing.T) {
	l, f := newFakeLab(t, time.Hour)
	l.cfg.CPUSettings = []string{result.SetGoDefault, result.SetGofit}
	l.cfg.MaxRepeats = l.cfg.MinRepeats // no adaptive repeats: stop at the minimum
	f.rps[result.SetGofit], f.ms[result.SetGofit] = f.rps[result.SetGoDefault], f.ms[result.SetGoDefault]
	f.noise[result.SetGofit], f.noise[result.SetGoDefault] = 0.1, 0.1
	f.runNoise = 0.03
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	a := summarized(l.cfg, &l.rec)
	for _, s := range a.res.CPUSummary {
		if s.Setting != result.SetGofit || s.Mode != result.Closed {
			continue
		}
		if s.Decided {
			t.Skipf("decided at 30%% noise on this seed (%v): nothing to check", *s.Verdict)
		}
		if s.DetectableRatio == nil || s.VerdictRatio == nil {
			t.Fatalf("undecided without a detectable ratio: %+v", s)
		}
		r := *s.VerdictRatio
		want := math.Max(r.High/r.Value, r.Value/r.Low)
		if math.Abs(*s.DetectableRatio-want) > 1e-9 || *s.DetectableRatio <= 1 {
			t.Errorf("detectable ratio %v, want the interval's wider half %v", *s.DetectableRatio, want)
		}
		if s.RunsToDecide <= stats.MinRuns {
			t.Errorf("runs to decide %d: want more than the %d it had", s.RunsToDecide, stats.MinRuns)
		}
		if !hasNote(s.Notes, "undecided: a difference under ×") || !strings.Contains(strings.Join(s.Notes, " "), "--budget") {
			t.Errorf("notes %q: want the smallest visible difference and the budget that decides it", s.Notes)
		}
	}
	for _, v := range a.cpuVerdicts() {
		if strings.Contains(v, "no setting differs significantly") {
			t.Errorf("%q: said of a row whose comparisons are undecided", v)
		}
	}

	// Decided the same, everywhere: now it may be said.
	l2, f2 := newFakeLab(t, time.Hour)
	l2.cfg.CPUSettings = []string{result.SetGoDefault, result.SetGofit}
	l2.cfg.OpenSamples = 40000 // p99 from enough latencies to decide inside ±10%
	f2.rps[result.SetGofit], f2.ms[result.SetGofit] = f2.rps[result.SetGoDefault], f2.ms[result.SetGoDefault]
	f2.noise[result.SetGofit], f2.noise[result.SetGoDefault] = 0.005, 0.005
	if err := l2.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	a2 := summarized(l2.cfg, &l2.rec)
	allSame := true
	for _, s := range a2.res.CPUSummary {
		if s.Verdict != nil && (!s.Decided || *s.Verdict != stats.Same) {
			allSame = false
		}
	}
	if !allSame {
		t.Fatalf("two identical settings at 0.5%% noise were not all decided the same: %q", a2.cpuVerdicts())
	}
	said := strings.Contains(strings.Join(a2.cpuVerdicts(), "\n"), "no setting differs significantly")
	if allSame != said {
		t.Errorf("every comparison decided the same: %v; 'no setting differs significantly' said: %v (%q)", allSame, said, a2.cpuVerdicts())
	}
}

// Where Go's default is known to be the CPU count, gomaxprocs=ncpu is
// go-default's cell: measuring both would measure the noise twice.
func TestNCPUFoldsIntoAKnownGoDefault(t *testing.T) {
	for _, tc := range []struct {
		goVersion string
		ncpu      int
		folded    bool
	}{
		{"go1.26.0", 2, true},  // Go >= 1.25 at 500m on 2 CPUs: max(2, 1) = 2 = the CPU count
		{"go1.26.0", 4, false}, // ... on 4 CPUs: 2, not 4
		{"", 2, false},         // the Go version unknown: nothing is assumed
	} {
		cfg := defaultConfig(false)
		l := newLab(cfg)
		l.rec.NCPU, l.rec.Binary.GoVersion = tc.ncpu, tc.goVersion
		folded := false
		for _, c := range designOf(l.cfg, &l.rec).configs(0.5, 0) {
			if c.Setting == result.SetGoDefault && slices.Contains(c.SameAs, result.SetProcsNCPU) {
				folded = true
			}
		}
		if folded != tc.folded {
			t.Errorf("Go %q on %d CPUs at 500m: gomaxprocs=ncpu folded into go-default %v, want %v (%+v)", tc.goVersion, tc.ncpu, folded, tc.folded, designOf(l.cfg, &l.rec).configs(0.5, 0))
		}
	}
}

// A study whose open loops are all saturated (a slow machine, a rate
// above every setting's capacity) recommends no CPU limit and says why,
// but it is not the target's failure: nothing answered with errors.
func TestSaturatedStudyIsNotAFailure(t *testing.T) {
	l, _ := newFakeLab(t, time.Hour)
	l.cfg.TargetRPS = 5000 // over every setting's capacity (at most 1100)
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := l.results()
	if res.Recommendation.CPULimitCores != 0 {
		t.Errorf("recommended %v cores from saturated cells", res.Recommendation.CPULimitCores)
	}
	if res.Lab.Failed != "" {
		t.Errorf("failed: %q; saturated cells are no error of the target's", res.Lab.Failed)
	}
}

// TestOpenRateFromTheWeakerSide: the open loop is offered a share of the
// lower capacity of gofit and go-default, so neither side of the
// comparison the recommendation rests on is saturated. At 60% of the
// median over settings, as before, go-default (1000 rps) was offered 1,500
// here and its p99 went unmeasured, as on go-httpbin.
func TestOpenRateFromTheWeakerSide(t *testing.T) {
	l, f := newFakeLab(t, time.Hour)
	f.rps[result.SetGofit], f.rps[result.SetProcsNCPU] = 2500, 2600
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	capacity := pooled(runsOf(l.rec.CPU, cellKey{0.5, result.SetGoDefault, result.Closed})).RPS()
	for _, r := range f.rates[0.5] {
		if want := math.Round(0.6 * capacity); r != want {
			t.Fatalf("offered %v rps at 500m, want 60%% of go-default's %.0f: %.0f", r, capacity, want)
		}
	}
	for _, s := range l.results().CPUSummary {
		if s.Mode == result.Open && (s.Setting == result.SetGoDefault || s.Setting == result.SetGofit) && s.Saturated {
			t.Errorf("%s saturated at the weaker side's rate: %q", s.Setting, s.Notes)
		}
	}
}

// A comparison decided at a look stays decided: runs added after it (an
// open loop topped up to its latency count, in node_exporter's default
// run a sixth run after the fifth had decided open-loop p99 worse) inform
// the cell's estimate but do not reopen the verdict, which the A/A study
// priced at the looks alone. Before, the report read every run, and a
// go-default outlier in the sixth turned a decided "worse" into
// "undecided".
func TestDecidedAtALookStaysDecided(t *testing.T) {
	cfg := defaultConfig(false)
	cfg.Resamples = 400
	rng := rand.New(rand.NewSource(5))
	var rec Records
	add := func(setting string, rep int, rps float64) {
		bs := fakeBlocks(rng, 5, rps, 0.01, 1)
		s := stats.Sample{bs}
		rec.CPU = append(rec.CPU, result.CPUCell{QuotaCores: 0.25, Setting: setting, Mode: result.Closed, Repeat: rep,
			RPS: s.RPS(), P99: s.Quantile(0.99), Requests: int(s.RPS() * 5), Seconds: 5, Blocks: bs})
	}
	// Three runs a side (the first look): gofit 10% faster, decided.
	for rep := 1; rep <= 3; rep++ {
		add(result.SetGoDefault, rep, 1000)
		add(result.SetGofit, rep, 1100)
	}
	// A fourth, not a look, with go-default far faster for once.
	add(result.SetGoDefault, 4, 1600)
	add(result.SetGofit, 4, 1000)
	all := stats.NewBootstrap(cfg.Resamples, 1).Ratio(pooled(runsOf(rec.CPU, cellKey{0.25, result.SetGofit, result.Closed})),
		pooled(runsOf(rec.CPU, cellKey{0.25, result.SetGoDefault, result.Closed})), stats.StatRPS)
	if v, d := stats.Verdict(all, stats.StatRPS, stats.StatRPS.Margin()); d {
		t.Fatalf("the fixture's four runs a side decide %s on their own (%+v): it tests nothing", v, all)
	}
	res := analyse(cfg, rec)
	var got *result.CPUSummary
	for i, s := range res.CPUSummary {
		if s.Setting == result.SetGofit {
			got = &res.CPUSummary[i]
		}
	}
	if got == nil || got.Verdict == nil {
		t.Fatalf("no verdict for gofit at 250m: %+v", res.CPUSummary)
	}
	if *got.Verdict != stats.Better || !got.Decided {
		t.Errorf("verdict %s (decided %v), want better, decided at the first look; ratio %+v", *got.Verdict, got.Decided, got.VerdictRatio)
	}
	if got.Repeats != 4 || got.VerdictRuns != 3 {
		t.Errorf("the cell's own estimate rests on %d runs, want all 4; the verdict on %d a side, want the first look's 3", got.Repeats, got.VerdictRuns)
	}

	// The study sees the same: the comparison is closed, not repeated.
	l := newLab(cfg)
	l.rec = rec
	all2 := map[float64][]trial.CPUConfig{0.25: {{Quota: 0.25, Setting: result.SetGoDefault}, {Quota: 0.25, Setting: result.SetGofit}}}
	for _, task := range undecided(l.cfg, &l.rec, all2, []float64{0.25}) {
		if task.key.mode == result.Closed {
			t.Errorf("the study would run %+v again, of a comparison decided at its first look", task)
		}
	}
}

// A comparison whose projection cannot reach a verdict within
// --max-repeats stops at its second look instead of running to the last:
// node_exporter's throughput at 250m, its two settings within 1% and each
// run ±8%, took 12 runs a side and left three rows of the sweep
// uncompared. A real difference, 10% at half the run noise (the sample's
// throughput at 250m), runs on and is decided.
func TestFutileComparisonStopsEarly(t *testing.T) {
	l, f := newFakeLab(t, time.Hour)
	l.cfg.CPUSettings = []string{result.SetGoDefault, result.SetGofit}
	f.rps[result.SetGofit] = f.rps[result.SetGoDefault]
	f.noise[result.SetGofit], f.noise[result.SetGoDefault] = 0.1, 0.1
	f.runNoise = 0.08
	if err := l.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got result.CPUSummary
	for _, s := range l.results().CPUSummary {
		if s.Setting == result.SetGofit && s.Mode == result.Closed {
			got = s
		}
	}
	if got.Decided {
		t.Fatalf("decided %v at ±8%% run noise (%+v): the fixture tests nothing", *got.Verdict, got.VerdictRatio)
	}
	if n := f.runs[result.SetGofit+"/closed"]; n >= l.cfg.MaxRepeats {
		t.Errorf("the closed loop ran %d times a side, to --max-repeats %d, on a comparison projected to need more", n, l.cfg.MaxRepeats)
	}
	if !got.StoppedEarly || got.RunsToDecide <= l.cfg.MaxRepeats {
		t.Errorf("stopped_early %v, runs_to_decide %d: want true and over %d", got.StoppedEarly, got.RunsToDecide, l.cfg.MaxRepeats)
	}
	if !strings.Contains(strings.Join(got.Notes, " "), "the repeats gave up on it at its look at 5 runs a side") {
		t.Errorf("notes %q: want why the repeats stopped", got.Notes)
	}
	if r := strings.Join(l.results().Recommendation.Reasons, "\n"); !strings.Contains(r, "given up at 5 runs a side, as about ") {
		t.Errorf("the recommendation's reasons do not say the comparison was given up on:\n%s", r)
	}

	l2, f2 := newFakeLab(t, time.Hour)
	l2.cfg.CPUSettings = []string{result.SetGoDefault, result.SetGofit}
	f2.noise[result.SetGofit], f2.noise[result.SetGoDefault] = 0.1, 0.1
	f2.runNoise = 0.04 // gofit 10% faster, as newFakeLab has it
	if err := l2.cpuStudy(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range l2.results().CPUSummary {
		if s.Setting == result.SetGofit && s.Mode == result.Closed && (s.StoppedEarly || !s.Decided) {
			t.Errorf("a 10%% difference: stopped early %v, decided %v (%+v, %d runs a side)", s.StoppedEarly, s.Decided, s.VerdictRatio, s.VerdictRuns)
		}
	}
}

// runsToDecide projects on the square-root law with the few-runs widening
// taken out and put back: an interval already narrow enough needs no more
// runs, and a wider one needs more the wider it is.
func TestRunsToDecide(t *testing.T) {
	looks := defaultConfig(false).looks()
	if n, ok := runsToDecide(stats.Interval{Value: 1, Low: 0.98, High: 1.02}, 5, stats.StatRPS, looks, 12); !ok || n != 5 {
		t.Errorf("inside ±5%% at 5 runs: %d, %v; want 5, true", n, ok)
	}
	if _, ok := runsToDecide(stats.Interval{Value: 1, Low: math.Inf(-1), High: math.Inf(1)}, 2, stats.StatRPS, looks, 12); ok {
		t.Errorf("an infinite interval was projected")
	}
	prev := 0
	for _, half := range []float64{0.06, 0.08, 0.12, 0.2} {
		n, ok := runsToDecide(stats.Interval{Value: 1, Low: 1 / (1 + half), High: 1 + half}, 5, stats.StatRPS, looks, 1000)
		if !ok || n <= 5 || n < prev {
			t.Errorf("±%.0f%% at 5 runs: %d runs (after %d for a narrower one)", half*100, n, prev)
		}
		prev = n
	}
	// A skewed p99 interval a small step from "worse": only the side
	// facing 1 stands in its way, not the long far tail.
	skewed := stats.Interval{Value: 1.15, Low: 0.995, High: 1.6}
	if n, ok := runsToDecide(skewed, 5, stats.StatP99, looks, 12); !ok || n > 8 {
		t.Errorf("p99 ×1.15 [0.995–1.6] at 5 runs: %d runs, want a few more (the low side is 0.5%% from deciding)", n)
	}
	if n, _ := runsToDecide(stats.Interval{Value: 1, Low: 0.5, High: 2}, 150, stats.StatRPS, looks, 100); n <= 150 {
		t.Errorf("undecidable past limit 100 at 150 runs: %d, want more than the 150 it had", n)
	}
	// The futility stop: past the first look, before the last, and only
	// where the projection needs more than --max-repeats.
	cfg := defaultConfig(false)
	tie := stats.Interval{Value: 1.01, Low: 0.88, High: 1.16}
	for _, c := range []struct {
		r    stats.Interval
		n    int
		want bool
	}{
		{tie, 3, false}, // the first look: three runs' spread is too rough a guide
		{tie, 5, true},
		{tie, 8, true},
		{tie, cfg.MaxRepeats, false}, // the last look: nothing left to give up
		{skewed, 5, false},
		{stats.Interval{Value: 1.08, Low: 0.99, High: 1.18}, 5, false}, // 8% at 5 runs: decided within 12
	} {
		if got := cfg.futile(c.r, c.n, stats.StatRPS); got != c.want {
			runs, _ := runsToDecide(c.r, c.n, stats.StatRPS, cfg.looks(), cfg.MaxRepeats)
			t.Errorf("futile(%+v at %d runs) = %v, want %v (projected %d runs)", c.r, c.n, got, c.want, runs)
		}
	}
	// Without the widening, ±8% at 5 runs a side would project to
	// 5×(0.077/0.049)² ≈ 13; with it taken out and put back, to fewer.
	if n, _ := runsToDecide(stats.Interval{Value: 1, Low: 1 / 1.08, High: 1.08}, 5, stats.StatRPS, looks, 1000); n >= 13 {
		t.Errorf("±8%% at 5 runs: %d runs, want under the plain square-root law's 13", n)
	}
}

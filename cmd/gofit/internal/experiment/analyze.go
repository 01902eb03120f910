// Package experiment is `gofit experiment report`: it finds an
// experiment's arms and their pods (the API server for live pods,
// Prometheus for gone ones), fetches each pod's series from Prometheus
// into paired time windows, and judges every arm against the control
// with the statistics the lab uses (package stats). Fetching is I/O
// (fetch.go); Analyze is a pure function of the fetched windows, and
// rendering (report.go) a pure function of its result.
package experiment

import (
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// Bucket is one latency histogram bucket: Count requests took more than
// Lower and at most Upper seconds.
type Bucket struct{ Lower, Upper, Count float64 }

// Window is what one pod did in one time window. Window i of every pod of
// every arm covers the same stretch of time.
type Window struct {
	Has        Source // the sources that reported in the window
	Requests   float64
	Errors     float64
	Latency    []Bucket // non-cumulative, by Upper
	CPUSeconds float64
	Periods    float64 // CFS periods, and those throttled
	Throttled  float64
	GCSeconds  float64 // CPU seconds the Go GC used, of GoBusy the runtime's busy CPU
	GoBusy     float64
	Pauses     float64 // GC stop-the-world pauses, and their total seconds
	PauseSecs  float64
	WorkingSet float64 // bytes, the pod's mean over the window
	Heap       float64
	OOMKills   float64
	Restarts   float64
	// Unready is the share of the window the pod was not ready (or,
	// without kube-state-metrics, did not answer its scrapes): a Go
	// service near its memory limit often stalls rather than dies, and
	// a stalled pod has no latency to judge.
	Unready float64

	grid   *grid     // set by Analyze: the latency buckets of every window
	counts []float64 // Latency's counts on grid
}

// Source is a set of kinds of data a window has: a metric is computed
// over the windows that have what it needs, so that a pod without a
// source (GOFIT=off switches gofit's own metrics off) counts as missing,
// never as zero.
type Source uint16

// The kinds of data.
const (
	HasLatency Source = 1 << iota
	HasCPU
	HasThrottling
	HasGC
	HasPauses
	HasMemory
	HasHeap
	HasReady
	// HasPod: the pod existed in the window, whose figures are left out
	// (its warm-up): it was at risk of its harms' events, which still
	// count, so the harm tests' risk sets and exposure do not depend on
	// whether an event came.
	HasPod
	HasAll = HasLatency | HasCPU | HasThrottling | HasGC | HasPauses | HasMemory | HasHeap
)

// grid is the union of the buckets of every window of an analysis, so
// that a resample's histogram is a sum of arrays, not of maps: a report
// draws thousands of resamples per metric.
type grid struct{ lower, upper []float64 }

func newGrid(arms []Arm) *grid {
	seen := map[[2]float64]bool{}
	for _, a := range arms {
		for _, ws := range a.Windows {
			for _, w := range ws {
				for _, b := range w.Latency {
					seen[[2]float64{b.Lower, b.Upper}] = true
				}
			}
		}
	}
	keys := make([][2]float64, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][1] != keys[j][1] {
			return keys[i][1] < keys[j][1]
		}
		return keys[i][0] < keys[j][0]
	})
	g := &grid{}
	for _, k := range keys {
		g.lower, g.upper = append(g.lower, k[0]), append(g.upper, k[1])
	}
	pos := map[[2]float64]int{}
	for i, k := range keys {
		pos[k] = i
	}
	for ai := range arms {
		for _, ws := range arms[ai].Windows {
			for wi := range ws {
				ws[wi].grid = g
				ws[wi].counts = make([]float64, len(keys))
				for _, b := range ws[wi].Latency {
					ws[wi].counts[pos[[2]float64{b.Lower, b.Upper}]] += b.Count
				}
			}
		}
	}
	return g
}

func (g *grid) quantile(ws []Window, p float64) float64 {
	sum := make([]float64, len(g.upper))
	total := 0.0
	for _, w := range ws {
		for j, c := range w.counts {
			sum[j] += c
			total += c
		}
	}
	if total <= 0 {
		return math.NaN()
	}
	want, seen := p*total, 0.0
	for j, c := range sum {
		if c > 0 && seen+c >= want {
			if math.IsInf(g.upper[j], 1) {
				return g.lower[j]
			}
			return g.lower[j] + (g.upper[j]-g.lower[j])*(want-seen)/c
		}
		seen += c
	}
	return g.lower[len(g.lower)-1]
}

// Arm is one arm's fetched data: Windows[p][i] is pod Pods[p] in window
// i.
type Arm struct {
	Name    string
	Pods    []string
	Windows [][]Window
}

// flat lists the windows idx of the pods units (indices into Pods), in
// buf.
func (a *Arm) flat(idx, units []int, buf []Window) []Window {
	buf = buf[:0]
	for _, u := range units {
		for _, i := range idx {
			buf = append(buf, a.Windows[u][i])
		}
	}
	return buf
}

// Input is everything Analyze needs: the fetched arms over the same
// windows, and which metrics had a source.
type Input struct {
	Experiment string
	Namespace  string
	Workload   string // the experiment's workload, "" when not known
	Control    string
	From, To   time.Time
	Window     time.Duration
	Arms       []Arm
	// Have names the metrics that had a source (Metrics' names; the
	// latency quantiles go with "latency").
	Have map[string]bool
	// Sources says where each kind of data came from, for the report.
	Sources map[string]string
	// Notes are the fetch's warnings, carried into the results.
	Notes []string
	// Restarts per arm counted by the API server for live pods (the
	// windows add what Prometheus kept for gone ones).
	Resamples int
	Seed      int64
	// Nodes counts each arm's live pods per node (Spec.Nodes), for the
	// report's arm × node balance; nil when not known.
	Nodes map[string]map[string]int
	// Seq holds the error over the plan's looks, metrics and arms; nil
	// judges this analysis alone, each test at 95%.
	Seq *Sequential
	// Harm is what makes an arm harmful relative to the control; the
	// zero value is DefaultHarm.
	Harm Harm
	// Planned is the experiment's maxDuration as its spec says (0:
	// none); the report plans its looks over it.
	Planned time.Duration
	// VerdictsOnly leaves out each arm's own intervals and series (the
	// guard reads only the verdicts; they are half the work).
	VerdictsOnly bool
}

// Harm is the margins beyond the control's that make an arm harmful.
type Harm struct {
	// Rate: restarts and OOM kills per pod-window, and the error share,
	// more than (1+Rate) times the control's (0.5: half as many again).
	Rate float64
	// ErrorShare: and the error share at least this much above it
	// (0.001: one request in a thousand), so that 0 errors against 0.01%
	// is not harm.
	ErrorShare float64
	// Latency: p99 more than (1+Latency) times the control's (0.25).
	Latency float64
	// Unready: the share of pod-time not ready more than (1+Rate) times
	// the control's and at least this much above it (0.01: 36 s an hour).
	Unready float64
}

// DefaultHarm is the harm margins when Input.Harm is zero.
func DefaultHarm() Harm { return Harm{Rate: 0.5, ErrorShare: 0.001, Latency: 0.25, Unready: 0.01} }

// Metric is one figure an arm is judged on.
type Metric struct {
	Name   string // results.json key
	Label  string // for people
	Unit   string
	Needs  string // which source it needs (Input.Have)
	Dir    stats.Direction
	Margin float64 // equivalence margin of "same"
	// Verdict false: reported, never judged (traffic the load balancer
	// splits, not the arm's doing).
	Verdict bool
	of      func(ws []Window) float64
}

// Metrics lists what the report computes, in its order.
func Metrics() []Metric {
	// ratio sums a and b over the windows that have need; NaN when none.
	ratio := func(need Source, a, b func(Window) float64) func([]Window) float64 {
		return func(ws []Window) float64 {
			var x, y float64
			n := 0
			for _, w := range ws {
				if w.Has&need == need {
					x, y, n = x+a(w), y+b(w), n+1
				}
			}
			if n == 0 {
				return math.NaN()
			}
			return div(x, y)
		}
	}
	one := func(Window) float64 { return 1 }
	q := func(p float64) func([]Window) float64 {
		return func(ws []Window) float64 { return Quantile(ws, p) }
	}
	return []Metric{
		{Name: "requests_per_second", Label: "requests/s per pod", Unit: "/s", Needs: "latency", Dir: stats.HigherIsBetter, Margin: 0.05,
			of: nil}, // set by Analyze: it needs the window's length
		{Name: "p50_seconds", Label: "latency p50", Unit: "s", Needs: "latency", Margin: 0.10, Verdict: true, of: q(0.50)},
		{Name: "p90_seconds", Label: "latency p90", Unit: "s", Needs: "latency", Margin: 0.10, Verdict: true, of: q(0.90)},
		{Name: "p99_seconds", Label: "latency p99", Unit: "s", Needs: "latency", Margin: 0.10, Verdict: true, of: q(0.99)},
		{Name: "p99_9_seconds", Label: "latency p99.9", Unit: "s", Needs: "latency", Margin: 0.20, Verdict: true, of: q(0.999)},
		{Name: "error_share", Label: "errors", Unit: "share", Needs: "latency", Margin: 0.10,
			of: ratio(HasLatency, func(w Window) float64 { return w.Errors }, func(w Window) float64 { return w.Requests })},
		{Name: "cpu_cores", Label: "CPU cores per pod", Unit: "cores", Needs: "cpu", Margin: 0.05, Verdict: true, of: nil},
		{Name: "cpu_seconds_per_request", Label: "CPU s/request", Unit: "s", Needs: "cpu+latency", Margin: 0.05, Verdict: true,
			of: ratio(HasCPU|HasLatency, func(w Window) float64 { return w.CPUSeconds }, func(w Window) float64 { return w.Requests })},
		{Name: "throttled_share", Label: "throttled periods", Unit: "share", Needs: "throttling", Margin: 0.10, Verdict: true,
			of: ratio(HasThrottling, func(w Window) float64 { return w.Throttled }, func(w Window) float64 { return w.Periods })},
		{Name: "gc_cpu_share", Label: "GC share of CPU", Unit: "share", Needs: "gc", Margin: 0.10, Verdict: true,
			of: ratio(HasGC, func(w Window) float64 { return w.GCSeconds }, func(w Window) float64 { return w.GoBusy })},
		{Name: "gc_pause_seconds", Label: "mean GC pause", Unit: "s", Needs: "pauses", Margin: 0.20, Verdict: true,
			of: ratio(HasPauses, func(w Window) float64 { return w.PauseSecs }, func(w Window) float64 { return w.Pauses })},
		{Name: "working_set_bytes", Label: "working set per pod", Unit: "bytes", Needs: "memory", Margin: 0.05, Verdict: true,
			of: ratio(HasMemory, func(w Window) float64 { return w.WorkingSet }, one)},
		{Name: "heap_bytes", Label: "Go heap per pod", Unit: "bytes", Needs: "heap", Margin: 0.05, Verdict: true,
			of: ratio(HasHeap, func(w Window) float64 { return w.Heap }, one)},
	}
}

// Quantile is the latency quantile p of the windows' pooled histogram,
// interpolated linearly within the bucket it falls in, as Prometheus's
// histogram_quantile does; NaN without requests.
func Quantile(ws []Window, p float64) float64 {
	if len(ws) > 0 && ws[0].grid != nil {
		return ws[0].grid.quantile(ws, p)
	}
	agg := map[[2]float64]float64{}
	total := 0.0
	for _, w := range ws {
		for _, b := range w.Latency {
			agg[[2]float64{b.Lower, b.Upper}] += b.Count
			total += b.Count
		}
	}
	if total <= 0 {
		return math.NaN()
	}
	bs := make([]Bucket, 0, len(agg))
	for k, c := range agg {
		bs = append(bs, Bucket{k[0], k[1], c})
	}
	sort.Slice(bs, func(a, b int) bool { return bs[a].Upper < bs[b].Upper })
	want, seen := p*total, 0.0
	for _, b := range bs {
		if b.Count > 0 && seen+b.Count >= want {
			if math.IsInf(b.Upper, 1) {
				return b.Lower // as histogram_quantile: the highest finite bound
			}
			return b.Lower + (b.Upper-b.Lower)*(want-seen)/b.Count
		}
		seen += b.Count
	}
	return bs[len(bs)-1].Lower
}

func div(a, b float64) float64 {
	switch {
	case b != 0:
		return a / b
	case a > 0:
		// Something over nothing: the arm is infinitely above a
		// control that had none (a resample of windows in which the
		// control never collected), a direction, not a gap.
		return math.Inf(1)
	}
	return math.NaN()
}

// Value is a figure and its 95% interval, as results.json carries it.
type Value struct {
	Value F `json:"value"`
	Low   F `json:"low"`
	High  F `json:"high"`
}

// F is a float that JSON carries as null when it is not finite (no data,
// or an interval with too few windows to bound it).
type F float64

// MarshalJSON implements json.Marshaler.
func (f F) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'g', -1, 64), nil
}

// ArmResult is one arm's figures.
type ArmResult struct {
	Name    string           `json:"name"`
	Pods    []string         `json:"pods"`
	Nodes   map[string]int   `json:"nodes,omitempty"` // live pods per node: an arm crowded on one node measures the node
	Windows int              `json:"windows"`         // windows with data
	Metrics map[string]Value `json:"metrics"`
	// OOMKills and Restarts are counts over the whole span.
	OOMKills float64 `json:"oom_kills"`
	Restarts float64 `json:"restarts"`
	// Unready is the share of the arm's pod-time not ready (NaN: no
	// source said).
	Unready F    `json:"unready_share"`
	Harmful bool `json:"harmful"`
	// HarmEvidence is the largest e-value of the arm's harm tests'
	// weighted mean over the windows (harm.go): harmful from 1/HarmAlpha.
	HarmEvidence F `json:"harm_evidence"`
	// HarmfulAt is the end of the window at which it first got there.
	HarmfulAt *time.Time `json:"harmful_at,omitempty"`
	Harms     []string   `json:"harms"`
	// Traffic is the arm's requests per pod against the control's when
	// they differ (the interval excludes 1 ± 5%), empty otherwise.
	Traffic string `json:"traffic,omitempty"`
}

// MinPods is the fewest pods an arm should have: the report warns below.
const MinPods = 3

// Verdict is one arm's metric against the control's.
type Verdict struct {
	Arm     string  `json:"arm"`
	Metric  string  `json:"metric"`
	Verdict string  `json:"verdict"` // harmful, better, worse, same, undecided
	Ratio   F       `json:"ratio"`   // arm ÷ control
	Low     F       `json:"low"`
	High    F       `json:"high"`
	Margin  float64 `json:"margin"` // same: the interval lies within 1 ± margin
	// Level is the interval's level: below 95% of a single look's when
	// the error is shared among looks, metrics and arms.
	Level  float64 `json:"level"`
	Detail string  `json:"detail,omitempty"`
}

// Verdict values beyond the lab's.
const Harmful = "harmful"

// Results is results.json.
type Results struct {
	Experiment    string            `json:"experiment"`
	Namespace     string            `json:"namespace"`
	Workload      string            `json:"workload,omitempty"`
	Control       string            `json:"control"`
	From          time.Time         `json:"from"`
	To            time.Time         `json:"to"`
	WindowSeconds float64           `json:"window_seconds"`
	Windows       int               `json:"windows"`
	BlockWindows  int               `json:"block_windows"`
	Resamples     int               `json:"resamples"`
	Seed          int64             `json:"seed"`
	Sources       map[string]string `json:"sources"`
	Arms          []ArmResult       `json:"arms"`
	Verdicts      []Verdict         `json:"verdicts"`
	Notes         []string          `json:"notes"`
	// Look is this analysis's look, counted from the experiment's start
	// in the plan's spacing (1 without a plan), and Looks the planned
	// length's (it may be passed: the intervals hold at any look); Tests
	// is how many tests share Alpha, the chance of any false verdict.
	Look  int `json:"look"`
	Looks int `json:"looks"`
	// AnytimeValid: the quality intervals are a confidence sequence
	// from the span's start (with a plan), not one reading's 95%.
	AnytimeValid bool    `json:"anytime_valid"`
	Tests        int     `json:"tests"`
	Alpha        float64 `json:"alpha"`
	// HarmAlpha is each arm's chance of a false harmful verdict, at any
	// window, however often it is looked at.
	HarmAlpha float64 `json:"harm_alpha"`
	// Series are per-arm time series for the plots (not in results.json).
	Series []ArmSeries `json:"-"`
}

// ArmSeries is one arm's per-window figures, for the plots.
type ArmSeries struct {
	Arm    string
	T      []time.Time
	Values map[string][]float64 // by metric name
}

// Analyze judges every arm against the control. It is pure: the same
// input and seed give the same results.
func Analyze(in Input) (*Results, error) {
	ctrl, n, err := checkArms(in)
	if err != nil {
		return nil, err
	}
	if in.Resamples <= 0 {
		in.Resamples = 1000
	}
	// Analyze must not change its input: the windows get their grid on
	// copies.
	in.Arms = copyArms(in.Arms)
	newGrid(in.Arms)
	a := newAnalysis(in, n)
	for i := range in.Arms {
		a.describe(&in.Arms[i])
	}
	for i := range in.Arms {
		if i != ctrl {
			a.compare(i, ctrl)
		}
	}
	return a.res, nil
}

// checkArms finds the control and checks that every arm's pods have
// windows, paired: it gives the control's index and the windows.
func checkArms(in Input) (ctrl, n int, err error) {
	ctrl = -1
	for i, a := range in.Arms {
		if a.Name == in.Control {
			ctrl = i
		}
	}
	if ctrl < 0 {
		return 0, 0, fmt.Errorf("control arm %q has no data", in.Control)
	}
	n = -1
	for _, a := range in.Arms {
		if len(a.Pods) == 0 || len(a.Windows) != len(a.Pods) {
			return 0, 0, fmt.Errorf("arm %s: %d pods, %d pods' windows", a.Name, len(a.Pods), len(a.Windows))
		}
		for p, ws := range a.Windows {
			if n < 0 {
				n = len(ws)
			}
			if len(ws) != n {
				return 0, 0, fmt.Errorf("arm %s pod %s has %d windows, others %d: windows must be paired", a.Name, a.Pods[p], len(ws), n)
			}
		}
	}
	return ctrl, n, nil
}

// copyArms copies the arms with their windows.
func copyArms(in []Arm) []Arm {
	arms := make([]Arm, len(in))
	for i, a := range in {
		arms[i] = a
		arms[i].Windows = make([][]Window, len(a.Windows))
		for p, ws := range a.Windows {
			arms[i].Windows[p] = append([]Window(nil), ws...)
		}
	}
	return arms
}

// analysis is one Analyze's state: its input (the windows on their
// grid), the metrics it has data for, its levels, the bootstrap (whose
// draws follow the order of the calls) and the results as they fill in.
type analysis struct {
	in    Input
	n     int // windows
	ms    []Metric
	rps   Metric
	harm  Harm
	level float64 // the quality verdicts' α at this look
	// harmBar is the e-value that makes an arm harmful: 1 / HarmAlpha.
	harmBar    float64
	b          *stats.Bootstrap
	bufA, bufC []Window
	res        *Results
}

// newAnalysis sets the metrics, the tests of this look and their levels
// (the sequential plan's where there is one), and the notes they need.
func newAnalysis(in Input, n int) *analysis {
	sec := in.Window.Seconds()
	a := &analysis{in: in, n: n, ms: Metrics(), harm: in.Harm, b: stats.NewBootstrap(in.Resamples, in.Seed)}
	for i := range a.ms {
		switch a.ms[i].Name {
		case "requests_per_second":
			a.ms[i].of = perPodSecond(HasLatency, func(w Window) float64 { return w.Requests }, sec)
		case "cpu_cores":
			a.ms[i].of = perPodSecond(HasCPU, func(w Window) float64 { return w.CPUSeconds }, sec)
		}
	}
	if a.harm == (Harm{}) {
		a.harm = DefaultHarm()
	}
	res := &Results{
		Experiment: in.Experiment, Namespace: in.Namespace, Workload: in.Workload, Control: in.Control, From: in.From, To: in.To,
		WindowSeconds: sec, Windows: n, BlockWindows: stats.WindowBlock(n), Resamples: in.Resamples, Seed: in.Seed,
		Sources: in.Sources, Notes: append([]string{}, in.Notes...), Verdicts: []Verdict{},
		Look: 1, Looks: 1, Alpha: 0.05,
	}
	a.res = res
	for _, m := range a.ms {
		if m.Name == "requests_per_second" {
			a.rps = m
		}
	}
	// The tests of this look: every quality verdict of every arm but the
	// control. Harm has its own α (harm.go), never shared with them: the
	// guard acts on harm alone.
	perArm := 0
	for _, m := range a.ms {
		if m.Verdict && a.have(m) {
			perArm++
		}
	}
	res.Tests = perArm * (len(in.Arms) - 1)
	a.level = 0.05
	res.HarmAlpha = 0.05
	if in.Seq != nil {
		span := time.Duration(n) * in.Window
		res.Look, res.Looks, res.Alpha, res.AnytimeValid = in.Seq.Look(span), in.Seq.K, in.Seq.Looks.Alpha, true
		a.level = in.Seq.Level(span, res.Tests)
		// The plan's α again, for harm: anytime-valid over every window
		// from the start, shared by the arms.
		res.HarmAlpha = in.Seq.Rule.Share(len(in.Arms) - 1)
		res.Notes = append(res.Notes, fmt.Sprintf("look %d (every %v; %v from the start, the intervals tightest at %v): %g chance of any false quality verdict at any look, ever, shared by %d tests: each interval reaches %.2f standard errors (a single reading's 95%%: 1.96); harm anytime-valid at %.3g an arm over every window from the start",
			res.Look, in.Seq.Looks.Every, span, in.Seq.Looks.Planned, res.Alpha, res.Tests, in.Seq.Z(span, res.Tests), res.HarmAlpha))
	}
	a.harmBar = 1 / res.HarmAlpha
	if n < stats.MinWindows {
		res.Notes = append(res.Notes, fmt.Sprintf("only %d windows: at least %d are needed for an interval; every verdict is undecided (run longer or use a shorter --window)", n, stats.MinWindows))
	}
	return a
}

// have reports whether the input has every series m needs.
func (a *analysis) have(m Metric) bool {
	for _, need := range splitPlus(m.Needs) {
		if !a.in.Have[need] {
			return false
		}
	}
	return true
}

// describe adds arm's own figures: its counts, its windows with data,
// its time not ready, and each metric's value with its interval and per
// window (the plots' series).
func (a *analysis) describe(arm *Arm) {
	in, n, res := a.in, a.n, a.res
	if len(arm.Pods) < MinPods {
		res.Notes = append(res.Notes, fmt.Sprintf("arm %s has %d pods, fewer than %d: a difference of a pod's own (its node, its neighbours) can hardly be told from the arm's", arm.Name, len(arm.Pods), MinPods))
	}
	ar := ArmResult{Name: arm.Name, Pods: append([]string{}, arm.Pods...), Nodes: maps.Clone(in.Nodes[arm.Name]), Metrics: map[string]Value{}, Harms: []string{}, Unready: F(math.NaN())}
	series := ArmSeries{Arm: arm.Name, Values: map[string][]float64{}}
	for i := range n {
		any := false
		for _, ws := range arm.Windows {
			ar.OOMKills += ws[i].OOMKills
			ar.Restarts += ws[i].Restarts
			any = any || ws[i].Has&^HasPod != 0
		}
		if any {
			ar.Windows++
		}
		series.T = append(series.T, in.From.Add(time.Duration(i)*in.Window))
	}
	all := allUnits(len(arm.Pods))
	if in.Have["ready"] {
		a.bufA = arm.flat(allUnits(n), all, a.bufA)
		ar.Unready = F(unready(a.bufA))
	}
	units := []int{len(arm.Pods)}
	for _, m := range a.ms {
		if !a.have(m) || in.VerdictsOnly {
			continue
		}
		iv := a.b.PairedUnits(n, units, func(idx []int, u [][]int) float64 {
			a.bufA = arm.flat(idx, u[0], a.bufA)
			return m.of(a.bufA)
		})
		ar.Metrics[m.Name] = Value{F(iv.Value), F(iv.Low), F(iv.High)}
		vs := make([]float64, n)
		for i := range vs {
			a.bufA = arm.flat([]int{i}, all, a.bufA)
			vs[i] = m.of(a.bufA)
		}
		series.Values[m.Name] = vs
	}
	res.Arms = append(res.Arms, ar)
	res.Series = append(res.Series, series)
}

// compare judges arm i against the control: harm first, then whether
// its traffic is the control's, then each quality verdict.
func (a *analysis) compare(i, ctrl int) {
	in, n, res := a.in, a.n, a.res
	arm, c := &in.Arms[i], &in.Arms[ctrl]
	ar, cr := &res.Arms[i], &res.Arms[ctrl]
	// Harm first: an arm that kills pods or fails requests beyond
	// what the control does is flagged whatever its latency or CPU.
	// Anytime-valid (harm.go): the e-process from the first window,
	// at the harm's own α, shared by the arms under test.
	ev := harmEvidence(arm, c, n, a.harm, in.Have, in.Seed, a.harmBar)
	ar.HarmEvidence = F(ev.E)
	if ev.First >= 0 {
		at := in.From.Add(time.Duration(ev.First+1) * in.Window)
		ar.Harms = append(ar.Harms, harmSummary(ev, n, fmt.Sprintf("window %d of %d (%s)", ev.First+1, n, at.UTC().Format(time.RFC3339))))
		ar.HarmfulAt = &at
	}
	ar.Harmful = len(ar.Harms) > 0
	if in.Have["ready"] && (math.IsNaN(float64(ar.Unready)) || math.IsNaN(float64(cr.Unready))) {
		res.Notes = append(res.Notes, fmt.Sprintf("arm %s: time not ready not judged: no readiness data for it or for %s (missing, never taken as ready)", arm.Name, in.Control))
	}
	a.b.Alpha = a.level
	a.traffic(arm, c, ar)
	for _, h := range ar.Harms {
		res.Verdicts = append(res.Verdicts, Verdict{Arm: arm.Name, Metric: "harm", Verdict: Harmful, Ratio: F(math.NaN()), Low: F(math.NaN()), High: F(math.NaN()), Level: 1 - 1/a.harmBar, Detail: h})
	}
	for _, m := range a.ms {
		if m.Verdict && a.have(m) {
			res.Verdicts = append(res.Verdicts, a.verdict(m, arm, c, ar))
		}
	}
}

// traffic says whether arm gets the control's requests per pod.
// Unequal traffic: a least-request balancer sends less to a slower arm,
// whose latency then looks better than it is.
func (a *analysis) traffic(arm, c *Arm, ar *ArmResult) {
	if !a.have(a.rps) {
		return
	}
	rps := a.rps
	a.b.Alpha = 0.05
	iv := a.b.PairedUnits(a.n, []int{len(arm.Pods), len(c.Pods)}, func(idx []int, u [][]int) float64 {
		a.bufA, a.bufC = arm.flat(idx, u[0], a.bufA), c.flat(idx, u[1], a.bufC)
		return div(rps.of(a.bufA), rps.of(a.bufC))
	})
	if iv.Low > 1+rps.Margin || iv.High < 1-rps.Margin {
		ar.Traffic = fmt.Sprintf("%.3g× %s's requests per pod (95%% interval %.3g to %.3g)", iv.Value, a.in.Control, iv.Low, iv.High)
		a.res.Notes = append(a.res.Notes, fmt.Sprintf("arm %s gets %s: unequal traffic. A least-request balancer sends less to a slower arm, which then looks better; judge its latency with care", arm.Name, ar.Traffic))
	}
	a.b.Alpha = a.level
}

// verdict is m's verdict on arm against the control c.
func (a *analysis) verdict(m Metric, arm, c *Arm, ar *ArmResult) Verdict {
	iv := a.b.PairedUnits(a.n, []int{len(arm.Pods), len(c.Pods)}, func(idx []int, u [][]int) float64 {
		a.bufA, a.bufC = arm.flat(idx, u[0], a.bufA), c.flat(idx, u[1], a.bufC)
		return div(m.of(a.bufA), m.of(a.bufC))
	})
	v := Verdict{Arm: arm.Name, Metric: m.Name, Ratio: F(iv.Value), Low: F(iv.Low), High: F(iv.High), Margin: m.Margin,
		Level: 1 - a.b.Alpha, Verdict: stats.RatioVerdict(iv, m.Dir, m.Margin)}
	switch {
	case math.IsNaN(iv.Value):
		v.Verdict, v.Detail = stats.Undecided, "no data for one side"
	case math.IsInf(iv.Value, 0):
		v.Verdict, v.Detail = stats.Undecided, fmt.Sprintf("%s's is 0: no ratio", a.in.Control)
	case m.Name == "cpu_cores" && ar.Traffic != "" && (v.Verdict == stats.Better || v.Verdict == stats.Worse):
		// A pod's CPU follows its requests: with unequal
		// traffic, the balancer and not the setting moved it.
		v.Verdict, v.Detail = stats.Undecided, "the arm's traffic differs ("+ar.Traffic+"), and CPU per pod follows it: judge CPU per request"
	}
	return v
}

// unready is the share of the windows' pod-time not ready, over the
// windows that have a readiness source.
func unready(ws []Window) float64 {
	var s, t float64
	for _, w := range ws {
		if w.Has&HasReady != 0 {
			s += w.Unready
			t++
		}
	}
	if t == 0 {
		return math.NaN()
	}
	return s / t
}

func allUnits(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// perPodSecond is f per second per pod over the windows that have need.
func perPodSecond(need Source, f func(Window) float64, sec float64) func([]Window) float64 {
	return func(ws []Window) float64 {
		var s, pods float64
		for _, w := range ws {
			if w.Has&need == need {
				s, pods = s+f(w), pods+1
			}
		}
		if pods == 0 {
			return math.NaN()
		}
		return s / (pods * sec)
	}
}

func nz(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return x
}

func splitPlus(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '+' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

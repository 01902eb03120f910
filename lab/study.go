// Package lab runs a service under real cgroup limits on one Linux machine,
// drives load at it, sweeps Go runtime settings, finds its memory floor and
// recommends settings. It is what `gofit lab` runs.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
)

// CPU settings.
const (
	SetProcs1    = "gomaxprocs=1"
	SetGoDefault = "go-default"
	SetGofit     = "gofit"
	SetProcsNCPU = "gomaxprocs=ncpu"
)

// Memory settings.
const (
	SetNone         = "none"
	SetLimitGCOff   = "gomemlimit=limit,gogc=off"
	SetAutoMemLimit = "automemlimit" // GOMEMLIMIT = 0.9 × limit, as KimMachineGun/automemlimit and Prometheus' --auto-gomemlimit set
	sampleGODEBUG   = "containermaxprocs=1,updatemaxprocs=1"
	memConcurrency  = 8
	// A memory trial whose throughput falls below this share of the
	// unlimited probe's, while it faults pages in, is stalled.
	stallShare = 0.1
	// automemlimitRatio is the share of the limit automemlimit gives GOMEMLIMIT.
	automemlimitRatio = 0.9
	// cfsPeriod is the kernel's default CFS period; a closed-loop window
	// spans at least minPeriods of them, so a burst of one period moves
	// throughput by at most 2%.
	cfsPeriod  = 100 * time.Millisecond
	minPeriods = 50
	// maxErrorShare is the error rate above which a cell is marked failed.
	maxErrorShare = 0.01
)

// Config is a study.
type Config struct {
	Target Target
	// Sample is set when Target is the embedded sample, whose main module
	// is run with Go ≥ 1.25's GOMAXPROCS default (see README).
	Sample bool

	Quotas        []float64     // CPU quotas in cores
	CPUSettings   []string      // of SetProcs1, SetGoDefault, SetGofit, SetProcsNCPU
	MinRepeats    int           // of each CPU cell, interleaved
	MaxRepeats    int           // adaptive repeats stop here
	Requests      int           // closed loop: requests per window (0: ClosedWindow decides)
	ClosedWindow  time.Duration // closed loop: window length (≥ 50 CFS periods)
	Concurrency   int           // closed loop: workers
	Warmup        time.Duration // before every window; excluded from every figure
	OpenFraction  float64       // open loop: share of the quota's median closed-loop capacity
	OpenSamples   int           // open loop: latencies per summary cell, pooled over repeats
	OpenDuration  time.Duration // open loop: fixed window per run (0: OpenSamples decides)
	MinOpenWindow time.Duration
	TargetRPS     float64       // open loop at this rate at every quota, and recommend for it
	SLOP99        time.Duration // with TargetRPS: the p99 the recommendation must meet
	Budget        time.Duration // wall time the adaptive repeats must fit in
	MemSettings   []string      // of SetNone, SetGofit, SetLimitGCOff, SetAutoMemLimit
	MemRequests   int           // requests per memory trial
	Probes        int           // unlimited memory probes; their median is the healthy reference
	Multiples     []float64     // of the no-knob floor, for throughput
	Resolution    int64         // of the floor, bytes
	ConfirmNeed   int           // k of n at the floor's edge
	ConfirmOf     int
	Resamples     int       // bootstrap resamples
	Warnings      []string  // minimums the user overrode (from the command line)
	Progress      io.Writer // progress lines; nil for none
}

// DefaultConfig is the default study, or with quick the reduced one.
func DefaultConfig(quick bool) Config {
	ncpu := float64(runtime.NumCPU())
	c := Config{
		Quotas:        []float64{0.25, 0.5, 1, ncpu},
		CPUSettings:   []string{SetProcs1, SetGoDefault, SetGofit, SetProcsNCPU},
		MinRepeats:    2,
		MaxRepeats:    5,
		ClosedWindow:  minPeriods * cfsPeriod,
		Concurrency:   16,
		Warmup:        time.Second,
		OpenFraction:  0.6,
		OpenSamples:   5000,
		MinOpenWindow: minPeriods * cfsPeriod,
		Budget:        15 * time.Minute,
		MemSettings:   []string{SetGofit, SetNone, SetAutoMemLimit, SetLimitGCOff},
		Probes:        3,
		MemRequests:   1200,
		Multiples:     []float64{1, 1.5, 2},
		Resolution:    1 << 20,
		ConfirmNeed:   2,
		ConfirmOf:     3,
		Resamples:     1000,
	}
	if ncpu <= 1 {
		c.Quotas = []float64{0.25, 0.5, 1}
	}
	if quick {
		c.Quotas = []float64{0.25}
		c.CPUSettings = []string{SetProcs1, SetGoDefault, SetGofit}
		c.MaxRepeats = 3
		c.Budget = 4 * time.Minute
		// gofit against the peer users would pick instead; the no-knob
		// floor and its multiples are the default study's.
		c.MemSettings = []string{SetGofit, SetAutoMemLimit}
		c.MemRequests = 800
		c.Multiples = nil
		c.Probes = 2
		c.Resolution = 4 << 20
		c.ConfirmNeed, c.ConfirmOf = 1, 1
	}
	return c
}

// Results is results.json; the README documents the schema.
type Results struct {
	Machine        Machine          `json:"machine"`
	Target         TargetInfo       `json:"target"`
	Placement      *Placement       `json:"placement"`
	CPU            []CPUCell        `json:"cpu"`
	CPUSummary     []CPUSummary     `json:"cpu_summary"`
	Memory         []MemResult      `json:"memory"`
	Throughput     []ThroughputCell `json:"memory_throughput"`
	Recommendation Recommendation   `json:"recommendation"`
	Lab            LabInfo          `json:"lab"`
}

// Machine describes where the study ran.
type Machine struct {
	CPUs          int    `json:"cpus"`
	CgroupVersion int    `json:"cgroup_version"`
	GoVersion     string `json:"go_version"`
	Kernel        string `json:"kernel"`
	LoadAvg       string `json:"loadavg_at_start"` // /proc/loadavg: other work on the machine
}

// TargetInfo describes the service studied.
type TargetInfo struct {
	Command       string  `json:"command"`
	URL           string  `json:"url"`
	Sample        bool    `json:"sample"`
	BinaryBytes   int64   `json:"binary_bytes"`
	PageCache     string  `json:"page_cache"` // "cold" or "warm" at each memory trial's start
	PeakBytes     uint64  `json:"peak_unlimited_bytes"`
	ProbeRPS      float64 `json:"probe_rps"`
	ProbeP99      float64 `json:"probe_p99_ms"`
	ProbeCPU      float64 `json:"probe_cpu_cores"` // the CPU limit of every memory trial (0: none)
	GoDefaultNote string  `json:"go_default"`
}

// LabInfo is the lab's own cost, and what it could not do.
type LabInfo struct {
	WallSeconds         float64  `json:"wall_seconds"`
	BudgetSeconds       float64  `json:"budget_seconds"`
	GeneratorCPUSeconds float64  `json:"generator_cpu_seconds"`
	Trials              int      `json:"trials"`
	Warnings            []string `json:"warnings"`
	Undecided           int      `json:"undecided"` // comparisons left "same" on an interval too wide to tell
	Failed              string   `json:"failed,omitempty"`
}

// CPUCell is one CPU trial (one repeat) in one load mode.
type CPUCell struct {
	QuotaCores       float64        `json:"quota_cores"`
	Setting          string         `json:"setting"`
	SameAs           []string       `json:"same_as"` // settings that give the target the same environment, measured here once
	Repeat           int            `json:"repeat"`
	GOMAXPROCS       int            `json:"gomaxprocs"`
	GOMAXPROCSFrom   string         `json:"gomaxprocs_from"`
	Mode             string         `json:"mode"` // "closed" or "open"
	OfferedRPS       float64        `json:"offered_rps,omitempty"`
	Isolated         bool           `json:"isolated"`
	OverlapShare     *float64       `json:"overlap_share"` // the target's CPU time on the generator's CPUs ÷ all of it (cgroup v1 only)
	RPS              float64        `json:"rps"`
	P50              float64        `json:"p50_ms"`
	P90              float64        `json:"p90_ms"`
	P99              float64        `json:"p99_ms"`
	P999             float64        `json:"p999_ms"`
	Periods          uint64         `json:"periods"`
	ThrottledPeriods uint64         `json:"throttled_periods"`
	ThrottledSeconds float64        `json:"throttled_seconds"`
	CPUSeconds       float64        `json:"cpu_seconds"`
	CPUWindowSeconds float64        `json:"cpu_window_seconds"`
	CPUMsPerRequest  float64        `json:"cpu_ms_per_request"`
	CPUEfficiency    float64        `json:"cpu_efficiency"` // cpu_seconds ÷ (cpu_window_seconds × quota)
	GCCPUShare       *float64       `json:"gc_cpu_share"`   // GC CPU ÷ the cgroup's CPU time in the window
	Requests         int            `json:"requests"`
	Errors           int            `json:"errors"`
	Cancelled        int            `json:"cancelled"`
	ErrorKinds       map[string]int `json:"error_kinds,omitempty"`
	TargetExited     bool           `json:"target_exited"`
	Seconds          float64        `json:"seconds"`
	GeneratorCPUSec  float64        `json:"generator_cpu_seconds"`

	blocks []Block
}

// Metric is a figure over repeats (min/median/max of the per-repeat
// values) and over the pooled requests of all repeats (value, with its 95%
// bootstrap interval ci_low..ci_high).
type Metric struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Value  float64 `json:"value,omitempty"`
	CILow  float64 `json:"ci_low,omitempty"`
	CIHigh float64 `json:"ci_high,omitempty"`
}

// CPUSummary is one (quota, setting, mode) over its repeats.
type CPUSummary struct {
	QuotaCores       float64    `json:"quota_cores"`
	Setting          string     `json:"setting"`
	SameAs           []string   `json:"same_as"`
	Mode             string     `json:"mode"`
	GOMAXPROCS       int        `json:"gomaxprocs"`
	OfferedRPS       float64    `json:"offered_rps,omitempty"`
	Isolated         bool       `json:"isolated"`
	Repeats          int        `json:"repeats"`
	Samples          int        `json:"samples"` // latencies pooled
	RPS              Metric     `json:"rps"`
	P99              Metric     `json:"p99_ms"`
	ThrottledSeconds Metric     `json:"throttled_seconds"`
	CPUMsPerRequest  Metric     `json:"cpu_ms_per_request"`
	CPUEfficiency    Metric     `json:"cpu_efficiency"`
	ErrorShare       float64    `json:"error_share"`
	Failed           bool       `json:"failed"`  // over 1% errors, or the target exited
	Verdict          *string    `json:"verdict"` // vs go-default at the same quota and mode; null for go-default
	VerdictRatio     *Interval  `json:"verdict_ratio"`
	Decided          bool       `json:"decided"`
	Notes            []string   `json:"notes"`
	Percentiles      []PctPoint `json:"percentiles,omitempty"` // open loop: the latency distribution, p50..p99.99
}

// PctPoint is one point of a latency-percentile curve.
type PctPoint struct {
	Percentile float64 `json:"percentile"`
	Ms         float64 `json:"ms"`
}

// MemResult is one memory setting's floor searches.
type MemResult struct {
	Setting           string     `json:"setting"`
	FloorBytes        *int64     `json:"floor_bytes"`         // survives; null: failed at every limit tried
	HealthyFloorBytes *int64     `json:"healthy_floor_bytes"` // ≥ 90% of unlimited rps with p99 ≤ 2× unlimited
	Trials            []MemTrial `json:"trials"`
	HealthyTrials     []MemTrial `json:"healthy_trials"`
	Survival          []Survival `json:"survival"`
}

// ThroughputCell is rps and latency at a multiple of the no-knob floor.
type ThroughputCell struct {
	Setting    string  `json:"setting"`
	Multiple   float64 `json:"multiple"`
	LimitBytes int64   `json:"limit_bytes"`
	Outcome    string  `json:"outcome"`
	RPS        float64 `json:"rps"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
}

// Lab runs a study in a sandbox.
type Lab struct {
	cfg     Config
	sb      *Sandbox
	res     Results
	done    int
	total   int
	started time.Time
	rng     *rand.Rand
	boot    *Bootstrap
	ncpu    int // CPUs the target sees
	place   *Placement
	// measure runs one CPU window; tests replace it with a fake.
	measure func(ctx context.Context, c cpuConfig, mode string, offered float64, window time.Duration, rep int) (CPUCell, error)
	now     func() time.Time
	exited  bool // the target exited during a CPU window: a crash
}

// ErrTargetFailed means the target crashed or answered with errors where
// the recommendation would rest; the results say where.
var ErrTargetFailed = errors.New("the target failed")

// Run runs the study. It stops early, returning ctx's error and what was
// measured so far, when ctx ends.
func Run(ctx context.Context, sb *Sandbox, cfg Config) (*Results, error) {
	l := newLab(cfg)
	l.sb = sb
	l.measure = l.sandboxMeasure
	l.res.Machine = machine()
	l.res.Target = TargetInfo{Command: strings.Join(append([]string{cfg.Target.Path}, cfg.Target.Args...), " "), URL: cfg.Target.URL, Sample: cfg.Sample, PageCache: "cold"}
	if st, err := os.Stat(cfg.Target.Path); err == nil {
		l.res.Target.BinaryBytes = st.Size()
	}
	if cfg.Sample {
		l.res.Target.GoDefaultNote = "the sample runs with GODEBUG=" + sampleGODEBUG + ": the default of a main module at go 1.25 or later on " + runtime.Version()
	} else {
		l.res.Target.GoDefaultNote = "whatever the target's build gives (its go.mod go line decides containermaxprocs)"
	}
	need := 2 // Go ≥ 1.25 never defaults below 2
	for _, q := range cfg.Quotas {
		need = max(need, int(math.Ceil(q-1e-9)))
	}
	place, err := sb.Isolate(need)
	if err != nil {
		return &l.res, err
	}
	l.place, l.res.Placement, l.ncpu = place, place, max(len(place.Target), 1)
	if len(place.Target) == 0 {
		l.ncpu = runtime.NumCPU()
	}
	genStart := selfCPU()
	err = l.cpuStudy(ctx)
	if err == nil {
		err = l.memoryStudy(ctx)
	}
	l.finish()
	if err == nil {
		err = l.checkRecommendation(ctx)
	}
	l.res.Lab.WallSeconds = time.Since(l.started).Seconds()
	l.res.Lab.GeneratorCPUSeconds = (selfCPU() - genStart).Seconds()
	if err == nil && l.res.Lab.Failed != "" {
		err = fmt.Errorf("%w: %s", ErrTargetFailed, l.res.Lab.Failed)
	}
	return &l.res, err
}

func newLab(cfg Config) *Lab {
	cfg.MinRepeats = max(cfg.MinRepeats, 1)
	cfg.MaxRepeats = max(cfg.MaxRepeats, cfg.MinRepeats)
	if cfg.Resamples <= 0 {
		cfg.Resamples = 1000
	}
	l := &Lab{cfg: cfg, started: time.Now(), rng: rand.New(rand.NewSource(1)), boot: NewBootstrap(cfg.Resamples, 1), ncpu: runtime.NumCPU(), now: time.Now}
	l.res.Lab.Warnings = append([]string{}, cfg.Warnings...)
	l.res.Lab.BudgetSeconds = cfg.Budget.Seconds()
	cells := len(cfg.Quotas) * len(cfg.CPUSettings) * cfg.MinRepeats * 2
	l.total = cells + 1 + len(cfg.MemSettings)*16 + len(cfg.MemSettings)*len(cfg.Multiples) + 1
	return l
}

// finish computes what depends on everything measured.
func (l *Lab) finish() {
	l.res.CPUSummary = l.summarizeCPU()
	l.res.Recommendation = l.recommend()
	l.res.Lab.Trials = l.done
	l.res.Lab.Undecided = 0
	for _, s := range l.res.CPUSummary {
		if s.Verdict != nil && !s.Decided {
			l.res.Lab.Undecided++
		}
	}
	l.res.Lab.Failed = l.failure()
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if c, err := cgroup.NewFS("/").Self(); err == nil {
		m.CgroupVersion = c.Version()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.TrimSpace(string(b))
	}
	return m
}

func (l *Lab) progress(format string, a ...any) {
	l.done++
	if l.cfg.Progress == nil {
		return
	}
	if l.done >= l.total {
		l.total = l.done + 1
	}
	el := time.Since(l.started)
	eta := time.Duration(float64(el) / float64(l.done) * float64(l.total-l.done))
	fmt.Fprintf(l.cfg.Progress, "lab [%3d/%3d] %-62s elapsed %s, ETA %s\n", l.done, l.total, fmt.Sprintf(format, a...), el.Round(time.Second), eta.Round(time.Second))
}

func (l *Lab) warn(format string, a ...any) {
	w := fmt.Sprintf(format, a...)
	for _, x := range l.res.Lab.Warnings {
		if x == w {
			return
		}
	}
	l.res.Lab.Warnings = append(l.res.Lab.Warnings, w)
	if l.cfg.Progress != nil {
		fmt.Fprintf(l.cfg.Progress, "lab: warning: %s\n", w)
	}
}

// failure says why the study cannot be trusted, or "".
func (l *Lab) failure() string {
	var why []string
	if l.exited {
		why = append(why, "the target exited during a load window")
	}
	failed, total := 0, 0
	example := ""
	for _, c := range l.res.CPU {
		total++
		if cellFailed(c) {
			failed++
			if example == "" {
				example = fmt.Sprintf("%s at %s %s-loop: %d errors in %d requests (%s)", c.Setting, millicores(c.QuotaCores), c.Mode, c.Errors, c.Errors+c.Requests, errorKinds(c.ErrorKinds))
			}
		}
	}
	if failed > 0 && failed*2 >= total {
		why = append(why, fmt.Sprintf("%d of %d CPU windows had over 1%% errors, e.g. %s", failed, total, example))
	}
	if r := l.res.Recommendation; r.CPULimitCores == 0 && len(l.res.CPU) > 0 {
		why = append(why, "no CPU quota had error-free cells to recommend")
	}
	if c := l.res.Recommendation.Check; c != nil && c.Outcome != OK {
		why = append(why, "the check trial of the recommendation failed: "+c.Outcome+" "+c.Detail)
	}
	return strings.Join(why, "; ")
}

func errorKinds(k map[string]int) string {
	return LoadResult{ErrorKinds: k}.ErrorSummary()
}

func cellFailed(c CPUCell) bool {
	n := c.Requests + c.Errors
	return c.TargetExited || n == 0 || float64(c.Errors) > maxErrorShare*float64(n)
}

// baseEnv is every trial's extra environment.
func (l *Lab) baseEnv() map[string]string {
	if l.cfg.Sample {
		return map[string]string{"GODEBUG": sampleGODEBUG}
	}
	return map[string]string{}
}

// cpuConfig is one distinct environment at one quota, with every setting
// that produces it.
type cpuConfig struct {
	quota   float64
	setting string
	sameAs  []string
	env     map[string]string
	procs   int
	from    string
}

func envKey(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + env[k] + "\x00")
	}
	return b.String()
}

// configs are the distinct environments at a quota. Settings giving the
// target the same environment are one cell: measuring both would only
// measure the noise twice. go-default, then gofit, names a shared cell.
func (l *Lab) configs(q float64) []cpuConfig {
	var out []cpuConfig
	idx := map[string]int{}
	order := append([]string(nil), l.cfg.CPUSettings...)
	rank := func(s string) int {
		switch s {
		case SetGoDefault:
			return 0
		case SetGofit:
			return 1
		}
		return 2
	}
	sort.SliceStable(order, func(i, j int) bool { return rank(order[i]) < rank(order[j]) })
	for _, s := range order {
		env, procs, from := l.cpuEnv(s, q)
		k := envKey(env)
		if i, ok := idx[k]; ok {
			out[i].sameAs = append(out[i].sameAs, s)
			continue
		}
		idx[k] = len(out)
		out = append(out, cpuConfig{quota: q, setting: s, sameAs: []string{}, env: env, procs: procs, from: from})
	}
	return out
}

type cellKey struct {
	q       float64
	setting string
	mode    string
}

func (l *Lab) runsOf(k cellKey) []CPUCell {
	var out []CPUCell
	for _, c := range l.res.CPU {
		if c.QuotaCores == k.q && c.Setting == k.setting && c.Mode == k.mode {
			out = append(out, c)
		}
	}
	return out
}

func pooled(cs []CPUCell) Sample {
	s := make(Sample, 0, len(cs))
	for _, c := range cs {
		s = append(s, c.blocks)
	}
	return s
}

// closedWindow is the closed loop's window: by time unless --requests
// fixed a count.
func (l *Lab) closedWindow() time.Duration {
	if l.cfg.Requests > 0 {
		return 0
	}
	return l.cfg.ClosedWindow
}

// openWindow is the open loop's window per run at rate: long enough that
// the minimum repeats pool OpenSamples latencies.
func (l *Lab) openWindow(rate float64) time.Duration {
	if l.cfg.OpenDuration > 0 {
		return l.cfg.OpenDuration
	}
	need := float64(l.cfg.OpenSamples) / rate / float64(l.cfg.MinRepeats)
	d := time.Duration(math.Ceil(need*10) / 10 * float64(time.Second))
	return max(d, l.cfg.MinOpenWindow)
}

// cpuBudget is the part of the budget the CPU study may spend, adaptive
// repeats included; the memory study needs the rest.
func (l *Lab) cpuBudget() time.Duration { return l.cfg.Budget * 45 / 100 }

func (l *Lab) cpuStudy(ctx context.Context) error {
	offered := map[float64]float64{}
	windows := map[float64]time.Duration{}
	all := map[float64][]cpuConfig{}
	runOne := func(c cpuConfig, mode string, rep int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		win := l.closedWindow()
		if mode == "open" {
			win = windows[c.quota]
		}
		cell, err := l.measure(ctx, c, mode, offered[c.quota], win, rep)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var se *StartError
			if errors.As(err, &se) {
				// With no memory limit, a start that fails is the target's
				// fault, and nothing measured after it would be trusted.
				return fmt.Errorf("%w: cpu trial %s %s %s-loop: %v", ErrTargetFailed, millicores(c.quota), c.setting, mode, err)
			}
			return fmt.Errorf("cpu trial %s %s %s-loop: %w", millicores(c.quota), c.setting, mode, err)
		}
		l.res.CPU = append(l.res.CPU, cell)
		l.progress("cpu %-5s %-15s %-6s rep %d: %5.0f rps, p99 %6.1fms", millicores(c.quota), c.setting, mode, rep, cell.RPS, cell.P99)
		if cell.TargetExited {
			// No memory limit here: an exit is a crash. Stop rather than
			// measure a dead service for minutes.
			l.exited = true
			return fmt.Errorf("%w: it exited during the %s %s %s-loop window (%d errors: %s)", ErrTargetFailed, millicores(c.quota), c.setting, mode, cell.Errors, errorKinds(cell.ErrorKinds))
		}
		return nil
	}
	round := func(cs []cpuConfig, mode string, rep int) error {
		order := append([]cpuConfig(nil), cs...)
		// A fresh order each round, so drift (thermal, noisy neighbours)
		// spreads over all configurations.
		l.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, c := range order {
			if err := runOne(c, mode, rep); err != nil {
				return err
			}
		}
		return nil
	}
	for _, q := range l.cfg.Quotas {
		cs := l.configs(q)
		all[q] = cs
		for rep := 1; rep <= l.cfg.MinRepeats; rep++ {
			if err := round(cs, "closed", rep); err != nil {
				return err
			}
		}
		// Equal load: every setting at this quota gets the same rate, a
		// share of the median capacity over settings (or --target-rps).
		if l.cfg.TargetRPS > 0 {
			offered[q] = l.cfg.TargetRPS
		} else {
			var caps []float64
			for _, c := range cs {
				if r := pooled(l.runsOf(cellKey{q, c.setting, "closed"})).rps(); r > 0 {
					caps = append(caps, r)
				}
			}
			offered[q] = math.Max(1, math.Round(l.cfg.OpenFraction*Summarize(caps).Median))
		}
		windows[q] = l.openWindow(offered[q])
		for rep := 1; rep <= l.cfg.MinRepeats; rep++ {
			if err := round(cs, "open", rep); err != nil {
				return err
			}
		}
	}
	// Adaptive: repeat what is still undecided, or short of samples, while
	// the budget lasts; when it cannot fit a whole round, as many cells of
	// it as fit, comparisons in order (each with its go-default).
	for {
		todo := l.undecided(all)
		if len(todo) == 0 {
			return nil
		}
		ran := 0
		for _, t := range todo {
			if l.now().Sub(l.started)+l.runCost(t.key) > l.cpuBudget() {
				break
			}
			var c cpuConfig
			for _, x := range all[t.key.q] {
				if x.setting == t.key.setting {
					c = x
				}
			}
			if err := runOne(c, t.key.mode, t.rep); err != nil {
				return err
			}
			ran++
		}
		if ran < len(todo) {
			left := len(l.undecided(all))
			if left > 0 {
				l.warn("the CPU study's budget (%v of %v) ran out with %d cells undecided or short of samples; their verdicts stay \"same\" on intervals too wide to tell (more time: --budget)", l.cpuBudget().Round(time.Second), l.cfg.Budget, left)
			}
			return nil
		}
	}
}

type repeatTask struct {
	key cellKey
	rep int
}

// undecided lists the cells to repeat: both sides of every comparison
// with go-default that is neither decided nor at MaxRepeats, and open
// cells short of OpenSamples.
func (l *Lab) undecided(all map[float64][]cpuConfig) []repeatTask {
	want := map[cellKey]bool{}
	var order []cellKey
	add := func(k cellKey) {
		if !want[k] && len(l.runsOf(k)) < l.cfg.MaxRepeats {
			want[k] = true
			order = append(order, k)
		}
	}
	for _, q := range l.cfg.Quotas {
		for _, mode := range []string{"closed", "open"} {
			base := cellKey{q, SetGoDefault, mode}
			baseRuns := l.runsOf(base)
			for _, c := range all[q] {
				k := cellKey{q, c.setting, mode}
				runs := l.runsOf(k)
				if mode == "open" && pooled(runs).count() < l.cfg.OpenSamples && l.cfg.OpenDuration == 0 {
					add(k)
				}
				if c.setting == SetGoDefault || len(baseRuns) == 0 || anyFailed(runs) || anyFailed(baseRuns) {
					continue
				}
				st := headline(mode)
				_, decided := Verdict(l.boot.Ratio(pooled(runs), pooled(baseRuns), st), st, margin(st))
				if !decided {
					add(k)
					add(base)
				}
			}
		}
	}
	out := make([]repeatTask, len(order))
	for i, k := range order {
		out[i] = repeatTask{k, len(l.runsOf(k)) + 1}
	}
	return out
}

func anyFailed(cs []CPUCell) bool {
	for _, c := range cs {
		if cellFailed(c) {
			return true
		}
	}
	return false
}

// runCost estimates one more run of k from the runs so far.
func (l *Lab) runCost(k cellKey) time.Duration {
	runs := l.runsOf(k)
	if len(runs) == 0 {
		return l.cfg.ClosedWindow + l.cfg.Warmup
	}
	var s float64
	for _, r := range runs {
		s += r.Seconds
	}
	return time.Duration((s/float64(len(runs)))*float64(time.Second)) + l.cfg.Warmup + 300*time.Millisecond
}

// headline is the statistic a mode's verdict is about.
func headline(mode string) Stat {
	if mode == "open" {
		return StatP99
	}
	return StatRPS
}

// margin is how close to 1 a ratio's whole interval must lie for "same"
// to count as decided: p99 is the noisier statistic.
func margin(st Stat) float64 {
	if st == StatP99 {
		return 0.10
	}
	return 0.05
}

func (l *Lab) summarizeCPU() []CPUSummary {
	var keys []cellKey
	seen := map[cellKey]bool{}
	for _, c := range l.res.CPU {
		k := cellKey{c.QuotaCores, c.Setting, c.Mode}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.q != b.q {
			return a.q < b.q
		}
		if a.mode != b.mode {
			return a.mode < b.mode
		}
		return settingRank(a.setting) < settingRank(b.setting)
	})
	var out []CPUSummary
	for _, k := range keys {
		g := l.runsOf(k)
		pick := func(f func(CPUCell) float64) Metric {
			xs := make([]float64, len(g))
			for i, c := range g {
				xs[i] = f(c)
			}
			s := Summarize(xs)
			return Metric{Min: s.Min, Median: s.Median, Max: s.Max}
		}
		s := CPUSummary{QuotaCores: k.q, Setting: k.setting, SameAs: g[0].SameAs, Mode: k.mode, GOMAXPROCS: g[0].GOMAXPROCS, OfferedRPS: g[0].OfferedRPS,
			Isolated: g[0].Isolated, Repeats: len(g), Notes: []string{},
			RPS:              pick(func(c CPUCell) float64 { return c.RPS }),
			P99:              pick(func(c CPUCell) float64 { return c.P99 }),
			ThrottledSeconds: pick(func(c CPUCell) float64 { return c.ThrottledSeconds }),
			CPUMsPerRequest:  pick(func(c CPUCell) float64 { return c.CPUMsPerRequest }),
			CPUEfficiency:    pick(func(c CPUCell) float64 { return c.CPUEfficiency })}
		p := pooled(g)
		s.Samples = p.count()
		rps, p99 := l.boot.CI(p, StatRPS), l.boot.CI(p, StatP99)
		s.RPS.Value, s.RPS.CILow, s.RPS.CIHigh = rps.Value, rps.Low, rps.High
		s.P99.Value, s.P99.CILow, s.P99.CIHigh = p99.Value, p99.Low, p99.High
		var errs, n int
		for _, c := range g {
			errs += c.Errors
			n += c.Errors + c.Requests
		}
		if n > 0 {
			s.ErrorShare = float64(errs) / float64(n)
		}
		s.Failed = anyFailed(g)
		if s.Failed {
			s.Notes = append(s.Notes, fmt.Sprintf("FAILED: %.1f%% errors (%s)", s.ErrorShare*100, errorKinds(mergeKinds(g))))
		}
		if k.mode == "open" {
			if s.Samples < l.cfg.OpenSamples {
				s.Notes = append(s.Notes, fmt.Sprintf("p99 from %d latencies, under the %d wanted: the budget ran out first", s.Samples, l.cfg.OpenSamples))
			}
			if s.OfferedRPS > 0 && s.RPS.Value < 0.95*s.OfferedRPS {
				s.Notes = append(s.Notes, fmt.Sprintf("saturated: served %.0f of %.0f rps offered", s.RPS.Value, s.OfferedRPS))
			}
			s.Percentiles = percentileCurve(p)
		} else {
			var periods uint64
			for _, c := range g {
				periods = min(periods, c.Periods)
				if periods == 0 {
					periods = c.Periods
				}
			}
			if periods > 0 && periods < minPeriods {
				s.Notes = append(s.Notes, fmt.Sprintf("closed-loop windows of %d CFS periods, under %d", periods, minPeriods))
			}
			if e := s.CPUEfficiency.Median; e > 0 && e < 0.9 {
				s.Notes = append(s.Notes, fmt.Sprintf("not CPU-bound: the closed loop used %.0f%% of the quota, so its throughput is limited by something else (the load generator, other load on the machine, the target's own waits), not by the quota", e*100))
			}
		}
		if k.setting != SetGoDefault {
			base := l.runsOf(cellKey{k.q, SetGoDefault, k.mode})
			if len(base) > 0 && !s.Failed && !anyFailed(base) {
				st := headline(k.mode)
				r := l.boot.Ratio(p, pooled(base), st)
				v, d := Verdict(r, st, margin(st))
				s.Verdict, s.Decided = &v, d
				if r.finite() {
					s.VerdictRatio = &r
				}
				if !d {
					s.Notes = append(s.Notes, "undecided: the interval is too wide to tell from go-default")
				}
			}
		}
		out = append(out, s)
	}
	return out
}

func mergeKinds(cs []CPUCell) map[string]int {
	m := map[string]int{}
	for _, c := range cs {
		for k, v := range c.ErrorKinds {
			m[k] += v
		}
	}
	return m
}

func settingRank(s string) int {
	switch s {
	case SetGoDefault:
		return 0
	case SetGofit:
		return 1
	case SetProcs1:
		return 2
	}
	return 3
}

// pctLevels are the HDR-style percentiles of the latency plot.
var pctLevels = []float64{50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99}

func percentileCurve(s Sample) []PctPoint {
	all := s.latencies()
	if len(all) == 0 {
		return nil
	}
	var out []PctPoint
	for _, p := range pctLevels {
		// A percentile beyond 1/n of the samples would be the maximum
		// again: stop where the data stops.
		if (100-p)/100*float64(len(all)) < 1 && p > 99 {
			break
		}
		out = append(out, PctPoint{p, quantile32(all, p/100)})
	}
	return out
}

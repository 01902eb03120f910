// Package lab runs a service under real cgroup limits on one Linux machine,
// drives load at it, sweeps Go runtime settings, finds its memory floor and
// recommends settings. It is what `gofit lab` runs.
package lab

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/affinity"
	"github.com/gofit-dev/gofit/internal/target"
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
	SetNone        = "none"
	SetLimitGCOff  = "gomemlimit=limit,gogc=off"
	sampleGODEBUG  = "containermaxprocs=1,updatemaxprocs=1"
	memConcurrency = 8
	// A memory trial whose throughput falls below this share of the
	// unlimited probe's, while it faults pages in, is stalled.
	stallShare = 0.1
)

// Config is a study.
type Config struct {
	Target Target
	// Sample is set when Target is the embedded sample, whose main module
	// is run with Go ≥ 1.25's GOMAXPROCS default (see README).
	Sample bool

	Quotas         []float64     // CPU quotas in cores
	CPUSettings    []string      // of SetProcs1, SetGoDefault, SetGofit, SetProcsNCPU
	Repeats        int           // of each CPU cell, interleaved
	Requests       int           // closed loop: requests per cell
	Concurrency    int           // closed loop: workers
	OpenFraction   float64       // open loop: share of the measured closed-loop capacity
	OpenDuration   time.Duration // open loop: duration per cell
	MemSettings    []string      // of SetNone, SetGofit, SetLimitGCOff
	MemRequests    int           // requests per memory trial
	Multiples      []float64     // of the no-knob floor, for throughput
	Resolution     int64         // of the floor, bytes
	ConfirmNeed    int           // k of n at the floor's edge
	ConfirmOf      int
	Progress       io.Writer // progress lines; nil for none
	GoVersionLabel string    // how the target's Go default is described
}

// DefaultConfig is the default study, or with quick the reduced one.
func DefaultConfig(quick bool) Config {
	ncpu := float64(runtime.NumCPU())
	c := Config{
		Quotas:       []float64{0.25, 0.5, 1, ncpu},
		CPUSettings:  []string{SetProcs1, SetGoDefault, SetGofit, SetProcsNCPU},
		Repeats:      3,
		Requests:     600,
		Concurrency:  16,
		OpenFraction: 0.6,
		OpenDuration: 3 * time.Second,
		MemSettings:  []string{SetNone, SetGofit, SetLimitGCOff},
		MemRequests:  1500,
		Multiples:    []float64{1, 1.5, 2, 4},
		Resolution:   1 << 20,
		ConfirmNeed:  3,
		ConfirmOf:    3,
	}
	if ncpu <= 1 {
		c.Quotas = []float64{0.25, 0.5, 1}
	}
	if quick {
		c.Quotas = []float64{0.25}
		c.CPUSettings = []string{SetProcs1, SetGoDefault, SetGofit}
		c.Repeats = 2
		c.Requests = 300
		c.OpenDuration = 2 * time.Second
		c.MemSettings = []string{SetNone, SetGofit}
		c.Multiples = []float64{1, 2}
		c.ConfirmNeed, c.ConfirmOf = 2, 2
	}
	return c
}

// Results is results.json; the README documents the schema.
type Results struct {
	Machine        Machine          `json:"machine"`
	Target         TargetInfo       `json:"target"`
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
	GoDefaultNote string  `json:"go_default"`
}

// LabInfo is the lab's own cost.
type LabInfo struct {
	WallSeconds         float64 `json:"wall_seconds"`
	GeneratorCPUSeconds float64 `json:"generator_cpu_seconds"`
	Trials              int     `json:"trials"`
}

// CPUCell is one CPU trial in one load mode.
type CPUCell struct {
	QuotaCores       float64  `json:"quota_cores"`
	Setting          string   `json:"setting"`
	Repeat           int      `json:"repeat"`
	GOMAXPROCS       int      `json:"gomaxprocs"`
	GOMAXPROCSFrom   string   `json:"gomaxprocs_from"`
	Mode             string   `json:"mode"` // "closed" or "open"
	OfferedRPS       float64  `json:"offered_rps,omitempty"`
	RPS              float64  `json:"rps"`
	P50              float64  `json:"p50_ms"`
	P90              float64  `json:"p90_ms"`
	P99              float64  `json:"p99_ms"`
	P999             float64  `json:"p999_ms"`
	Periods          uint64   `json:"periods"`
	ThrottledPeriods uint64   `json:"throttled_periods"`
	ThrottledSeconds float64  `json:"throttled_seconds"`
	CPUMsPerRequest  float64  `json:"cpu_ms_per_request"`
	GCCPUShare       *float64 `json:"gc_cpu_share"`
	Requests         int      `json:"requests"`
	Errors           int      `json:"errors"`
	Seconds          float64  `json:"seconds"`
	GeneratorCPUSec  float64  `json:"generator_cpu_seconds"`
}

// CPUSummary is min/median/max over repeats of one (quota, setting, mode).
type CPUSummary struct {
	QuotaCores       float64 `json:"quota_cores"`
	Setting          string  `json:"setting"`
	Mode             string  `json:"mode"`
	GOMAXPROCS       int     `json:"gomaxprocs"`
	RPS              Summary `json:"rps"`
	P99              Summary `json:"p99_ms"`
	ThrottledSeconds Summary `json:"throttled_seconds"`
	CPUMsPerRequest  Summary `json:"cpu_ms_per_request"`
}

// MemResult is one memory setting's floor search.
type MemResult struct {
	Setting    string     `json:"setting"`
	FloorBytes *int64     `json:"floor_bytes"` // null: failed at every limit tried
	Trials     []MemTrial `json:"trials"`
	Survival   []Survival `json:"survival"`
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

// Recommendation is what the lab suggests for a Deployment's container.
type Recommendation struct {
	CPURequestCores    float64           `json:"cpu_request_cores"`
	CPULimitCores      float64           `json:"cpu_limit_cores"`
	MemoryRequestBytes int64             `json:"memory_request_bytes"`
	MemoryLimitBytes   int64             `json:"memory_limit_bytes"`
	Env                map[string]string `json:"env"`
	Reasons            []string          `json:"reasons"`
	YAML               string            `json:"yaml"`
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
}

// Run runs the study. It stops early, returning ctx's error and what was
// measured so far, when ctx ends.
func Run(ctx context.Context, sb *Sandbox, cfg Config) (*Results, error) {
	l := &Lab{cfg: cfg, sb: sb, started: time.Now(), rng: rand.New(rand.NewSource(1))}
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
	cells := len(cfg.Quotas) * len(cfg.CPUSettings) * cfg.Repeats
	l.total = cells + 1 + len(cfg.MemSettings)*11 + len(cfg.MemSettings)*len(cfg.Multiples)
	genStart := selfCPU()
	err := l.cpuStudy(ctx)
	if err == nil {
		err = l.memoryStudy(ctx)
	}
	l.res.CPUSummary = summarizeCPU(l.res.CPU)
	l.res.Recommendation = l.recommend()
	l.res.Lab = LabInfo{WallSeconds: time.Since(l.started).Seconds(), GeneratorCPUSeconds: (selfCPU() - genStart).Seconds(), Trials: l.done}
	return &l.res, err
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if c, err := cgroup.NewFS("/").Self(); err == nil {
		m.CgroupVersion = c.Version()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func (l *Lab) progress(format string, a ...any) {
	l.done++
	if l.cfg.Progress == nil {
		return
	}
	if l.done > l.total {
		l.total = l.done + 1
	}
	el := time.Since(l.started)
	eta := time.Duration(float64(el) / float64(l.done) * float64(l.total-l.done))
	fmt.Fprintf(l.cfg.Progress, "lab [%3d/%3d] %-58s elapsed %s, ETA %s\n", l.done, l.total, fmt.Sprintf(format, a...), el.Round(time.Second), eta.Round(time.Second))
}

// baseEnv is every trial's extra environment.
func (l *Lab) baseEnv() map[string]string {
	if l.cfg.Sample {
		return map[string]string{"GODEBUG": sampleGODEBUG}
	}
	return map[string]string{}
}

// planEnv is what `gofit run` would hand the target under these limits.
func (l *Lab) planEnv(cores float64, mem int64) (map[string]string, fit.Plan) {
	in := fit.Input{
		Limits: cgroup.Limits{
			CPU:    cgroup.CPULimits{Quota: cores, LeafQuota: cores, QuotaGroup: "(trial)"},
			Memory: cgroup.MemoryLimits{Max: mem, MaxGroup: "(trial)"},
		},
		CPUs: affinity.CPUs(),
		Vars: l.baseEnv(),
	}
	if b, err := target.Read(l.cfg.Target.Path); err == nil {
		b.Describe(&in)
	}
	p := fit.Policy{}.Plan(in)
	env := p.Export
	for k, v := range l.baseEnv() {
		env[k] = v
	}
	return env, p
}

// cpuEnv is a CPU setting's environment and the GOMAXPROCS it implies.
func (l *Lab) cpuEnv(setting string, cores float64) (map[string]string, int, string) {
	env := l.baseEnv()
	ncpu := affinity.CPUs()
	genv, plan := l.planEnv(cores, 0)
	switch setting {
	case SetProcs1:
		env["GOMAXPROCS"] = "1"
		return env, 1, "env GOMAXPROCS=1"
	case SetProcsNCPU:
		env["GOMAXPROCS"] = strconv.Itoa(ncpu)
		return env, ncpu, "env GOMAXPROCS=" + strconv.Itoa(ncpu)
	case SetGofit:
		if v, ok := genv["GOMAXPROCS"]; ok {
			return genv, plan.GOMAXPROCS, "gofit run: env GOMAXPROCS=" + v
		}
		return genv, plan.GOMAXPROCS, "gofit run: left to the Go runtime, which agrees"
	}
	from := "Go runtime default"
	if plan.RuntimeFollowsCgroup {
		from += " (container-aware, Go >= 1.25)"
	} else {
		from += " (CPU count)"
	}
	return env, plan.RuntimeGOMAXPROCS, from
}

func (l *Lab) cpuStudy(ctx context.Context) error {
	type combo struct {
		q float64
		s string
	}
	var combos []combo
	for _, q := range l.cfg.Quotas {
		for _, s := range l.cfg.CPUSettings {
			combos = append(combos, combo{q, s})
		}
	}
	for rep := 1; rep <= l.cfg.Repeats; rep++ {
		// Interleave: a fresh order each round, so drift (thermal, noisy
		// neighbours) spreads over all configurations.
		order := append([]combo(nil), combos...)
		l.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, c := range order {
			if err := ctx.Err(); err != nil {
				return err
			}
			cells, err := l.cpuCell(ctx, c.q, c.s, rep)
			if err != nil {
				return err
			}
			l.res.CPU = append(l.res.CPU, cells...)
			closed := cells[0]
			l.progress("cpu %.2g cores %-15s rep %d: %.0f rps, p99 %.1fms", c.q, c.s, rep, closed.RPS, cells[len(cells)-1].P99)
		}
	}
	return nil
}

func (l *Lab) cpuCell(ctx context.Context, cores float64, setting string, rep int) ([]CPUCell, error) {
	env, procs, from := l.cpuEnv(setting, cores)
	tr, err := l.sb.Start(ctx, l.cfg.Target, TrialConfig{CPU: cores, Env: env, Warm: true})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cpu trial %.2g cores %s: %w", cores, setting, err)
	}
	defer tr.Stop()
	ld := NewLoader(l.cfg.Concurrency, nil)
	defer ld.Close()
	ld.Closed(ctx, tr.URL, min(50, l.cfg.Requests/4), l.cfg.Concurrency) // warm up connections and caches
	if v, err := tr.Vars(); err == nil && v.GOMAXPROCS > 0 {
		procs = v.GOMAXPROCS // what the target really runs with
	}
	measure := func(mode string, offered float64, load func() LoadResult) CPUCell {
		s0, _ := tr.Stats()
		v0, verr0 := tr.Vars()
		r := load()
		s1, _ := tr.Stats()
		v1, verr1 := tr.Vars()
		c := CPUCell{QuotaCores: cores, Setting: setting, Repeat: rep, GOMAXPROCS: procs, GOMAXPROCSFrom: from, Mode: mode, OfferedRPS: offered,
			RPS: r.RPS, P50: r.P50, P90: r.P90, P99: r.P99, P999: r.P999, Requests: r.Requests, Errors: r.Errors, Seconds: r.Seconds, GeneratorCPUSec: r.GenCPUSec,
			Periods: s1.CPU.Periods - s0.CPU.Periods, ThrottledPeriods: s1.CPU.ThrottledPeriods - s0.CPU.ThrottledPeriods,
			ThrottledSeconds: (s1.CPU.ThrottledTime - s0.CPU.ThrottledTime).Seconds()}
		if r.Requests > 0 {
			c.CPUMsPerRequest = float64((s1.CPU.Usage - s0.CPU.Usage).Microseconds()) / 1000 / float64(r.Requests)
		}
		if verr0 == nil && verr1 == nil && v1.TotalCPUSeconds > v0.TotalCPUSeconds {
			share := (v1.GCCPUSeconds - v0.GCCPUSeconds) / (v1.TotalCPUSeconds - v0.TotalCPUSeconds)
			c.GCCPUShare = &share
		}
		return c
	}
	closed := measure("closed", 0, func() LoadResult { return ld.Closed(ctx, tr.URL, l.cfg.Requests, l.cfg.Concurrency) })
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rate := closed.RPS * l.cfg.OpenFraction
	if rate < 1 {
		rate = 1
	}
	open := measure("open", rate, func() LoadResult { return ld.Open(ctx, tr.URL, rate, l.cfg.OpenDuration) })
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return []CPUCell{closed, open}, nil
}

func summarizeCPU(cells []CPUCell) []CPUSummary {
	type key struct {
		q    float64
		s, m string
	}
	groups := map[key][]CPUCell{}
	var keys []key
	for _, c := range cells {
		k := key{c.QuotaCores, c.Setting, c.Mode}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], c)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.q != b.q {
			return a.q < b.q
		}
		if a.s != b.s {
			return a.s < b.s
		}
		return a.m < b.m
	})
	var out []CPUSummary
	for _, k := range keys {
		g := groups[k]
		pick := func(f func(CPUCell) float64) Summary {
			xs := make([]float64, len(g))
			for i, c := range g {
				xs[i] = f(c)
			}
			return Summarize(xs)
		}
		out = append(out, CPUSummary{QuotaCores: k.q, Setting: k.s, Mode: k.m, GOMAXPROCS: g[0].GOMAXPROCS,
			RPS:              pick(func(c CPUCell) float64 { return c.RPS }),
			P99:              pick(func(c CPUCell) float64 { return c.P99 }),
			ThrottledSeconds: pick(func(c CPUCell) float64 { return c.ThrottledSeconds }),
			CPUMsPerRequest:  pick(func(c CPUCell) float64 { return c.CPUMsPerRequest })})
	}
	return out
}

// memEnv is a memory setting's environment at a limit.
func (l *Lab) memEnv(setting string, limit int64) map[string]string {
	switch setting {
	case SetGofit:
		env, _ := l.planEnv(0, limit)
		return env
	case SetLimitGCOff:
		env := l.baseEnv()
		env["GOMEMLIMIT"] = strconv.FormatInt(limit, 10)
		env["GOGC"] = "off"
		return env
	}
	return l.baseEnv()
}

// memTrial starts the target cold under a memory limit and drives a fixed
// load; it fails on an OOM kill, on errors, or on a stall.
func (l *Lab) memTrial(ctx context.Context, setting string, limit int64, requests int) (MemTrial, LoadResult) {
	start := time.Now()
	t := MemTrial{LimitBytes: limit}
	tr, err := l.sb.Start(ctx, l.cfg.Target, TrialConfig{Memory: limit, Env: l.memEnv(setting, limit)})
	if err != nil {
		t.Outcome, t.Detail = Errored, err.Error()
		if se, ok := err.(*StartError); ok {
			t.Outcome = se.Outcome
		}
		t.Seconds = time.Since(start).Seconds()
		return t, LoadResult{}
	}
	defer tr.Stop()
	t.ResidentBefore = tr.Resident
	probe := func() (uint64, uint64) {
		m, _ := tr.g.MemoryStats()
		return m.MajorFaults, m.MaxHits
	}
	ld := NewLoader(memConcurrency, probe)
	ld.MinRate = l.res.Target.ProbeRPS * stallShare
	defer ld.Close()
	r := ld.Closed(ctx, tr.URL, requests, memConcurrency)
	tr.Stop()
	s, _ := tr.Stats()
	t.RPS, t.P99 = r.RPS, r.P99
	t.PeakBytes, t.PageCacheBytes, t.MajorFaults, t.LimitHits = s.Memory.Peak, s.Memory.File, s.Memory.MajorFaults, s.Memory.MaxHits
	t.Seconds = time.Since(start).Seconds()
	switch {
	case s.Memory.OOMKills > 0:
		t.Outcome, t.Detail = OOMKilled, fmt.Sprintf("%d OOM kills", s.Memory.OOMKills)
	case r.Stalled:
		t.Outcome, t.Detail = Stalled, fmt.Sprintf("under %.0f rps (%.0f%% of the unlimited rate) for %v while major faults reached %d", ld.MinRate, stallShare*100, ld.Stall, s.Memory.MajorFaults)
	case r.Errors > r.Requests/100 || r.Requests == 0:
		t.Outcome, t.Detail = Errored, fmt.Sprintf("%d errors in %d requests", r.Errors, r.Errors+r.Requests)
	default:
		t.Outcome = OK
	}
	return t, r
}

func (l *Lab) memoryStudy(ctx context.Context) error {
	// Probe without a limit: the peak brackets the search.
	probe, r := l.memTrial(ctx, SetNone, 0, l.cfg.MemRequests)
	if err := ctx.Err(); err != nil {
		return err
	}
	l.progress("memory probe, no limit: peak %s, %.0f rps", fit.FormatBytes(int64(probe.PeakBytes)), r.RPS)
	if probe.Outcome != OK {
		return fmt.Errorf("the target fails even without a memory limit: %s", probe.Detail)
	}
	l.res.Target.PeakBytes, l.res.Target.ProbeRPS = probe.PeakBytes, r.RPS
	peak := int64(probe.PeakBytes)
	search := FloorSearch{Lo: peak / 4, Hi: peak * 3 / 2, Max: peak * 8, Resolution: l.cfg.Resolution, Need: l.cfg.ConfirmNeed, Of: l.cfg.ConfirmOf}
	var noKnobFloor int64
	for _, setting := range l.cfg.MemSettings {
		floor, trials, err := search.Find(ctx, func(ctx context.Context, limit int64) MemTrial {
			t, _ := l.memTrial(ctx, setting, limit, l.cfg.MemRequests)
			l.progress("memory %-26s at %-8s %s", setting, fit.FormatBytes(limit), t.Outcome)
			return t
		})
		m := MemResult{Setting: setting, Trials: trials, Survival: SurvivalCurve(trials)}
		if floor > 0 {
			m.FloorBytes = &floor
		}
		l.res.Memory = append(l.res.Memory, m)
		if err != nil {
			return err
		}
		if setting == SetNone {
			noKnobFloor = floor
		}
	}
	if noKnobFloor == 0 {
		return nil
	}
	for _, mult := range l.cfg.Multiples {
		for _, setting := range l.cfg.MemSettings {
			limit := int64(math.Ceil(float64(noKnobFloor)*mult/float64(l.cfg.Resolution))) * l.cfg.Resolution
			t, r := l.memTrial(ctx, setting, limit, l.cfg.MemRequests)
			if err := ctx.Err(); err != nil {
				return err
			}
			l.res.Throughput = append(l.res.Throughput, ThroughputCell{Setting: setting, Multiple: mult, LimitBytes: limit, Outcome: t.Outcome, RPS: r.RPS, P50: r.P50, P99: r.P99})
			l.progress("throughput %-26s at %gx floor (%s): %.0f rps", setting, mult, fit.FormatBytes(limit), r.RPS)
		}
	}
	return nil
}

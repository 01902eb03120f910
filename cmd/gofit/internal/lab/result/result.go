// Package result holds the lab's results.json: what a study measured
// (CPU cells, memory trials and floors), its summary and its
// recommendation, as the lab writes them and the report reads them. It
// is plain data: the lab's analysis fills it, nothing here measures.
package result

import (
	"fmt"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/fit"
)

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
	// Targets is each request of the mix over every CPU window: method,
	// URL, requests, status-code counts, p50/p99.
	Targets []load.TargetResult `json:"targets"`
	Lab     LabInfo             `json:"lab"`
}

// Machine describes where the study ran.
type Machine struct {
	Host          string `json:"host,omitempty"`
	CPUModel      string `json:"cpu_model,omitempty"`
	CPUs          int    `json:"cpus"`
	CgroupVersion int    `json:"cgroup_version"`
	GoVersion     string `json:"go_version"`
	Kernel        string `json:"kernel"`
	LoadAvg       string `json:"loadavg_at_start"` // /proc/loadavg: other work on the machine
	// Where says where a cluster run's trials ran (gofit lab --kube):
	// the namespace, each node with its kernel and CPU, and the load
	// pod's node. Host and the rest are then the first trial node's.
	Where string `json:"where,omitempty"`
}

// TargetInfo describes the service studied.
type TargetInfo struct {
	Command string `json:"command"`
	// Image is the OCI image the target ran from (--image): the reference
	// as given, its manifest digest and platform. Empty: a --cmd binary.
	Image         string  `json:"image,omitempty"`
	URL           string  `json:"url"`
	Sample        bool    `json:"sample"`
	BinaryBytes   int64   `json:"binary_bytes"`
	PageCache     string  `json:"page_cache"` // "cold" or "warm" at each memory trial's start
	PeakBytes     uint64  `json:"peak_unlimited_bytes"`
	ProbeRPS      float64 `json:"probe_rps"`
	ProbeP99      float64 `json:"probe_p99_ms"`
	HealthRPS     float64 `json:"health_rps"`      // the health trials' open-loop rate: a share of probe_rps
	ProbeCPU      float64 `json:"probe_cpu_cores"` // the CPU limit of every memory trial (0: none)
	GoDefaultNote string  `json:"go_default"`
	// NonGoBytes is the non-Go memory the unlimited probes measured and
	// the gofit setting and the recommendation declare (0: under
	// nongo.DeclareMin, or not measured); NonGo its parts, method and
	// caveats (null: not measured, NonGoError says why).
	NonGoBytes int64              `json:"non_go_bytes"`
	NonGo      *nongo.Measurement `json:"non_go"`
	NonGoError string             `json:"non_go_error,omitempty"`
}

// LabInfo is the lab's own cost, and what it could not do.
type LabInfo struct {
	WallSeconds         float64  `json:"wall_seconds"`
	BudgetSeconds       float64  `json:"budget_seconds"`
	GeneratorCPUSeconds float64  `json:"generator_cpu_seconds"`
	Trials              int      `json:"trials"`
	Warnings            []string `json:"warnings"`
	Undecided           int      `json:"undecided"` // comparisons left "same" on an interval too wide to tell
	// BudgetLimited is set when the budget cut a phase short of its sample
	// minimums (a slow target); BudgetNotes say which, and what it got.
	BudgetLimited bool     `json:"budget_limited"`
	BudgetNotes   []string `json:"budget_notes"`
	// NotCompared names the CPU rows the budget could not take to a
	// verdict, which the study left out, and what would have funded them.
	NotCompared []string `json:"not_compared"`
	Seed        int64    `json:"seed"` // --seed: replays the cell order, the request mix and the resamples
	Failed      string   `json:"failed,omitempty"`
}

// CPUCell is one CPU trial (one repeat) in one load mode.
type CPUCell struct {
	QuotaCores       float64             `json:"quota_cores"`             // 0: no limit (the request row)
	RequestCores     float64             `json:"request_cores,omitempty"` // the request row: the CPU request its weight (cpu.shares) stands for
	Setting          string              `json:"setting"`
	SameAs           []string            `json:"same_as"` // settings that give the target the same environment, measured here once
	Repeat           int                 `json:"repeat"`
	GOMAXPROCS       int                 `json:"gomaxprocs"`
	GOMAXPROCSFrom   string              `json:"gomaxprocs_from"`
	Mode             Mode                `json:"mode"` // "closed" or "open"
	OfferedRPS       float64             `json:"offered_rps,omitempty"`
	Isolated         bool                `json:"isolated"`
	OverlapShare     *float64            `json:"overlap_share"` // the target's CPU time on the generator's CPUs ÷ all of it (cgroup v1 only)
	RPS              float64             `json:"rps"`
	P50              float64             `json:"p50_ms"`
	P90              float64             `json:"p90_ms"`
	P99              float64             `json:"p99_ms"`
	P999             float64             `json:"p999_ms"`
	Periods          uint64              `json:"periods"`
	ThrottledPeriods uint64              `json:"throttled_periods"`
	ThrottledSeconds float64             `json:"throttled_seconds"`
	CPUSeconds       float64             `json:"cpu_seconds"`
	CPUWindowSeconds float64             `json:"cpu_window_seconds"`
	CPUMsPerRequest  float64             `json:"cpu_ms_per_request"`
	CPUEfficiency    float64             `json:"cpu_efficiency"` // cpu_seconds ÷ (cpu_window_seconds × quota)
	GCCPUShare       *float64            `json:"gc_cpu_share"`   // GC CPU ÷ the cgroup's CPU time in the window
	Requests         int                 `json:"requests"`
	Errors           int                 `json:"errors"`
	Cancelled        int                 `json:"cancelled"`
	ErrorKinds       map[string]int      `json:"error_kinds,omitempty"`
	TargetExited     bool                `json:"target_exited"`
	Seconds          float64             `json:"seconds"`
	GeneratorCPUSec  float64             `json:"generator_cpu_seconds"`
	Targets          []load.TargetResult `json:"targets,omitempty"` // per request of the mix

	// Blocks are the run's latencies in blocks, for the bootstrap:
	// records.json keeps them (cpu_blocks), results.json does not.
	Blocks []stats.Block `json:"-"`
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
	QuotaCores       float64         `json:"quota_cores"` // 0: no limit (the request row)
	RequestCores     float64         `json:"request_cores,omitempty"`
	Setting          string          `json:"setting"`
	SameAs           []string        `json:"same_as"`
	Mode             Mode            `json:"mode"`
	GOMAXPROCS       int             `json:"gomaxprocs"`
	OfferedRPS       float64         `json:"offered_rps,omitempty"`
	Isolated         bool            `json:"isolated"`
	Repeats          int             `json:"repeats"`
	Samples          int             `json:"samples"` // latencies pooled
	RPS              Metric          `json:"rps"`
	P99              Metric          `json:"p99_ms"`
	ThrottledSeconds Metric          `json:"throttled_seconds"`
	CPUMsPerRequest  Metric          `json:"cpu_ms_per_request"`
	CPUEfficiency    Metric          `json:"cpu_efficiency"`
	ErrorShare       float64         `json:"error_share"`
	Failed           bool            `json:"failed"`  // over 1% errors, or the target exited
	Verdict          *string         `json:"verdict"` // vs go-default at the same quota and mode; null for go-default
	VerdictRatio     *stats.Interval `json:"verdict_ratio"`
	Decided          bool            `json:"decided"`
	// VerdictRuns is the runs a side the verdict rests on: the look the
	// adaptive repeats stopped at, at most Repeats (later runs count in
	// the cell's own estimate only).
	VerdictRuns int `json:"verdict_runs,omitempty"`
	// Saturated: an open loop offered at or above what this setting
	// serves; its verdict is "saturated", apart from better, worse, same.
	Saturated bool `json:"saturated"`
	// An undecided comparison: the smallest ratio its interval would have
	// shown, and about how many runs a side would decide it (0: unknown).
	DetectableRatio *float64 `json:"detectable_ratio,omitempty"`
	RunsToDecide    int      `json:"runs_to_decide,omitempty"`
	// StoppedEarly: undecided, and the adaptive repeats gave up on it
	// before --max-repeats, since its projection needed more.
	StoppedEarly bool       `json:"stopped_early,omitempty"`
	Notes        []string   `json:"notes"`
	Percentiles  []PctPoint `json:"percentiles,omitempty"` // open loop: the latency distribution, p50..p99.99
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
	HealthyFloorBytes *int64     `json:"healthy_floor_bytes"` // p99 at health_rps not over twice the unlimited reference's, no errors
	Trials            []MemTrial `json:"trials"`
	HealthyTrials     []MemTrial `json:"healthy_trials"`
	Survival          []Survival `json:"survival"`
	// The budget cut the search short: its floor is the lowest limit that
	// passed so far, an upper bound.
	BudgetLimited        bool `json:"budget_limited"`
	HealthyBudgetLimited bool `json:"healthy_budget_limited"`
	// SearchedToBytes is the highest limit the survival search may try.
	// With no floor (and no budget cut) every limit up to it failed: the
	// setting needs more memory than that, however much more.
	SearchedToBytes int64 `json:"searched_to_bytes"`
	// What each floor rests on: how many limited trials, and whether its
	// search found it or only bounded it.
	SurvivalFinding Finding `json:"survival_finding"`
	HealthyFinding  Finding `json:"healthy_finding"`
}

// Statuses of a memory figure (Finding.Status).
const (
	// FloorFound: the search ran to its end; the floor lies above the
	// highest limit under it that failed.
	FloorFound = "found"
	// FloorBounded: the budget cut the search after a limit passed; the
	// floor is at most that limit.
	FloorBounded = "bounded"
	// FloorAbove: no limit tried passed; the floor is above the highest.
	FloorAbove = "above"
	// NotMeasured: no limited trial ran; there is no figure.
	NotMeasured = "not_measured"
)

// Finding is what a memory floor rests on.
type Finding struct {
	Status string `json:"status"`
	// Trials is how many trials under a memory limit the search ran
	// (survival trials, or health trials each judged from its pairs).
	Trials int `json:"trials"`
	// FailedBytes is the highest limit under the floor that failed (0:
	// none did); with no floor, the highest limit tried.
	FailedBytes int64 `json:"failed_bytes"`
	// BudgetCut: the budget ended the search before its rule did.
	BudgetCut bool `json:"budget_cut"`
}

// Label is the floor as a person reads it, with what it rests on.
func (f Finding) Label(floor *int64) string {
	trials := fmt.Sprintf("%d trials", f.Trials)
	if f.Trials == 1 {
		trials = "1 trial"
	}
	switch {
	case f.Status == FloorFound && floor != nil:
		if f.FailedBytes > 0 {
			return fmt.Sprintf("%s (found: %s failed; %s)", fit.FormatBytes(*floor), fit.FormatBytes(f.FailedBytes), trials)
		}
		return fmt.Sprintf("%s (found; %s)", fit.FormatBytes(*floor), trials)
	case f.Status == FloorBounded && floor != nil:
		if f.FailedBytes > 0 {
			return fmt.Sprintf("%s–%s (bounded: the budget cut the search; %s)", fit.FormatBytes(f.FailedBytes), fit.FormatBytes(*floor), trials)
		}
		return fmt.Sprintf("at most %s (bounded: the budget cut the search; %s)", fit.FormatBytes(*floor), trials)
	case f.Status == FloorAbove && f.BudgetCut:
		return fmt.Sprintf("above %s (the budget cut the search; %s, none passed)", fit.FormatBytes(f.FailedBytes), trials)
	case f.Status == FloorAbove:
		return fmt.Sprintf("above %s (%s, none passed)", fit.FormatBytes(f.FailedBytes), trials)
	}
	return "not measured"
}

// FloorLabels gives the survival and healthy floors as a person reads
// them, each with what it rests on (Finding.Label).
func (m MemResult) FloorLabels() (survival, healthy string) {
	return m.SurvivalFinding.Label(m.FloorBytes), m.HealthyFinding.Label(m.HealthyFloorBytes)
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

// Outcomes of a memory trial.
const (
	OK        = "ok"
	OOMKilled = "oom_killed"
	Stalled   = "stalled"
	Errored   = "errors"
)

// MemTrial is one run of the target under a memory limit (a survival
// trial), or one judgement of a limit's health from pairs of runs (a
// health trial: the offered_rps .. pairs fields).
type MemTrial struct {
	LimitBytes     int64           `json:"limit_bytes"`
	Outcome        string          `json:"outcome"`
	Healthy        bool            `json:"healthy"` // health trials: p99 not over twice the reference's, no errors (see the p99 ratio)
	RPS            float64         `json:"rps"`
	P99            float64         `json:"p99_ms"`
	Errors         int             `json:"errors"`
	PeakBytes      uint64          `json:"peak_bytes"`
	PageCacheBytes uint64          `json:"page_cache_bytes"` // file pages charged to the trial at the end
	ResidentBefore float64         `json:"binary_resident_before"`
	MajorFaults    uint64          `json:"major_faults"`
	LimitHits      uint64          `json:"limit_hits"`
	Seconds        float64         `json:"seconds"`
	OfferedRPS     float64         `json:"offered_rps,omitempty"`      // health trials: the fixed open-loop rate
	RefP99         float64         `json:"reference_p99_ms,omitempty"` // health trials: p99 of the runs without a memory limit
	P99Ratio       *stats.Interval `json:"p99_ratio,omitempty"`        // health trials: p99 ÷ the reference's, with its 97% interval at the look that decided (or the last)
	Pairs          int             `json:"pairs,omitempty"`            // health trials: reference and limited runs, alternating
	Decided        bool            `json:"decided,omitempty"`          // health trials: the interval lay wholly on one side of 2 (else judged on the estimate)
	BudgetCut      bool            `json:"budget_cut,omitempty"`       // health trials: the budget stopped it before its interval decided or its pairs ran out
	Detail         string          `json:"detail,omitempty"`
}

func (t MemTrial) Verdict() string {
	switch {
	case t.Outcome != OK:
		return t.Outcome
	case t.Pairs == 0:
		return OK
	}
	v := "healthy"
	if !t.Healthy {
		v = "not healthy"
	}
	if !t.Decided {
		v += " (undecided)"
	}
	if t.BudgetCut {
		v += " (cut by the budget)"
	}
	r := "-"
	if t.P99Ratio != nil {
		r = fmt.Sprintf("×%.2f [%.2f–%.2f]", t.P99Ratio.Value, t.P99Ratio.Low, t.P99Ratio.High)
	}
	return fmt.Sprintf("%s: p99 %.1fms vs %.1fms unlimited, %s, %d pairs", v, t.P99, t.RefP99, r, t.Pairs)
}

// Survival summarises trials per limit: how many runs passed of how many.
type Survival struct {
	LimitBytes int64 `json:"limit_bytes"`
	Passed     int   `json:"passed"`
	Runs       int   `json:"runs"`
}

// Recommendation is what the lab suggests for a Deployment's container.
type Recommendation struct {
	CPURequestCores    float64           `json:"cpu_request_cores"`
	CPULimitCores      float64           `json:"cpu_limit_cores"`
	MemoryRequestBytes int64             `json:"memory_request_bytes"`
	MemoryLimitBytes   int64             `json:"memory_limit_bytes"`
	Setting            string            `json:"setting"` // the CPU setting whose environment is recommended
	Env                map[string]string `json:"env"`
	TargetRPS          float64           `json:"target_rps,omitempty"`
	SLOP99Ms           float64           `json:"slo_p99_ms,omitempty"`
	Confident          bool              `json:"confident"` // every figure it rests on is error-free and its interval meets the rule
	Reasons            []string          `json:"reasons"`
	Check              *CheckTrial       `json:"check"` // the recommended pair run together once
	// NonGoBytes is the non-Go memory the recommendation declares
	// (GOFIT_NON_GO in Env, and the annotation the YAML names); 0: none.
	NonGoBytes int64  `json:"non_go_bytes"`
	YAML       string `json:"yaml"`
}

// CheckTrial is the recommendation run as one trial.
type CheckTrial struct {
	MemTrial
	ProbeRPS float64 `json:"probe_rps"`
	ProbeP99 float64 `json:"probe_p99_ms"`
}

func (s CPUSummary) Is(setting string) bool {
	if s.Setting == setting {
		return true
	}
	for _, x := range s.SameAs {
		if x == setting {
			return true
		}
	}
	return false
}

// CPU settings.
const (
	SetProcs1    = "gomaxprocs=1"
	SetGoDefault = "go-default"
	SetGofit     = "gofit"
	SetProcsNCPU = "gomaxprocs=ncpu"
)

// Mode is a load mode: a closed loop measures capacity, an open loop
// latency at a fixed offered rate.
type Mode string

// The load modes.
const (
	Closed Mode = "closed"
	Open   Mode = "open"
)

// Saturated is the verdict of an open-loop comparison where either side
// was offered more than it can serve: apart from better, worse and same.
const Saturated = "saturated"

// empty reports whether a study measured nothing at all.
func (r *Results) Empty() bool {
	if len(r.CPU) > 0 || len(r.Throughput) > 0 {
		return false
	}
	for _, m := range r.Memory {
		if len(m.Trials) > 0 {
			return false
		}
	}
	return true
}

// Memory settings.
const (
	SetNone         = "none"
	SetLimitGCOff   = "gomemlimit=limit,gogc=off"
	SetAutoMemLimit = "automemlimit" // GOMEMLIMIT = 0.9 × limit, as KimMachineGun/automemlimit and Prometheus' --auto-gomemlimit set
)

// Placement is where the load generator and the target run.
//
// Go derives its default GOMAXPROCS from the CPUs in its affinity mask, so
// shrinking the target's mask would change the very setting under study.
// The target therefore keeps the CPUs a container on this machine would
// see (the lab's own mask at start), and the generator (the lab process
// itself) is pinned to CPUs of its own where that leaves every setting's
// GOMAXPROCS unchanged, or else shares them, which is reported.
type Placement struct {
	Target    []int  `json:"target_cpus"`
	Generator []int  `json:"generator_cpus"`
	Overlap   int    `json:"overlap_cpus"` // CPUs in both sets
	Isolated  bool   `json:"isolated"`     // the generator ran on CPUs the target could not use
	Note      string `json:"note"`
}

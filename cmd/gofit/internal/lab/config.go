package lab

import (
	"io"
	"runtime"
	"time"
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
	Resamples     int // bootstrap resamples
	// Seed orders the CPU cells, the request mix and the bootstrap's
	// resamples; the same seed replays a run's random choices.
	Seed     int64
	Warnings []string  // minimums the user overrode (from the command line)
	Progress io.Writer // progress lines; nil for none
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
		Seed:          1,
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

// Package trial is the lab's contract with its runners: what a trial is
// (a CPU window, memory trials side by side), what running one gives
// back, and what a runner says of where it runs them. The lab's study
// (package lab) decides which trials to run and its analysis what they
// mean; a runner (lab/local on this machine, lab/pods on a cluster's
// nodes, tests' fakes) only runs them. Everything here is plain data but
// Runner and Opener.
package trial

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/target"
)

// A Runner runs the lab's trials: it starts the target under a trial's
// limits and environment, drives the trial's load at it, measures, and
// stops it. A runner may be called from several goroutines at once, up
// to Info().Parallel CPU trials.
type Runner interface {
	// CPU runs one CPU window of c in mode: the target started warm
	// under c's limits, warmed up, then measured at offered requests a
	// second (open loop) for window, or in a closed loop.
	CPU(ctx context.Context, c CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error)
	// Memory runs memory trials side by side: each started cold, in
	// order, then all loaded at once, so every second of the load meets
	// the same machine in each. One trial (survival, probe, throughput),
	// or a health pair: the limited run and its reference.
	Memory(ctx context.Context, specs ...MemSpec) []MemRun
	// Info is what the study is designed by, known before any trial.
	Info() Info
	// Where says where the trials ran, for the records: asked after the
	// last one.
	Where() Where
}

// An Opener makes a study's runner, in two steps around the study's
// warnings: Prepare settles the study's target where its trials will run
// (the sample, an image unpacked), and may add warnings; Open then starts
// what every trial needs (this machine's CPUs, a cluster's nodes and load
// pod), and may fit the study's quotas to it. Close releases what either
// made, whether or not they succeeded; it is called once, after the last
// trial.
type Opener interface {
	Prepare(ctx context.Context, s *Study) error
	Open(ctx context.Context, s *Study) (Runner, error)
	Close() error
}

// ErrUsage marks an error that the user's options caused; its text names
// the flag. The lab's command exits 2 on it.
var ErrUsage = errors.New("usage")

// SampleCommand is the gofit subcommand that serves the lab's sample
// service: a runner starts it when the study names no target.
const SampleCommand = "lab-sample"

// Study is a study as its runner sees it: the target, the quotas it plans
// for, and how each trial's load is driven. The lab's Config embeds it.
type Study struct {
	Target sandbox.Target
	// RefTarget is Target from its own copy of the binary: the health
	// trials' reference runs beside the limited one, and one file's page
	// cache would be charged to whichever touched it first. Zero: Target.
	RefTarget sandbox.Target
	// Sample is set when Target is the embedded sample, whose main module
	// is run with Go ≥ 1.25's GOMAXPROCS default (see README).
	Sample bool
	// Image describes the OCI image Target runs from (--image): reference,
	// digest and platform. Empty: a --cmd binary or the sample.
	Image string
	// ImageRef is --image: the runner's Prepare opens it and sets Target
	// from it; ImageArgs is --args, which replaces the image's cmd (nil:
	// not given).
	ImageRef  string
	ImageArgs []string

	Quotas []float64 // CPU quotas in cores
	// CPURequest adds the row "no limit, request R": no CPU quota, the CPU
	// weight the kubelet gives R cores (cpu.shares), and gofit's
	// GOMAXPROCS from the request times CPURequestFactor (opted in, as
	// GOFIT_CPU_REQUEST_FACTOR does). 0: no such row.
	CPURequest  float64
	Requests    int           // closed loop: requests per window (0: ClosedWindow decides)
	Concurrency int           // closed loop: workers
	Warmup      time.Duration // before every window; excluded from every figure
	Budget      time.Duration // wall time the whole study must fit in (the lab's budget planner)
	// Seed orders the CPU cells, the request mix and the bootstrap's
	// resamples; the same seed replays a run's random choices.
	Seed     int64
	Warnings []string  // minimums the user overrode (from the command line)
	Progress io.Writer `json:"-"` // progress lines; nil for none
	// QuotasGiven: Quotas came from --quotas, not the defaults (whose
	// last row is this machine's CPUs, which --kube replaces with its
	// nodes').
	QuotasGiven bool `json:"-"`
	// WholeRow: the default study measures the whole machine too (its
	// CPUs as a quota, left out where that is 1 or fewer); --kube makes it
	// the trial nodes'.
	WholeRow bool `json:"-"`
}

// Info is what a runner knows once open, before any trial: what the
// study is designed by.
type Info struct {
	// Parallel is how many trials it runs at once without their sharing
	// CPUs (the pods: one per trial node), so the study sends a round's
	// CPU runs out in batches of that many. Below 1: one.
	Parallel int
	// StartCost is what a trial's start costs before any trial ran (the
	// pods: the load pod's start), so the budget planner prices the
	// memory study's reserve from the start. 0: unknown until trials
	// measure their own.
	StartCost time.Duration
	// NCPU is the CPUs a trial's target sees (0: this machine's).
	NCPU int
	// Placement is where the target's and the generator's CPUs are (nil:
	// unknown before the trials; Where may say after them).
	Placement *result.Placement
	// Binary is what the target's executable says of itself, BinaryBytes
	// its size (0: not read here); BinaryErr, when not nil, is why Binary
	// is unknown, a warning in the records.
	Binary      target.Binary
	BinaryBytes int64
	BinaryErr   error
}

// Where is where a runner's trials ran.
type Where struct {
	// Runner is one line for the records.
	Runner string
	// Remote is set where the trials ran on other machines than this one
	// (a cluster's nodes); nil: on this machine, as the study found it.
	Remote *Remote
}

// Remote is what a runner whose trials ran elsewhere says of where, for
// the records in place of this machine's facts.
type Remote struct {
	Placement *result.Placement
	// Node is the first trial node's facts (Host, Kernel, CPUModel, CPUs,
	// CgroupVersion); nil: no trial ran on one.
	Node *result.Machine
	// NCPU is the CPUs the trials' targets saw, where the study could not
	// know them before (0: as the study was designed).
	NCPU int
	// GeneratorCPUSeconds is the load generator's CPU time (nil: unknown,
	// and the records keep this process's).
	GeneratorCPUSeconds *float64
	// The target as it ran: its command, its image, what its page cache
	// was at each start.
	Command, Image, PageCache string
}

// CPUConfig is one distinct environment at one quota, with every setting
// that shares it.
type CPUConfig struct {
	Quota   float64
	Request float64 // the request row: no limit (quota 0), CPU weight of this many cores
	Setting string
	SameAs  []string
	Env     map[string]string
	Procs   int
	From    string
}

// MemSpec is one memory trial: the limits and environment its target
// starts under, and its load.
type MemSpec struct {
	Env   map[string]string
	CPU   float64
	Limit int64 // bytes; 0: no memory limit
	Load  MemLoad
	// Reference: a health pair's reference, run from its own copy of the
	// binary (Study.RefTarget) where the runner has one, so neither run
	// is charged for page cache the other faulted in.
	Reference bool
}

// MemLoad is a memory trial's load: a closed loop of requests (the
// survival trials: as much load as the target takes), or an open loop at
// Rate for Window (the health trials: the same load at every limit).
type MemLoad struct {
	Requests int
	MaxDur   time.Duration // closed loop: stop here even short of Requests (0: no bound)
	Rate     float64
	Window   time.Duration
	// ProbeRPS is the unlimited probes' rate: a trial under StallShare
	// of it for load.StallWindow stalls (0: no stall detection).
	ProbeRPS float64
	// MeasureNonGo: an unlimited probe measures the target's non-Go
	// memory from outside (package nongo) before it stops.
	MeasureNonGo bool
}

// MemRun is what a memory trial measured.
type MemRun struct {
	Trial result.MemTrial
	Load  load.Result
	// NonGo is what a probe (MemLoad.MeasureNonGo) measured of the
	// target's non-Go memory, or why nothing.
	NonGo NonGoProbe
}

// NonGoProbe is one unlimited probe's measurement of the target's non-Go
// memory, or why there is none (both nil: not asked for).
type NonGoProbe struct {
	Measurement *nongo.Measurement
	Err         error
}

const (
	// MemConcurrency is a closed-loop memory trial's workers.
	MemConcurrency = 8
	// StallShare: a memory trial whose throughput falls below this share
	// of the unlimited probe's, while it faults pages in, is stalled.
	StallShare = 0.1
	// MaxErrorShare is the error rate above which a trial or a cell fails.
	MaxErrorShare = 0.01
)

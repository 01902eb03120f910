package lab

import (
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/fit"
)

const (
	sampleGODEBUG = "containermaxprocs=1,updatemaxprocs=1"
	// automemlimitRatio is the share of the limit automemlimit gives GOMEMLIMIT.
	automemlimitRatio = 0.9
	// cfsPeriod is the kernel's default CFS period; a closed-loop window
	// spans at least minPeriods of them, so a burst of one period moves
	// throughput by at most 2%.
	cfsPeriod  = 100 * time.Millisecond
	minPeriods = 50
)

// Config is a study: what its runner sees of it (trial.Study: the
// target, the quotas, how each window's load is driven), and the design
// the study and the analysis read.
type Config struct {
	trial.Study

	CPURequestFactor float64
	CPUSettings      []string      // of SetProcs1, SetGoDefault, SetGofit, SetProcsNCPU
	MinRepeats       int           // of each CPU cell, interleaved
	MaxRepeats       int           // adaptive repeats stop here
	ClosedWindow     time.Duration // closed loop: window length (≥ 50 CFS periods)
	OpenFraction     float64       // open loop: share of the lower closed-loop capacity of gofit and go-default at the quota
	OpenSamples      int           // open loop: latencies per summary cell, pooled over repeats
	OpenDuration     time.Duration // open loop: fixed window per run (0: OpenSamples decides)
	MinOpenWindow    time.Duration
	TargetRPS        float64       // open loop at this rate at every quota, and recommend for it
	SLOP99           time.Duration // with TargetRPS: the p99 the recommendation must meet
	MemSettings      []string      // of SetNone, SetGofit, SetLimitGCOff, SetAutoMemLimit
	MemRequests      int           // requests per memory trial
	Probes           int           // unlimited memory probes: the peak, and the capacity HealthShare is of
	HealthShare      float64       // health trials: open-loop rate as a share of the probes' median rps
	HealthWindow     time.Duration // health trials: each run's window
	HealthPairs      int           // health trials: pairs (reference, limited) before the interval may decide
	HealthMaxPairs   int           // health trials: pairs at most; then the estimate decides
	// HealthResolution is the healthy floor's step: the step the
	// recommendation rounds to, and about what its run-to-run noise allows.
	HealthResolution int64
	Multiples        []float64 // of the no-knob floor, for throughput
	Resolution       int64     // of the floor, bytes
	ConfirmNeed      int       // k of n at the survival floor's edge
	ConfirmOf        int
	// ConfirmSpan is how many adjacent steps, the survival floor and those
	// above it, confirm it together: ConfirmNeed×ConfirmSpan passes of
	// ConfirmOf×ConfirmSpan runs (see floorSearch.Span).
	ConfirmSpan int
	Resamples   int // bootstrap resamples
}

// defaultConfig is the default study, or with quick the reduced one.
func defaultConfig(quick bool) Config {
	ncpu := float64(runtime.NumCPU())
	c := Config{
		Study: trial.Study{
			Quotas:      []float64{0.25, 0.5, 1, ncpu},
			CPURequest:  0.25,
			Concurrency: 16,
			Warmup:      time.Second,
			Budget:      15 * time.Minute,
			Seed:        1,
		},
		CPUSettings:      []string{result.SetProcs1, result.SetGoDefault, result.SetGofit, result.SetProcsNCPU},
		CPURequestFactor: 1,
		MinRepeats:       stats.MinRuns, // fewer, and no verdict could be decided
		MaxRepeats:       12,
		ClosedWindow:     minPeriods * cfsPeriod,
		OpenFraction:     0.6,
		OpenSamples:      5000,
		MinOpenWindow:    minPeriods * cfsPeriod,
		MemSettings:      []string{result.SetGofit, result.SetNone, result.SetAutoMemLimit, result.SetLimitGCOff},
		Probes:           3,
		HealthShare:      0.3,
		HealthWindow:     4 * time.Second,
		HealthPairs:      2,
		HealthMaxPairs:   4,
		HealthResolution: 4 << 20,
		MemRequests:      1200,
		Multiples:        []float64{1, 1.5, 2},
		// 4 MiB, as the healthy floor: a stall edge moves more than a
		// finer step run to run, so the floor has no such precision
		// (docs/results/memory.md#what-set-the-labs-floor-search).
		Resolution: 4 << 20,
		// The floor is a limit that, with the step above it, survives 12
		// of 14 runs: near its edge a service survives some runs and
		// stalls in others over a band up to two steps wide, and pooling
		// two steps lands at the band's top, where one rare stall does
		// not move it (docs/results/memory.md#what-set-the-labs-floor-search).
		// Survival trials are short, so this costs about fourteen more
		// per setting.
		ConfirmNeed: 6,
		ConfirmOf:   7,
		ConfirmSpan: 2,
		Resamples:   1000,
	}
	c.WholeRow = !quick
	if ncpu <= 1 {
		c.Quotas = []float64{0.25, 0.5, 1}
	}
	if quick {
		c.Quotas = []float64{0.25}
		c.CPURequest = 0 // the request row costs a quota's cells: not in the reduced study
		c.CPUSettings = []string{result.SetProcs1, result.SetGoDefault, result.SetGofit}
		c.MaxRepeats = 8
		c.Budget = 4 * time.Minute
		// gofit against the peer users would pick instead; the no-knob
		// floor and its multiples are the default study's.
		c.MemSettings = []string{result.SetGofit, result.SetAutoMemLimit}
		c.MemRequests = 800
		c.Multiples = nil
		c.Probes = 2
		c.HealthMaxPairs = 3
		// The survival edge is confirmed 2 of 3, at one step: four
		// minutes leave no time for the default's band top, so where a
		// service's edge is a band, --quick's survival floor can sit a
		// step or two under the default's
		// (docs/results/memory.md#what-set-the-labs-floor-search).
		c.ConfirmNeed, c.ConfirmOf, c.ConfirmSpan = 2, 3, 1
	}
	return c
}

// ErrUsage marks a configuration the command line got wrong; the error
// names the flag. A runner's usage errors are the same (trial.ErrUsage).
var ErrUsage = trial.ErrUsage

// Options are the command line's choices, before defaults and checks.
type Options struct {
	Quick        bool
	Replay       string // a directory with an earlier run's records.json: analyse it again, run nothing
	Cmd          string // the service's command; {port} is replaced by a free port
	URL          string // the URL to load; readiness is polled here
	Out          string // directory for report.html and results.json
	JSON         bool   // print results.json instead of the summary
	Quotas       string // CPU quotas in cores, comma-separated
	Repeats      int
	MaxRepeats   int
	Requests     int
	Concurrency  int
	MemRequests  int
	OpenFraction float64
	OpenDuration time.Duration
	Budget       time.Duration
	TargetRPS    float64
	SLOP99       time.Duration
	Targets      string   // a targets file (the request mix) instead of URL
	Headers      []string // with URL: "Name: value" headers for every request
	Seed         int64
	ReadyURL     string        // polled for readiness instead of URL
	ReadyTimeout time.Duration // how long a start may take
	Image        string        // an OCI image to run instead of --cmd: oci:DIR, oci-archive:FILE, docker-archive:FILE or a registry reference
	Args         string        // with Image: replaces the image's cmd; {port} is replaced
	// Kube runs the trials as pods through the API server (--kube, whose
	// other flags are lab/pods's Options): it only changes which options
	// go together; the command chooses the runner.
	Kube bool
	// Given names the options the user set, by flag name ("repeats"): a
	// count or duration given as 0 is a mistake, not the default.
	Given map[string]bool
}

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
}

// Config is the study the options ask for: the defaults (DefaultConfig)
// with every given option checked and applied. Errors name the flag.
func (o Options) Config() (Config, error) {
	set := func(name string) bool { return o.Given[name] }
	cfg := defaultConfig(o.Quick)
	if set("quotas") {
		cfg.Quotas, cfg.QuotasGiven = nil, true
		for _, s := range strings.Split(o.Quotas, ",") {
			q, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || !(q >= 0.01 && q <= 1024) {
				return Config{}, usagef("--quotas: %q is not a number of cores between 0.01 and 1024", s)
			}
			cfg.Quotas = append(cfg.Quotas, q)
		}
		if cfg.CPURequest > 0 {
			cfg.CPURequest = slices.Min(cfg.Quotas) // the request row asks for the smallest quota
		}
	}
	for _, c := range []struct {
		name string
		v    int
		dst  *int
	}{{"repeats", o.Repeats, &cfg.MinRepeats}, {"max-repeats", o.MaxRepeats, &cfg.MaxRepeats}, {"requests", o.Requests, &cfg.Requests},
		{"concurrency", o.Concurrency, &cfg.Concurrency}, {"mem-requests", o.MemRequests, &cfg.MemRequests}} {
		if !set(c.name) {
			continue
		}
		if c.v <= 0 {
			return Config{}, usagef("--%s %d: must be at least 1", c.name, c.v)
		}
		*c.dst = c.v
	}
	if set("repeats") && !set("max-repeats") {
		cfg.MaxRepeats = max(cfg.MaxRepeats, cfg.MinRepeats)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		dst  *time.Duration
	}{{"open-duration", o.OpenDuration, &cfg.OpenDuration}, {"budget", o.Budget, &cfg.Budget}, {"slo-p99", o.SLOP99, &cfg.SLOP99}} {
		if !set(d.name) {
			continue
		}
		if d.v <= 0 {
			return Config{}, usagef("--%s %v: must be positive", d.name, d.v)
		}
		*d.dst = d.v
	}
	if set("open-fraction") {
		cfg.OpenFraction = o.OpenFraction
	}
	if set("target-rps") {
		cfg.TargetRPS = o.TargetRPS
	}
	if set("slo-p99") && !set("target-rps") {
		return Config{}, usagef("--slo-p99 needs --target-rps")
	}
	if cfg.MinRepeats < stats.MinRuns {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("--repeats %d is under the %d runs a side a verdict needs: comparisons are undecided until adaptive repeats reach %d", cfg.MinRepeats, stats.MinRuns, stats.MinRuns))
	}
	if set("requests") {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("--requests %d overrides the closed-loop minimum of 50 CFS periods per window; short windows make throughput and CPU efficiency noisy (see periods per cell)", cfg.Requests))
	}
	if set("open-duration") {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("--open-duration %v overrides the minimum of 5000 latencies per open-loop cell; p99 may rest on fewer (see samples per cell)", cfg.OpenDuration))
	}
	if set("open-fraction") && set("target-rps") {
		cfg.Warnings = append(cfg.Warnings, "--target-rps sets the open-loop rate; --open-fraction is ignored")
	}
	if set("seed") {
		cfg.Seed = o.Seed
	}
	if err := o.target(&cfg); err != nil {
		return Config{}, err
	}
	return cfg, cfg.Validate()
}

// target fills cfg.Target from --cmd and --url or --targets, --header,
// --ready-url and --ready-timeout.
func (o Options) target(cfg *Config) error {
	set := func(name string) bool { return o.Given[name] }
	if o.URL != "" && o.Targets != "" {
		return usagef("--url and --targets: give one")
	}
	if o.Cmd != "" && o.Image != "" {
		return usagef("--cmd and --image: give one")
	}
	if o.Kube && o.Cmd != "" {
		return usagef("--kube runs images: give --image (a registry reference the nodes can pull), or neither for the sample")
	}
	for _, f := range []string{"kubeconfig", "context", "namespace", "node-selector", "agent-namespace", "kube-image"} {
		if set(f) && !o.Kube {
			return usagef("--%s goes with --kube", f)
		}
	}
	if set("args") && o.Image == "" {
		return usagef("--args goes with --image (put a binary's arguments in --cmd)")
	}
	if o.Image != "" && o.URL == "" && o.Targets == "" {
		return usagef("--image goes with --url or --targets (the image's port is {port}, also in $PORT)")
	}
	if (o.Cmd == "" && o.Image == "") != (o.URL == "" && o.Targets == "") {
		return usagef("--cmd goes with --url or --targets")
	}
	if len(o.Headers) > 0 && o.URL == "" {
		return usagef("--header goes with --url (put headers in the --targets file)")
	}
	if (o.ReadyURL != "" || set("ready-timeout")) && o.Cmd == "" && o.Image == "" {
		return usagef("--ready-url and --ready-timeout go with --cmd or --image")
	}
	if set("ready-timeout") && o.ReadyTimeout <= 0 {
		return usagef("--ready-timeout %v: must be positive", o.ReadyTimeout)
	}
	if o.Cmd == "" && o.Image == "" {
		return nil
	}
	t := sandbox.Target{URL: o.URL, ReadyURL: o.ReadyURL, ReadyTimeout: o.ReadyTimeout}
	if o.Image != "" {
		// Main opens the image and fills in the command.
		cfg.ImageRef = o.Image
		if set("args") {
			cfg.ImageArgs = strings.Fields(o.Args)
			if cfg.ImageArgs == nil {
				cfg.ImageArgs = []string{} // --args '': the entrypoint alone
			}
		}
	} else {
		words := strings.Fields(o.Cmd)
		if len(words) == 0 {
			return usagef("--cmd %q: no command", o.Cmd)
		}
		t.Path, t.Args = words[0], words[1:]
	}
	if o.URL != "" {
		if err := load.CheckURL(o.URL); err != nil {
			return usagef("--url %v", err)
		}
	}
	for _, h := range o.Headers {
		k, v, err := load.ParseHeader(h)
		if err != nil {
			return usagef("%v", err)
		}
		if t.Header == nil {
			t.Header = http.Header{}
		}
		t.Header.Add(k, v)
	}
	if o.Targets != "" {
		ts, err := load.ReadTargets(o.Targets)
		if err != nil {
			return usagef("%v", err)
		}
		t.Requests = ts
	}
	if o.ReadyURL != "" {
		if err := load.CheckURL(o.ReadyURL); err != nil {
			return usagef("--ready-url %v", err)
		}
	}
	if t.Ready() == "" {
		return usagef("--targets %s has no GET target to poll for readiness; give --ready-url", o.Targets)
	}
	cfg.Target = t
	return nil
}

// Validate checks a study before it starts: what newLab once clamped in
// silence is an error naming the flag that sets it (or the field, where
// no flag does).
func (c Config) Validate() error {
	if len(c.Quotas) == 0 {
		return usagef("--quotas: no quota")
	}
	for _, q := range c.Quotas {
		if !(q >= 0.01 && q <= 1024) {
			return usagef("--quotas: %g is not a number of cores between 0.01 and 1024", q)
		}
	}
	if !(c.CPURequest >= 0 && c.CPURequest <= 1024) {
		return usagef("Config.CPURequest %g: want 0 (no request row) to 1024 cores", c.CPURequest)
	}
	if c.CPURequest > 0 {
		if err := fit.ValidCPURequestFactor(c.CPURequestFactor); err != nil {
			return usagef("Config.CPURequestFactor: %v", err)
		}
	}
	if len(c.CPUSettings) == 0 {
		return usagef("Config.CPUSettings: no CPU setting")
	}
	for _, s := range c.CPUSettings {
		switch s {
		case result.SetProcs1, result.SetGoDefault, result.SetGofit, result.SetProcsNCPU:
		default:
			return usagef("Config.CPUSettings: unknown setting %q", s)
		}
	}
	for _, s := range c.MemSettings {
		switch s {
		case result.SetNone, result.SetGofit, result.SetLimitGCOff, result.SetAutoMemLimit:
		default:
			return usagef("Config.MemSettings: unknown setting %q", s)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"--repeats", c.MinRepeats}, {"--concurrency", c.Concurrency}, {"--mem-requests", c.MemRequests},
		{"Config.Probes", c.Probes}, {"Config.Resamples", c.Resamples}, {"Config.OpenSamples", c.OpenSamples},
		{"Config.ConfirmNeed", c.ConfirmNeed}, {"Config.ConfirmOf", c.ConfirmOf}, {"Config.ConfirmSpan", c.ConfirmSpan}, {"Config.HealthPairs", c.HealthPairs}} {
		if n.v < 1 {
			return usagef("%s %d: must be at least 1", n.name, n.v)
		}
	}
	if c.Requests < 0 {
		return usagef("--requests %d: must be at least 1", c.Requests)
	}
	if c.MaxRepeats < c.MinRepeats {
		return usagef("--max-repeats %d is under --repeats %d", c.MaxRepeats, c.MinRepeats)
	}
	if c.HealthMaxPairs < c.HealthPairs {
		return usagef("Config.HealthMaxPairs %d is under Config.HealthPairs %d", c.HealthMaxPairs, c.HealthPairs)
	}
	if !(c.HealthShare > 0 && c.HealthShare <= 1) {
		return usagef("Config.HealthShare %g: must be above 0 and at most 1", c.HealthShare)
	}
	if float64(c.HealthPairs)*c.HealthWindow.Seconds() < stats.MinBlocks*stats.BlockSeconds {
		// Fewer blocks a side and the bootstrap cannot tell anything.
		return usagef("Config.HealthWindow %v × Config.HealthPairs %d: under the %d blocks of %gs a comparison needs", c.HealthWindow, c.HealthPairs, stats.MinBlocks, stats.BlockSeconds)
	}
	if c.ConfirmNeed > c.ConfirmOf {
		return usagef("Config.ConfirmNeed %d is over Config.ConfirmOf %d", c.ConfirmNeed, c.ConfirmOf)
	}
	if !(c.OpenFraction > 0 && c.OpenFraction <= 1) {
		return usagef("--open-fraction %g: must be above 0 and at most 1", c.OpenFraction)
	}
	if c.TargetRPS != 0 && !(c.TargetRPS > 0 && c.TargetRPS <= 1e6) || math.IsNaN(c.TargetRPS) {
		return usagef("--target-rps %g: must be above 0 and at most 1e6", c.TargetRPS)
	}
	if c.SLOP99 < 0 || c.SLOP99 > 0 && c.TargetRPS == 0 {
		return usagef("--slo-p99 %v: must be positive, and needs --target-rps", c.SLOP99)
	}
	if c.Budget <= 0 {
		return usagef("--budget %v: must be positive", c.Budget)
	}
	if c.OpenDuration < 0 {
		return usagef("--open-duration %v: must be positive", c.OpenDuration)
	}
	if c.Requests == 0 && c.ClosedWindow <= 0 {
		return usagef("Config.ClosedWindow %v: must be positive without --requests", c.ClosedWindow)
	}
	if c.Resolution <= 0 || c.HealthResolution <= 0 {
		return usagef("Config.Resolution %d, Config.HealthResolution %d: must be positive", c.Resolution, c.HealthResolution)
	}
	return nil
}

package gofit

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/seam"
	"github.com/gofit-dev/gofit/internal/target"
)

type config struct {
	logger  *slog.Logger
	opts    fit.Options
	refresh time.Duration
	root    string
	ticker  func(time.Duration) (<-chan time.Time, func())
	watch   func(time.Duration) (<-chan time.Time, func()) // the memory watch's clock; nil: none
	lookup  func(string) (string, bool)

	// Seams for tests: the Go runtime, the affinity mask, the clock, the
	// runtime's metrics and the binary's Go version.
	rt       runtimeAPI
	cpus     func() int
	now      func() time.Time
	goMemory func() int64
	self     *target.Binary
}

// Option configures Start and New.
type Option func(*config)

// WithLogger logs decisions and problems; the default logs nothing.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMemoryRatio sets the share of the memory limit given to GOMEMLIMIT
// when the unmanaged memory measured is smaller (default 0.9). It must
// pass fit.ValidMemoryRatio.
func WithMemoryRatio(r float64) Option { return func(c *config) { c.opts.MemoryRatio = r } }

// WithRounding says how a fractional CPU limit becomes GOMAXPROCS (default
// fit.Floor).
func WithRounding(r fit.Rounding) Option { return func(c *config) { c.opts.Rounding = r } }

// WithGOGC opts in to "use the memory you pay for": GOGC is set to v ("off"
// or a percentage such as "200") whenever a GOMEMLIMIT is set, so the heap
// grows into the limit instead of collecting early. Default: GOGC untouched.
func WithGOGC(v string) Option { return func(c *config) { c.opts.GOGC = v } }

// WithCPURequestFactor opts in to GOMAXPROCS from the CPU request when
// there is no CPU limit: max(minimum, ceil(request × factor)), capped at the
// usable CPUs. The request is read from the cgroup's cpu.shares (v1) or
// cpu.weight (v2), where the kubelet writes it; outside Kubernetes those
// hold a default (1024 shares, weight 100) that reads as 1 or 2.5 cores.
// f must pass fit.ValidCPURequestFactor; 0 turns it off (the default).
func WithCPURequestFactor(f float64) Option { return func(c *config) { c.opts.CPURequestFactor = f } }

// WithCPURequestMin sets the least GOMAXPROCS planned from a CPU request: 1
// or 2 (default fit.DefaultCPURequestMin).
func WithCPURequestMin(n int) Option { return func(c *config) { c.opts.CPURequestMin = n } }

// WithRefresh sets how often limits are re-read (default DefaultRefresh,
// at least MinRefresh).
func WithRefresh(d time.Duration) Option { return func(c *config) { c.refresh = d } }

func init() {
	seam.Option = func(s seam.Seams) any { return withSeams(s) }
}

// withSeams replaces what gofit reads from the real system (tests, and
// package auto's environment lookup), through package seam.
func withSeams(s seam.Seams) Option {
	return func(c *config) {
		if s.Root != "" {
			c.root = s.Root
		}
		if s.LookupEnv != nil {
			c.lookup = s.LookupEnv
		}
		if s.Ticker != nil {
			// A test that drives refreshes by hand gets no memory watch
			// unless it asks for one.
			c.ticker, c.watch = s.Ticker, s.Watch
		}
		if s.Watch != nil {
			c.watch = s.Watch
		}
	}
}

// runtimeAPI is the part of the Go runtime gofit changes; tests swap it.
type runtimeAPI struct {
	gomaxprocs     func(int) int
	setMemoryLimit func(int64) int64
	setGCPercent   func(int) int
	// handBack is runtime.SetDefaultGOMAXPROCS, nil before Go 1.25.
	handBack func()
}

var realRuntime = runtimeAPI{
	gomaxprocs:     runtime.GOMAXPROCS,
	setMemoryLimit: debug.SetMemoryLimit,
	setGCPercent:   debug.SetGCPercent,
	handBack:       setDefaultGOMAXPROCS,
}

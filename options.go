package gofit

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/target"
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

// WithPolicy sets all of the policy's options at once: as fit.ReadEnv
// reads them from the GOFIT_* variables, or fit.BindFlags from a program's
// flags. Options given after it change single fields.
func WithPolicy(o fit.Options) Option { return func(c *config) { c.opts = o } }

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

// WithRoot reads /proc and /sys under dir instead of "/", as
// cgroup.NewFS(dir) does: a fixture tree in tests (package cgrouptest
// writes one), or a host's filesystem mounted elsewhere. Only the files
// move: the process fitted is still this one.
func WithRoot(dir string) Option {
	return func(c *config) {
		if dir == "" {
			dir = "/"
		}
		c.root = dir
	}
}

// WithLookupEnv reads GOFIT and the Go runtime's variables (fit.VarNames)
// through lookup instead of os.LookupEnv: a test's environment, or the one
// package auto was configured from.
func WithLookupEnv(lookup func(string) (string, bool)) Option {
	return func(c *config) {
		if lookup != nil {
			c.lookup = lookup
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

// Package gofit fits a Go process to its container: it sets GOMAXPROCS and
// the memory limit (GOMEMLIMIT) from the cgroup's CPU and memory limits,
// and keeps them fitted as the limits change (in-place pod resize).
//
// The simplest use is the side-effect import
//
//	import _ "github.com/gofit-dev/gofit/auto"
//
// which calls Start at init, before main. Start gives the same with options:
//
//	f, err := gofit.Start(ctx, gofit.WithLogger(slog.Default()))
//	if err != nil { ... }        // not in a cgroup, or unreadable: nothing changed
//	defer f.Stop()               // restores the previous settings
//
// gofit never panics or blocks the host program: unreadable cgroup files are
// logged once and the current settings are kept.
package gofit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

// DefaultRefresh is how often limits are re-read: as often as Go's runtime
// re-reads its own, so a resize takes effect within a second or so.
const DefaultRefresh = time.Second

// ErrDisabled is returned by Start when GOFIT=off.
var ErrDisabled = errors.New("gofit disabled by GOFIT=off")

type config struct {
	logger  *slog.Logger
	opts    fit.Options
	refresh time.Duration
	root    string
	ticker  func(time.Duration) (<-chan time.Time, func())
	lookup  func(string) (string, bool)
	rt      runtimeAPI
	cpus    int // tests: overrides the affinity mask
}

// Option configures Start and New.
type Option func(*config)

// WithLogger logs decisions and problems; the default logs nothing.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMemoryRatio sets the share of the memory limit given to GOMEMLIMIT
// when the unmanaged memory measured is smaller (default 0.9).
func WithMemoryRatio(r float64) Option { return func(c *config) { c.opts.MemoryRatio = r } }

// WithRounding says how a fractional CPU limit becomes GOMAXPROCS (default
// fit.Floor).
func WithRounding(r fit.Rounding) Option { return func(c *config) { c.opts.Rounding = r } }

// WithGOGC opts in to "use the memory you pay for": GOGC is set to v ("off"
// or a percentage such as "200") whenever a GOMEMLIMIT is set, so the heap
// grows into the limit instead of collecting early. Default: GOGC untouched.
func WithGOGC(v string) Option { return func(c *config) { c.opts.GOGC = v } }

// WithRefresh sets how often limits are re-read (default DefaultRefresh).
func WithRefresh(d time.Duration) Option { return func(c *config) { c.refresh = d } }

// WithRoot reads /proc and /sys under dir instead of "/" (for tests).
func WithRoot(dir string) Option { return func(c *config) { c.root = dir } }

// WithTicker replaces the clock that drives refreshes: newTicker returns a
// channel of ticks and a stop function (for tests).
func WithTicker(newTicker func(time.Duration) (<-chan time.Time, func())) Option {
	return func(c *config) { c.ticker = newTicker }
}

// WithEnv replaces os.LookupEnv for the variables gofit reads (for tests).
func WithEnv(lookup func(string) (string, bool)) Option { return func(c *config) { c.lookup = lookup } }

// runtimeAPI is the part of the Go runtime gofit changes; tests swap it.
type runtimeAPI struct {
	gomaxprocs     func(int) int
	setMemoryLimit func(int64) int64
	setGCPercent   func(int) int
	defaultProcs   func() bool // hand GOMAXPROCS back to the runtime; false if unsupported
}

var realRuntime = runtimeAPI{
	gomaxprocs:     runtime.GOMAXPROCS,
	setMemoryLimit: debug.SetMemoryLimit,
	setGCPercent:   debug.SetGCPercent,
	defaultProcs:   setDefaultGOMAXPROCS,
}

// Fitter keeps one process fitted to its cgroup.
type Fitter struct {
	cfg config
	cg  *cgroup.Cgroups
	log *slog.Logger

	mu        sync.Mutex
	in        fit.Input
	plan      fit.Plan
	limits    cgroup.Limits
	planned   bool
	unmanaged window
	lastErr   string
	errors    uint64
	refreshes uint64

	// What gofit changed, to undo it.
	tookProcs   bool
	origProcs   int
	setMemLimit bool
	origMemLim  int64
	setGOGC     bool
	origGOGC    int
	memLimit    int64 // what gofit set last
	gogc        string

	samples []metrics.Sample

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// New finds the process's cgroups without changing anything. It returns
// ErrDisabled when GOFIT=off, and an error wrapping cgroup.ErrNoCgroup
// outside a container.
func New(opts ...Option) (*Fitter, error) {
	cfg := config{refresh: DefaultRefresh, root: "/", rt: realRuntime, lookup: os.LookupEnv}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(discardHandler{})
	}
	if cfg.refresh <= 0 {
		return nil, fmt.Errorf("gofit: refresh interval %v: must be positive", cfg.refresh)
	}
	if r := cfg.opts.MemoryRatio; r != 0 && (r <= 0 || r >= 1) {
		return nil, fmt.Errorf("gofit: memory ratio %g: must be between 0 and 1", r)
	}
	if v, _ := cfg.lookup("GOFIT"); v == "off" {
		return nil, ErrDisabled
	}
	cg, err := cgroup.NewFS(cfg.root).Self()
	if err != nil {
		return nil, fmt.Errorf("gofit: %w", err)
	}
	f := &Fitter{cfg: cfg, cg: cg, log: cfg.logger, samples: []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}}
	return f, nil
}

// Start fits the process now and keeps it fitted until ctx ends or Stop is
// called. On error nothing was changed.
func Start(ctx context.Context, opts ...Option) (*Fitter, error) {
	f, err := New(opts...)
	if err != nil {
		return nil, err
	}
	if err := f.Refresh(); err != nil {
		return nil, err
	}
	f.run(ctx)
	return f, nil
}

func (f *Fitter) run(ctx context.Context) {
	ctx, f.cancel = context.WithCancel(ctx)
	f.done = make(chan struct{})
	newTicker := f.cfg.ticker
	if newTicker == nil {
		newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	tick, stopTick := newTicker(f.cfg.refresh)
	go func() {
		defer close(f.done)
		defer stopTick()
		defer func() {
			// Never take the host program down.
			if r := recover(); r != nil {
				f.log.Error("gofit: refresh loop stopped", "panic", r)
			}
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick:
				_ = f.Refresh() // errors are logged once inside
			}
		}
	}()
}

// Stop ends the refresh loop and restores the settings gofit changed.
func (f *Fitter) Stop() {
	f.stopOnce.Do(func() {
		if f.cancel != nil {
			f.cancel()
			<-f.done
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		rt := f.cfg.rt
		if f.tookProcs {
			if !rt.defaultProcs() {
				rt.gomaxprocs(f.origProcs)
			}
			f.log.Info("gofit: GOMAXPROCS restored")
		}
		if f.setMemLimit {
			rt.setMemoryLimit(f.origMemLim)
		}
		if f.setGOGC {
			rt.setGCPercent(f.origGOGC)
		}
		f.tookProcs, f.setMemLimit, f.setGOGC = false, false, false
		f.cg.Close()
	})
}

// Plan is the plan in force after the last refresh.
func (f *Fitter) Plan() fit.Plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plan
}

// Limits are the limits read at the last refresh.
func (f *Fitter) Limits() cgroup.Limits {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limits
}

// Unmanaged is the memory the cgroup charges outside the Go runtime, as
// measured over the last minute (0 when there is no memory limit).
func (f *Fitter) Unmanaged() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.in.Unmanaged
}

// Errors counts refreshes that failed to read the cgroup.
func (f *Fitter) Errors() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errors
}

// Cgroups gives access to the process's cgroups, for stats.
func (f *Fitter) Cgroups() *cgroup.Cgroups { return f.cg }

// Report assembles limits, current stats and the plan.
func (f *Fitter) Report() (Report, error) {
	s, err := f.cg.Stats()
	if err != nil {
		return Report{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return NewReport(f.cg, f.limits, s, f.in, f.plan), nil
}

// Refresh reads the limits once, recomputes the plan if they changed and
// applies what differs. On a read error the current settings are kept and
// the error is logged once.
func (f *Fitter) Refresh() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refreshes++
	l, err := f.cg.Limits()
	var unmanaged int64
	if err == nil && l.Memory.Effective() > 0 {
		unmanaged, err = f.measureUnmanaged()
	}
	if err != nil {
		f.errors++
		if msg := err.Error(); msg != f.lastErr {
			f.lastErr = msg
			f.log.Warn("gofit: cannot read cgroup limits; keeping current settings", "err", err)
		}
		return err
	}
	if f.lastErr != "" {
		f.log.Info("gofit: cgroup limits readable again")
		f.lastErr = ""
	}
	if f.planned && l == f.limits && unmanaged == f.in.Unmanaged {
		return nil // steady state: nothing to compute or apply
	}
	first := !f.planned
	f.limits, f.planned = l, true
	f.in = SelfInput(l)
	f.in.Env = Env(f.cfg.lookup)
	f.in.Unmanaged = unmanaged
	if f.cfg.cpus > 0 {
		f.in.CPUs = f.cfg.cpus
	}
	p := fit.Compute(f.in, f.cfg.opts)
	f.apply(p, first)
	f.plan = p
	return nil
}

// unmanagedStep quantises the unmanaged estimate so that small wobbles do
// not recompute the plan on every refresh.
const unmanagedStep = 1 << 20

// measureUnmanaged estimates memory charged to the cgroup that GOMEMLIMIT
// does not bound: the working set (usage minus inactive page cache) minus
// what the Go runtime has mapped and not released. The estimate is the
// largest over the last minute of refreshes, rounded up to 1 MiB.
func (f *Fitter) measureUnmanaged() (int64, error) {
	m, err := f.cg.MemoryStats()
	if err != nil {
		return 0, err
	}
	metrics.Read(f.samples)
	var goMem uint64
	if f.samples[0].Value.Kind() == metrics.KindUint64 && f.samples[1].Value.Kind() == metrics.KindUint64 {
		goMem = f.samples[0].Value.Uint64() - f.samples[1].Value.Uint64()
	}
	var u int64
	if m.WorkingSet > goMem {
		u = int64(m.WorkingSet - goMem)
	}
	u = f.unmanaged.add(u)
	return (u + unmanagedStep - 1) / unmanagedStep * unmanagedStep, nil
}

// window is the maximum of the last 60 samples, with no allocation.
type window struct {
	v    [60]int64
	next int
}

func (w *window) add(x int64) int64 {
	w.v[w.next] = x
	w.next = (w.next + 1) % len(w.v)
	m := int64(0)
	for _, y := range w.v {
		m = max(m, y)
	}
	return m
}

func (f *Fitter) apply(p fit.Plan, first bool) {
	rt := f.cfg.rt
	for _, w := range p.Warnings {
		if first || !contains(f.plan.Warnings, w) {
			f.log.Warn("gofit: " + w)
		}
	}

	// GOMAXPROCS. An explicit GOMAXPROCS env var wins. On Go ≥ 1.25 the
	// runtime follows the cgroup itself; calling runtime.GOMAXPROCS would
	// switch that off, so only take over when its choice differs.
	if !p.GOMAXPROCSFromEnv {
		cur := rt.gomaxprocs(0)
		switch {
		case !f.tookProcs && p.RuntimeFollowsCgroup && p.RuntimeGOMAXPROCS == p.GOMAXPROCS:
			// The runtime's own choice is ours; it will keep it current.
		case f.tookProcs && p.RuntimeFollowsCgroup && p.RuntimeGOMAXPROCS == p.GOMAXPROCS && rt.defaultProcs():
			f.tookProcs = false
			f.log.Info("gofit: GOMAXPROCS handed back to the Go runtime", "gomaxprocs", p.GOMAXPROCS)
		case cur != p.GOMAXPROCS:
			if !f.tookProcs {
				f.tookProcs, f.origProcs = true, cur
			}
			rt.gomaxprocs(p.GOMAXPROCS)
			f.log.Info("gofit: GOMAXPROCS set", "from", cur, "to", p.GOMAXPROCS, "reasons", p.Reasons)
		}
	}

	// GOMEMLIMIT. An explicit GOMEMLIMIT env var wins.
	if !p.GOMEMLIMITFromEnv {
		want := p.GOMEMLIMIT
		switch {
		case want > 0 && want != f.memLimit:
			prev := rt.setMemoryLimit(want)
			if !f.setMemLimit {
				f.setMemLimit, f.origMemLim = true, prev
			}
			f.memLimit = want
			f.log.Info("gofit: memory limit set", "gomemlimit", want, "unmanaged", f.in.Unmanaged)
		case want == 0 && f.setMemLimit:
			rt.setMemoryLimit(f.origMemLim)
			f.setMemLimit, f.memLimit = false, 0
			f.log.Info("gofit: memory limit removed with the cgroup's")
		}
	}

	// GOGC, only in the opt-in mode and never over an explicit GOGC.
	if p.GOGC != f.gogc {
		switch {
		case p.GOGC != "":
			pct := -1
			if p.GOGC != "off" {
				n, err := strconv.Atoi(p.GOGC)
				if err != nil || n <= 0 {
					f.log.Warn("gofit: ignoring GOGC option", "value", p.GOGC)
					break
				}
				pct = n
			}
			prev := rt.setGCPercent(pct)
			if !f.setGOGC {
				f.setGOGC, f.origGOGC = true, prev
			}
			f.log.Info("gofit: GOGC set", "gogc", p.GOGC)
		case f.setGOGC:
			rt.setGCPercent(f.origGOGC)
			f.setGOGC = false
		}
		f.gogc = p.GOGC
	}
}

// CurrentMemoryLimit is the runtime's memory limit now (math.MaxInt64 when none).
func CurrentMemoryLimit() int64 { return debug.SetMemoryLimit(-1) }

// NoMemoryLimit is the runtime's value for "no memory limit".
const NoMemoryLimit = math.MaxInt64

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type discardHandler struct{}

func (discardHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (discardHandler) Handle(context.Context, slog.Record) error { return nil }
func (d discardHandler) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discardHandler) WithGroup(string) slog.Handler           { return d }

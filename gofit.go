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
//	defer f.Stop()               // restores the settings found at Start
//
// The decisions are the policy's (package fit); this package reads the
// inputs, applies the plan and keeps it current. It never panics or blocks
// the host program: unreadable cgroup files are logged once and the current
// settings are kept.
package gofit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/affinity"
	"github.com/gofit-dev/gofit/internal/procmem"
	"github.com/gofit-dev/gofit/internal/target"
)

// DefaultRefresh is how often limits are re-read: as often as Go's runtime
// re-reads its own, so a resize takes effect within a second or so.
const DefaultRefresh = time.Second

// MinRefresh is the shortest refresh interval accepted: each refresh reads
// a handful of files, and more often than this would spend a small CPU
// quota on watching it.
const MinRefresh = 100 * time.Millisecond

// ErrDisabled is returned by New and Start when GOFIT is off, false or 0.
var ErrDisabled = errors.New("gofit disabled by the GOFIT environment variable")

// ValidRefresh accepts a refresh interval of at least MinRefresh.
func ValidRefresh(d time.Duration) error {
	if d < MinRefresh {
		return fmt.Errorf("refresh interval %v: want at least %v", d, MinRefresh)
	}
	return nil
}

type config struct {
	logger  *slog.Logger
	opts    fit.Options
	refresh time.Duration
	root    string
	ticker  func(time.Duration) (<-chan time.Time, func())
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

// WithRefresh sets how often limits are re-read (default DefaultRefresh,
// at least MinRefresh).
func WithRefresh(d time.Duration) Option { return func(c *config) { c.refresh = d } }

// WithRoot reads /proc and /sys under dir instead of "/" (for tests).
func WithRoot(dir string) Option { return func(c *config) { c.root = dir } }

// WithTicker replaces the clock that drives refreshes: newTicker returns a
// channel of ticks and a stop function (for tests).
func WithTicker(newTicker func(time.Duration) (<-chan time.Time, func())) Option {
	return func(c *config) { c.ticker = newTicker }
}

// WithLookupEnv replaces os.LookupEnv for the variables gofit reads: GOFIT
// and the Go runtime's own (fit.VarNames).
func WithLookupEnv(lookup func(string) (string, bool)) Option {
	return func(c *config) { c.lookup = lookup }
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

// Fitter keeps one process fitted to its cgroup.
type Fitter struct {
	cfg    config
	cg     *cgroup.Cgroups
	mem    *procmem.Reader
	log    *slog.Logger
	policy fit.Policy
	vars   map[string]string // the Go runtime's variables, read once: they were read at start-up
	self   target.Binary

	mu        sync.Mutex
	in        fit.Input
	plan      fit.Plan
	limits    cgroup.Limits
	last      inputs
	planned   bool
	unmanaged window
	noRollup  bool // smaps_rollup is missing: unmanaged memory is not measured
	lastErr   string
	errors    uint64

	// What Start found, to restore it.
	startProcs   int
	startDefault bool // GOMAXPROCS was the runtime's own, following choice
	startMemLim  int64
	// What gofit changed.
	managed     bool // gofit set GOMAXPROCS and has not handed it back
	noHandBack  bool // a hand-back once gave another value than the plan's
	setMemLimit bool
	memLimit    int64 // what gofit set last
	setGOGC     bool
	origGOGC    int
	gogc        string

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// inputs are what a refresh reads; the plan is recomputed when they change.
type inputs struct {
	limits     cgroup.Limits
	cpus       int
	unmanaged  int64
	gomaxprocs int
	managed    bool
}

// disabled reads GOFIT: off, false, 0 or no (any case) turn gofit off; on,
// true, 1, yes or empty leave it on; anything else is an error, so that a
// typo is reported rather than guessed.
func disabled(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "0", "no":
		return true, nil
	case "", "on", "true", "1", "yes":
		return false, nil
	}
	return false, fmt.Errorf("GOFIT=%q: want on or off", v)
}

// New finds the process's cgroups without changing anything. It returns
// ErrDisabled when GOFIT is off, and an error wrapping cgroup.ErrNoCgroup
// outside a container.
func New(opts ...Option) (*Fitter, error) {
	cfg := config{
		refresh: DefaultRefresh, root: "/", rt: realRuntime, lookup: os.LookupEnv,
		cpus: affinity.CPUs, now: time.Now, goMemory: newGoMemory(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	if err := ValidRefresh(cfg.refresh); err != nil {
		return nil, fmt.Errorf("gofit: %w", err)
	}
	policy, err := fit.New(cfg.opts)
	if err != nil {
		return nil, fmt.Errorf("gofit: %w", err)
	}
	if v, ok := cfg.lookup("GOFIT"); ok {
		off, err := disabled(v)
		if err != nil {
			return nil, fmt.Errorf("gofit: %w", err)
		}
		if off {
			return nil, ErrDisabled
		}
	}
	cg, err := cgroup.NewFS(cfg.root).Self()
	if err != nil {
		return nil, fmt.Errorf("gofit: %w", err)
	}
	f := &Fitter{cfg: cfg, cg: cg, mem: procmem.NewReader(cfg.root), log: cfg.logger, policy: policy, vars: map[string]string{}}
	for _, k := range fit.VarNames {
		if v, ok := cfg.lookup(k); ok {
			f.vars[k] = v
		}
	}
	if cfg.self != nil {
		f.self = *cfg.self
	} else {
		f.self = target.Self()
	}
	return f, nil
}

// Start fits the process now and keeps it fitted until ctx ends or Stop is
// called. On error nothing was changed and nothing is left open.
func Start(ctx context.Context, opts ...Option) (*Fitter, error) {
	f, err := New(opts...)
	if err != nil {
		return nil, err
	}
	f.startProcs = f.cfg.rt.gomaxprocs(0)
	f.startMemLim = f.cfg.rt.setMemoryLimit(-1)
	if err := f.Refresh(); err != nil {
		f.close()
		return nil, err
	}
	f.run(ctx)
	return f, nil
}

func (f *Fitter) close() {
	f.cg.Close()
	f.mem.Close()
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

// Stop ends the refresh loop and restores the settings found at Start
// where gofit changed them.
func (f *Fitter) Stop() {
	f.stopOnce.Do(func() {
		if f.cancel != nil {
			f.cancel()
			<-f.done
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		rt := f.cfg.rt
		if f.managed {
			// The runtime's own, following choice is handed back, not
			// pinned at its old value; an explicit value is restored.
			if f.startDefault && rt.handBack != nil {
				rt.handBack()
			} else {
				rt.gomaxprocs(f.startProcs)
			}
			f.log.Info("gofit: GOMAXPROCS restored", "gomaxprocs", rt.gomaxprocs(0))
		}
		if f.setMemLimit {
			rt.setMemoryLimit(f.startMemLim)
		}
		if f.setGOGC {
			rt.setGCPercent(f.origGOGC)
		}
		f.managed, f.setMemLimit, f.setGOGC = false, false, false
		f.close()
	})
}

// Plan is the plan in force after the last refresh.
func (f *Fitter) Plan() fit.Plan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plan
}

// Input is what the last plan was computed from.
func (f *Fitter) Input() fit.Input {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.in
}

// Limits are the limits read at the last refresh.
func (f *Fitter) Limits() cgroup.Limits {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limits
}

// Unmanaged is the memory charged on the process's behalf outside the Go
// runtime, the largest measured over the last minute (0 when there is no
// memory limit or it cannot be measured).
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

// Refresh reads the limits, the affinity mask, the unmanaged memory and
// the runtime's GOMAXPROCS, and when any changed recomputes the plan and
// applies it. On a read error the current settings are kept and the error
// is logged once.
func (f *Fitter) Refresh() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.cg.Limits()
	var unmanaged int64
	if err == nil && l.Memory.Effective() > 0 {
		unmanaged, err = f.measureUnmanaged()
	}
	if err != nil {
		f.errors++
		if msg := err.Error(); msg != f.lastErr {
			f.lastErr = msg
			f.log.Warn("gofit: cannot read cgroup limits or memory use; keeping current settings", "err", err)
		}
		return err
	}
	if f.lastErr != "" {
		f.log.Info("gofit: cgroup limits and memory use readable again")
		f.lastErr = ""
	}
	rt := f.cfg.rt
	now := inputs{limits: l, cpus: f.cfg.cpus(), unmanaged: unmanaged, gomaxprocs: rt.gomaxprocs(0), managed: f.managed}
	if f.planned && now == f.last {
		return nil // steady state: nothing to compute or apply
	}
	in := fit.Input{
		Limits: l, CPUs: now.cpus, Vars: f.vars,
		GoVersion: f.self.GoVersion, DefaultGODEBUG: f.self.DefaultGODEBUG,
		Unmanaged: unmanaged,
		Running:   &fit.Running{GOMAXPROCS: now.gomaxprocs, Managed: f.managed, CanHandBack: rt.handBack != nil && !f.noHandBack},
	}
	p := f.policy.Plan(in)
	first := !f.planned
	if first {
		// Go's runtime ignores a GOMAXPROCS it cannot parse.
		n, err := strconv.ParseInt(f.vars["GOMAXPROCS"], 10, 32)
		procsSet := err == nil && n > 0
		f.startDefault = !procsSet && p.RuntimeFollowsCgroup && f.startProcs == p.RuntimeGOMAXPROCS
	}
	f.apply(p, unmanaged, first)
	f.in, f.plan, f.limits, f.planned = in, p, l, true
	now.gomaxprocs, now.managed = rt.gomaxprocs(0), f.managed
	f.last = now
	return nil
}

// unmanagedStep quantises the unmanaged estimate so that small wobbles do
// not recompute the plan on every refresh.
const unmanagedStep = 1 << 20

// measureUnmanaged estimates the memory charged on this process's behalf
// that GOMEMLIMIT does not bound and the kernel cannot simply reclaim:
// what the process has resident (anonymous memory and the file pages it
// maps, /proc/self/smaps_rollup Rss) plus the cgroup's kernel memory,
// less what the Go runtime has mapped and not released. Page cache the
// process only read through is reclaimable and not counted; another
// process in the same cgroup is not counted either. The estimate is the
// largest over the last minute, rounded up to 1 MiB.
func (f *Fitter) measureUnmanaged() (int64, error) {
	if f.noRollup {
		return 0, nil
	}
	u, err := f.mem.Read()
	if errors.Is(err, procmem.ErrUnsupported) {
		f.noRollup = true
		f.log.Info("gofit: unmanaged memory not measured; GOMEMLIMIT from the memory ratio alone", "err", err)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	m, err := f.cg.MemoryStats()
	if err != nil {
		return 0, err
	}
	x := max(u.Rss+int64(min(m.Kernel, 1<<62))-f.cfg.goMemory(), 0)
	x = f.unmanaged.add(f.cfg.now(), x)
	return (x + unmanagedStep - 1) / unmanagedStep * unmanagedStep, nil
}

// newGoMemory returns a reader of the memory the Go runtime has mapped and
// not released to the OS.
func newGoMemory() func() int64 {
	samples := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	return func() int64 {
		metrics.Read(samples)
		if samples[0].Value.Kind() != metrics.KindUint64 || samples[1].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(min(samples[0].Value.Uint64()-samples[1].Value.Uint64(), 1<<62))
	}
}

// window is the maximum of the samples of the last minute, kept as the
// largest sample of each of the last 60 seconds, with no allocation.
type window struct {
	sec  [60]int64 // the Unix second each slot holds
	val  [60]int64
	used [60]bool
}

func (w *window) add(now time.Time, x int64) int64 {
	s := now.Unix()
	i := (s%60 + 60) % 60
	if !w.used[i] || w.sec[i] != s {
		w.sec[i], w.val[i], w.used[i] = s, x, true
	} else {
		w.val[i] = max(w.val[i], x)
	}
	m := int64(0)
	for j := range w.val {
		if w.used[j] && w.sec[j] <= s && s-w.sec[j] < 60 {
			m = max(m, w.val[j])
		}
	}
	return m
}

func (f *Fitter) apply(p fit.Plan, unmanaged int64, first bool) {
	rt := f.cfg.rt
	for _, w := range p.Warnings {
		if first || !slices.Contains(f.plan.Warnings, w) {
			f.log.Warn("gofit: " + w)
		}
	}

	switch p.GOMAXPROCSAction {
	case fit.Set:
		prev := rt.gomaxprocs(p.GOMAXPROCS)
		f.managed = true
		f.log.Info("gofit: GOMAXPROCS set", "from", prev, "to", p.GOMAXPROCS, "reason", p.GOMAXPROCSReason)
	case fit.HandBack:
		rt.handBack()
		if got := rt.gomaxprocs(0); got != p.GOMAXPROCS {
			// The runtime chose otherwise than modelled (a setting gofit
			// cannot see): keep the plan's value and stop handing back.
			rt.gomaxprocs(p.GOMAXPROCS)
			f.managed, f.noHandBack = true, true
			f.log.Warn("gofit: the Go runtime chose another GOMAXPROCS when handed back; gofit keeps setting it", "runtime", got, "gomaxprocs", p.GOMAXPROCS)
			break
		}
		f.managed = false
		f.log.Info("gofit: GOMAXPROCS handed back to the Go runtime", "gomaxprocs", p.GOMAXPROCS)
	}

	if !p.GOMEMLIMITFromEnv {
		want := p.GOMEMLIMIT
		switch {
		case want > 0 && want != f.memLimit:
			rt.setMemoryLimit(want)
			f.setMemLimit, f.memLimit = true, want
			f.log.Info("gofit: memory limit set", "gomemlimit", want, "unmanaged", unmanaged, "reason", p.GOMEMLIMITReason)
		case want == 0 && f.setMemLimit:
			rt.setMemoryLimit(f.startMemLim)
			f.setMemLimit, f.memLimit = false, 0
			f.log.Info("gofit: memory limit restored", "reason", p.GOMEMLIMITReason)
		}
	}

	// GOGC, only in the opt-in mode and never over an explicit GOGC. The
	// policy validated the value.
	if p.GOGC != f.gogc {
		switch {
		case p.GOGC != "":
			pct := -1
			if p.GOGC != "off" {
				pct, _ = strconv.Atoi(p.GOGC)
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

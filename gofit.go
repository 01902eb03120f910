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
	"strings"
	"sync"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/affinity"
	"github.com/gofit-dev/gofit/internal/procmem"
	"github.com/gofit-dev/gofit/target"
)

// MemoryWatch is how often the memory limit alone is re-read between
// refreshes: when it drops (an in-place resize lowering memory.max), the
// refresh runs at once, so GOMEMLIMIT follows before a heap that grows
// toward the old limit's goal meets the new one. Measured on a real
// cgroup (docs/results/shrink.md), a 1 s refresh let 8 of 20 such
// decreases end in an OOM kill; reading the limit costs a few µs.
const MemoryWatch = 50 * time.Millisecond

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

// Fitter keeps one process fitted to its cgroup: each refresh reads the
// limits and the non-Go memory (nonGoMeter), plans, and applies the plan
// to the runtime through the ledger, which Stop undoes.
type Fitter struct {
	cfg    config
	cg     *cgroup.Cgroups
	log    *slog.Logger
	policy fit.Policy
	vars   map[string]string // the Go runtime's variables, read once: they were read at start-up
	self   target.Binary

	mu      sync.Mutex
	in      fit.Input
	plan    fit.Plan
	limits  cgroup.Limits
	last    inputs
	planned bool
	nonGo   nonGoMeter
	ledger  ledger
	lastErr string
	errors  uint64

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
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
		refresh: DefaultRefresh, root: "/", rt: realRuntime, lookup: os.LookupEnv, watch: realTicker,
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
	f := &Fitter{
		cfg: cfg, cg: cg, log: cfg.logger, policy: policy, vars: map[string]string{},
		nonGo:  nonGoMeter{mem: procmem.NewReader(cfg.root), now: cfg.now, goMemory: cfg.goMemory, log: cfg.logger},
		ledger: ledger{rt: cfg.rt, log: cfg.logger},
	}
	for _, k := range fit.VarNames() {
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
	f.ledger.start()
	if err := f.Refresh(); err != nil {
		f.close()
		return nil, err
	}
	f.run(ctx)
	return f, nil
}

func (f *Fitter) close() {
	f.cg.Close()
	f.nonGo.close()
}

func (f *Fitter) run(ctx context.Context) {
	ctx, f.cancel = context.WithCancel(ctx)
	f.done = make(chan struct{})
	newTicker := f.cfg.ticker
	if newTicker == nil {
		newTicker = realTicker
	}
	tick, stopTick := newTicker(f.cfg.refresh)
	var watch <-chan time.Time
	stopWatch := func() {}
	if f.cfg.watch != nil {
		watch, stopWatch = f.cfg.watch(MemoryWatch)
	}
	go func() {
		defer close(f.done)
		defer stopTick()
		defer stopWatch()
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
			case <-watch:
				f.watchMemory()
			}
		}
	}()
}

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Stop ends the refresh loop and restores the settings found at Start
// where gofit changed them (ledger.restore).
func (f *Fitter) Stop() {
	f.stopOnce.Do(func() {
		if f.cancel != nil {
			f.cancel()
			<-f.done
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.ledger.restore()
		f.close()
	})
}

// locked reads *p under mu: the getters below read what a refresh writes.
func locked[T any](mu *sync.Mutex, p *T) T {
	mu.Lock()
	defer mu.Unlock()
	return *p
}

// Plan is the plan in force after the last refresh.
func (f *Fitter) Plan() fit.Plan { return locked(&f.mu, &f.plan) }

// Input is what the last plan was computed from.
func (f *Fitter) Input() fit.Input { return locked(&f.mu, &f.in) }

// Limits are the limits read at the last refresh.
func (f *Fitter) Limits() cgroup.Limits { return locked(&f.mu, &f.limits) }

// NonGo is the memory charged on the process's behalf outside the Go
// runtime that the plan budgets, in its parts (zero when there is no
// memory limit or it cannot be measured).
func (f *Fitter) NonGo() fit.NonGo { return locked(&f.mu, &f.in.NonGo) }

// FileBudget is the state of the feedback step that budgets the hot part
// of the mapped file pages.
func (f *Fitter) FileBudget() fit.FileBudget { return locked(&f.mu, &f.nonGo.file) }

// Errors counts refreshes that failed to read the cgroup.
func (f *Fitter) Errors() uint64 { return locked(&f.mu, &f.errors) }

// Cgroups gives access to the process's cgroups, for stats.
func (f *Fitter) Cgroups() *cgroup.Cgroups { return f.cg }

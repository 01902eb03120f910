package gofit

import (
	"slices"
	"strconv"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

// inputs are what a refresh reads; the plan is recomputed when they change.
type inputs struct {
	limits     cgroup.Limits
	cpus       int
	nonGo      fit.NonGo
	gomaxprocs int
	managed    bool
}

// watchMemory re-reads the memory limit and refreshes at once when it fell
// below the one the plan was made for.
func (f *Fitter) watchMemory() {
	f.mu.Lock()
	m, err := f.cg.MemoryLimits()
	was, planned := f.limits.Memory.Effective(), f.planned
	f.mu.Unlock()
	if err != nil || !planned {
		return // the next refresh reads, and reports, it all
	}
	if now := m.Effective(); now > 0 && (was == 0 || now < was) {
		_ = f.Refresh()
	}
}

// Refresh reads the limits, the affinity mask, the non-Go memory and
// the runtime's GOMAXPROCS, and when any changed recomputes the plan and
// applies it. On a read error the current settings are kept and the error
// is logged once.
func (f *Fitter) Refresh() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := f.cg.Limits()
	var nonGo fit.NonGo
	if err == nil && l.Memory.Effective() > 0 {
		nonGo, err = f.nonGo.measure(f.cg)
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
	led := &f.ledger
	now := inputs{limits: l, cpus: f.cfg.cpus(), nonGo: nonGo, gomaxprocs: rt.gomaxprocs(0), managed: led.managed}
	if f.planned && now == f.last {
		return nil // steady state: nothing to compute or apply
	}
	in := f.self.Input(l, now.cpus, f.vars, nonGo)
	in.Running = &fit.Running{GOMAXPROCS: now.gomaxprocs, Managed: led.managed, CanHandBack: rt.handBack != nil && !led.noHandBack}
	p := f.policy.Plan(in)
	first := !f.planned
	if first {
		// Go's runtime ignores a GOMAXPROCS it cannot parse.
		n, err := strconv.ParseInt(f.vars["GOMAXPROCS"], 10, 32)
		procsSet := err == nil && n > 0
		led.startDefault = !procsSet && p.RuntimeFollowsCgroup && led.startProcs == p.RuntimeGOMAXPROCS
	}
	f.apply(p, nonGo, first)
	f.in, f.plan, f.limits, f.planned = in, p, l, true
	now.gomaxprocs, now.managed = rt.gomaxprocs(0), led.managed
	f.last = now
	return nil
}

// apply logs the plan's new warnings and applies it to the runtime.
func (f *Fitter) apply(p fit.Plan, nonGo fit.NonGo, first bool) {
	for _, w := range p.Warnings {
		if first || !slices.Contains(f.plan.Warnings, w) {
			f.log.Warn("gofit: "+w.Text, "code", w.Code)
		}
	}
	f.ledger.apply(p, nonGo)
}

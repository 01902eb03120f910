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
		nonGo, err = f.measureNonGo()
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
	now := inputs{limits: l, cpus: f.cfg.cpus(), nonGo: nonGo, gomaxprocs: rt.gomaxprocs(0), managed: f.managed}
	if f.planned && now == f.last {
		return nil // steady state: nothing to compute or apply
	}
	in := fit.Input{
		Limits: l, CPUs: now.cpus, CPURequest: l.CPU.RequestCores(), Vars: f.vars,
		GoVersion: f.self.GoVersion, DefaultGODEBUG: f.self.DefaultGODEBUG,
		NonGo:   nonGo,
		Running: &fit.Running{GOMAXPROCS: now.gomaxprocs, Managed: f.managed, CanHandBack: rt.handBack != nil && !f.noHandBack},
	}
	p := f.policy.Plan(in)
	first := !f.planned
	if first {
		// Go's runtime ignores a GOMAXPROCS it cannot parse.
		n, err := strconv.ParseInt(f.vars["GOMAXPROCS"], 10, 32)
		procsSet := err == nil && n > 0
		f.startDefault = !procsSet && p.RuntimeFollowsCgroup && f.startProcs == p.RuntimeGOMAXPROCS
	}
	f.apply(p, nonGo, first)
	f.in, f.plan, f.limits, f.planned = in, p, l, true
	now.gomaxprocs, now.managed = rt.gomaxprocs(0), f.managed
	f.last = now
	return nil
}

func (f *Fitter) apply(p fit.Plan, nonGo fit.NonGo, first bool) {
	rt := f.cfg.rt
	for _, w := range p.Warnings {
		if first || !slices.Contains(f.plan.Warnings, w) {
			f.log.Warn("gofit: "+w.Text, "code", w.Code)
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
			f.log.Info("gofit: memory limit set", "gomemlimit", want, "non_go", nonGo.Total(), "reason", p.GOMEMLIMITReason)
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

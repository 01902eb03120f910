package gofit

import (
	"log/slog"
	"strconv"

	"github.com/gofit-dev/gofit/fit"
)

// ledger is the undo record of what gofit changed in the Go runtime: what
// it found at Start, what it set since, and how to put it back. apply
// changes the runtime to a plan and records each change; restore undoes
// them. A Fitter holds one and uses it under its lock.
type ledger struct {
	rt  runtimeAPI
	log *slog.Logger

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
}

// start records the runtime's settings before gofit changes any.
func (l *ledger) start() {
	l.startProcs = l.rt.gomaxprocs(0)
	l.startMemLim = l.rt.setMemoryLimit(-1)
}

// apply changes the runtime to p where p says so, and records it.
func (l *ledger) apply(p fit.Plan, nonGo fit.NonGo) {
	rt := l.rt
	switch p.GOMAXPROCSAction {
	case fit.Set:
		prev := rt.gomaxprocs(p.GOMAXPROCS)
		l.managed = true
		l.log.Info("gofit: GOMAXPROCS set", "from", prev, "to", p.GOMAXPROCS, "reason", p.GOMAXPROCSReason)
	case fit.HandBack:
		rt.handBack()
		if got := rt.gomaxprocs(0); got != p.GOMAXPROCS {
			// The runtime chose otherwise than modelled (a setting gofit
			// cannot see): keep the plan's value and stop handing back.
			rt.gomaxprocs(p.GOMAXPROCS)
			l.managed, l.noHandBack = true, true
			l.log.Warn("gofit: the Go runtime chose another GOMAXPROCS when handed back; gofit keeps setting it", "runtime", got, "gomaxprocs", p.GOMAXPROCS)
			break
		}
		l.managed = false
		l.log.Info("gofit: GOMAXPROCS handed back to the Go runtime", "gomaxprocs", p.GOMAXPROCS)
	}

	if !p.GOMEMLIMITFromEnv {
		want := p.GOMEMLIMIT
		switch {
		case want > 0 && want != l.memLimit:
			rt.setMemoryLimit(want)
			l.setMemLimit, l.memLimit = true, want
			l.log.Info("gofit: memory limit set", "gomemlimit", want, "non_go", nonGo.Total(), "reason", p.GOMEMLIMITReason)
		case want == 0 && l.setMemLimit:
			rt.setMemoryLimit(l.startMemLim)
			l.setMemLimit, l.memLimit = false, 0
			l.log.Info("gofit: memory limit restored", "reason", p.GOMEMLIMITReason)
		}
	}

	// GOGC, only in the opt-in mode and never over an explicit GOGC. The
	// policy validated the value.
	if p.GOGC != l.gogc {
		switch {
		case p.GOGC != "":
			pct := -1
			if p.GOGC != "off" {
				pct, _ = strconv.Atoi(p.GOGC)
			}
			prev := rt.setGCPercent(pct)
			if !l.setGOGC {
				l.setGOGC, l.origGOGC = true, prev
			}
			l.log.Info("gofit: GOGC set", "gogc", p.GOGC)
		case l.setGOGC:
			rt.setGCPercent(l.origGOGC)
			l.setGOGC = false
		}
		l.gogc = p.GOGC
	}
}

// restore puts back what gofit changed: the runtime's own, following
// GOMAXPROCS is handed back rather than pinned at its old value; an
// explicit value, the memory limit and GOGC are restored.
func (l *ledger) restore() {
	rt := l.rt
	if l.managed {
		if l.startDefault && rt.handBack != nil {
			rt.handBack()
		} else {
			rt.gomaxprocs(l.startProcs)
		}
		l.log.Info("gofit: GOMAXPROCS restored", "gomaxprocs", rt.gomaxprocs(0))
	}
	if l.setMemLimit {
		rt.setMemoryLimit(l.startMemLim)
	}
	if l.setGOGC {
		rt.setGCPercent(l.origGOGC)
	}
	l.managed, l.setMemLimit, l.setGOGC = false, false, false
}

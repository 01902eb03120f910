package trial

import (
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// Window is what a CPU trial's window measured, whichever runner ran it:
// the load's result, the target cgroup's counters' deltas over the
// window, the window's length, and the target's /debug/vars at its edges
// (nil when it has none).
type Window struct {
	Load             load.Result
	Periods          uint64
	ThrottledPeriods uint64
	ThrottledSec     float64
	UsedSec          float64
	WindowSec        float64
	V0, V1           *sandbox.RuntimeVars
	Exited, Isolated bool
}

// Cell is one CPU cell from a window: the one place its figures are
// derived, for every runner.
func Cell(c CPUConfig, mode result.Mode, offered float64, rep, procs int, w Window) result.CPUCell {
	res := w.Load
	cell := result.CPUCell{QuotaCores: c.Quota, RequestCores: c.Request, Setting: c.Setting, SameAs: c.SameAs, Repeat: rep, GOMAXPROCS: procs, GOMAXPROCSFrom: c.From, Mode: mode,
		Isolated: w.Isolated, RPS: res.RPS, P50: res.P50, P90: res.P90, P99: res.P99, P999: res.P999,
		Requests: res.Requests, Errors: res.Errors, Cancelled: res.Cancelled, ErrorKinds: res.ErrorKinds, Seconds: res.Seconds, GeneratorCPUSec: res.GenCPUSec,
		TargetExited: w.Exited, Blocks: res.Blocks, Targets: res.Targets,
		Periods: w.Periods, ThrottledPeriods: w.ThrottledPeriods, ThrottledSeconds: w.ThrottledSec,
		CPUSeconds: w.UsedSec, CPUWindowSeconds: w.WindowSec, CPUEfficiency: efficiency(w.UsedSec, w.WindowSec, c.Quota)}
	if mode == result.Open {
		cell.OfferedRPS = offered
	}
	if res.Requests > 0 {
		cell.CPUMsPerRequest = w.UsedSec * 1000 / float64(res.Requests)
	}
	if w.V0 != nil && w.V1 != nil {
		cell.GCCPUShare = gcShare(*w.V0, *w.V1)
	}
	return cell
}

// efficiency is the share of the quota the cgroup used over the window.
func efficiency(used, window, quota float64) float64 {
	if window <= 0 || quota <= 0 {
		return 0
	}
	return used / (window * quota)
}

// gcShare is the GC's share of the time the target's Ps were busy. The
// runtime counts its CPU classes as GOMAXPROCS × wall time, idle Ps
// included, so a share of that total shrinks as GOMAXPROCS grows at the
// same work; without the idle time, every setting is measured alike.
func gcShare(a, b sandbox.RuntimeVars) *float64 {
	busy := (b.TotalCPUSeconds - a.TotalCPUSeconds) - (b.IdleCPUSeconds - a.IdleCPUSeconds)
	gc := b.GCCPUSeconds - a.GCCPUSeconds
	if busy <= 0 || gc < 0 || b.IdleCPUSeconds == 0 {
		return nil // a target without the idle class (not the sample) cannot say
	}
	s := gc / busy
	return &s
}

// startSlowdown is how many times longer than its slowest start without
// a memory limit a target may take to become ready under one: a start
// that slow is thrashing. On cdac879 caddy and node_exporter spent 12 to
// 30 s of each survival trial at half their peak waiting for readiness
// that did not come, a tenth of a four-minute study.
const startSlowdown = 4

// minStartWait is the least a start under a memory limit is given.
const minStartWait = 5 * time.Second

// StartWait is how long tgt may take to become ready at limit: the
// target's own readiness timeout without a limit or before any start
// without one was timed (slowest 0); under a limit, startSlowdown × the
// slowest start without one (at least minStartWait), if that is shorter.
func StartWait(tgt sandbox.Target, limit int64, slowest time.Duration) time.Duration {
	wait := tgt.ReadyTimeout
	if wait <= 0 {
		wait = sandbox.DefaultReadyTimeout
	}
	if limit == 0 || slowest == 0 {
		return wait
	}
	return min(wait, max(startSlowdown*slowest, minStartWait))
}

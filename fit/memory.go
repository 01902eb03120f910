package fit

import (
	"fmt"

	"github.com/gofit-dev/gofit/cgroup"
)

// Memory headroom beyond the ratio, when non-Go memory is known: a margin
// of 1/32 of the limit, at least 1 MiB, for growth between refreshes.
const (
	minMargin = 1 << 20
	// The heap gets at least this share of the limit, however much else the
	// cgroup holds; below it gofit warns that the container is too small.
	minHeapShare = 0.25
	// MinMemoryLimit is the smallest memory limit gofit plans a GOMEMLIMIT
	// for: below it a Go program cannot run (its runtime alone needs more),
	// and a quarter of it would be a meaningless GOMEMLIMIT.
	MinMemoryLimit = 4 << 20
)

// planMemory plans GOMEMLIMIT = min(ratio × limit, limit − non-Go − margin),
// never below a quarter of the limit. It is never above what the ratio
// alone gives, so it cannot let the heap grow into an OOM kill the ratio
// would have avoided; it is lower only by memory measured or budgeted
// outside the heap.
func planMemory(p *Plan, mem cgroup.MemoryLimits, nonGo NonGo, vars vars, opt Options) {
	const name = "GOMEMLIMIT"
	eff := mem.Effective()
	if v := vars.memlimit; v.set && !v.gofits {
		if !v.valid {
			p.warn(WarnGOMEMLIMITInvalid, "GOMEMLIMIT=%q is not a byte count (want e.g. 900MiB, 1GiB, 943718400 or off): Go's runtime refuses to start with it", v.raw)
		} else {
			p.GOMEMLIMIT, p.GOMEMLIMITFromEnv, p.GOMEMLIMITReason = v.n, true, ReasonEnv
			if v.n == 0 {
				p.reason(name, ReasonEnv, "GOMEMLIMIT=off: set in the environment, which wins")
			} else {
				p.reason(name, ReasonEnv, "GOMEMLIMIT=%s: set in the environment, which wins", FormatBytes(v.n))
			}
			if eff > 0 && (v.n == 0 || v.n >= eff) {
				p.warn(WarnGOMEMLIMITAtLimit, "GOMEMLIMIT=%s from the environment is at or above the memory limit of %s: the heap will not shrink before the cgroup reclaims the binary's own pages or kills the process",
					v.raw, FormatBytes(eff))
			}
			return
		}
	}
	if eff == 0 {
		p.GOMEMLIMITReason = ReasonNoLimit
		p.reason(name, ReasonNoLimit, "GOMEMLIMIT unset: no memory limit")
		return
	}
	src, kind := mem.MaxGroup, "memory limit"
	if mem.Version == 2 {
		kind = "memory.max"
	}
	if mem.High > 0 && (mem.Max == 0 || mem.High < mem.Max) {
		src, kind = mem.HighGroup, "memory.high"
	}
	if eff < MinMemoryLimit {
		p.GOMEMLIMITReason = ReasonTooSmall
		p.warn(WarnLimitTooSmall, "the memory limit %s is too small to run a Go program", FormatBytes(eff))
		p.reason(name, ReasonTooSmall, "GOMEMLIMIT unset: the %s %s on %s is below the %s gofit needs to plan one", kind, FormatBytes(eff), src, FormatBytes(MinMemoryLimit))
		return
	}
	limit := int64(float64(eff) * opt.MemoryRatio)
	p.GOMEMLIMITReason = ReasonRatio
	why := fmt.Sprintf("%.0f%% of the %s %s on %s", opt.MemoryRatio*100, kind, FormatBytes(eff), src)
	if total := nonGo.Total(); total > 0 {
		margin := max(int64(minMargin), eff/32)
		if m := eff - min(total, eff) - margin; m < limit {
			limit, p.GOMEMLIMITReason = m, ReasonUnmanaged
			why = fmt.Sprintf("the %s %s on %s, less %s the Go runtime does not manage (%s) and a %s margin",
				kind, FormatBytes(eff), src, FormatBytes(total), nonGo, FormatBytes(margin))
		}
	}
	if floor := int64(float64(eff) * minHeapShare); limit < floor {
		p.warn(WarnHeapSqueezed, "the memory limit %s leaves little for the Go heap: %s is charged outside it (%s); raise the limit", FormatBytes(eff), FormatBytes(nonGo.Total()), nonGo)
		limit, p.GOMEMLIMITReason = floor, ReasonHeapFloor
		why = fmt.Sprintf("%.0f%% of the %s %s, the least gofit gives the heap", minHeapShare*100, kind, FormatBytes(eff))
	}
	// The ratio is below 1 and the floor a quarter, so limit is in
	// [eff/4, eff) already; the clamp keeps that promise explicit.
	p.GOMEMLIMIT = min(limit, eff-1)
	p.reason(name, p.GOMEMLIMITReason, "GOMEMLIMIT=%s: %s", FormatBytes(p.GOMEMLIMIT), why)
}

func planGOGC(p *Plan, vars vars, opt Options) {
	g := vars.gogc
	switch {
	case g.set && !g.gofits:
		if g.raw == "off" && p.GOMEMLIMIT == 0 {
			p.warn(WarnGOGCOffWithoutMemLimit, "GOGC=off without GOMEMLIMIT: the heap grows until the process is killed")
		}
	case opt.GOGC != "" && p.GOMEMLIMIT > 0:
		p.GOGC = opt.GOGC
		p.reason("GOGC", ReasonOptIn, "GOGC=%s: collect less often and let GOMEMLIMIT bound the heap (use the memory you pay for)", opt.GOGC)
	case opt.GOGC != "":
		p.reason("GOGC", ReasonNoLimit, "GOGC left alone: GOGC=%s needs a GOMEMLIMIT and there is none", opt.GOGC)
	}
}

package lab

import (
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
)

// memBudget is the memory study's side of the budget: its minimum, kept
// back from the CPU study from the start (reserve), the probes' time cap,
// the survival trials' size, and the note that the minimum no longer
// fits.
type memBudget struct {
	cfg     *Config              // the study's configuration, read only
	elapsed func() time.Duration // the study's wall time so far
	costs   *trialCosts
	notes   *budgetNotes
	// plan is the survival trials' plan, sized once the probes ran.
	plan memPlan
	// overrunSaid is set once the memory study's minimum was said not
	// to fit in what the budget has left.
	overrunSaid bool
}

// memMinSurvival is how many limited survival trials of its first
// setting the memory study is never without: the bracket's top (a limit
// that survives), its bottom and a bisection between them, and one more
// at the edge. Fewer bound no floor on both sides; the planner keeps
// their time back from the start (memBudget.reserve).
const memMinSurvival = 4

// defaultCheckReserve is the time kept back for the check trial until
// the health trials have measured what a pair costs.
const defaultCheckReserve = 20 * time.Second

// minMemRequests is the fewest requests a survival trial sends.
const minMemRequests = 50

// reserve is the memory study's minimum, kept back from the CPU
// study: the unlimited probes, memMinSurvival limited trials of the first
// setting, and the check trial.
func (m *memBudget) reserve() time.Duration {
	if len(m.cfg.MemSettings) == 0 {
		return 0
	}
	return time.Duration(m.cfg.Probes+memMinSurvival)*m.costs.memTrialCost() + m.checkReserve()
}

// checkReserve is the time kept back from the budget for the check trial:
// the pairs it needs before its interval may decide, at what pairs have
// cost so far (a slow target's start-up makes them dearer).
func (m *memBudget) checkReserve() time.Duration {
	return max(defaultCheckReserve, time.Duration(m.cfg.HealthPairs)*m.costs.pairCost())
}

// probeCap is the time cap of one unlimited memory probe: a slow target
// must not spend the memory study on its probes.
func (m *memBudget) probeCap() time.Duration {
	left := m.cfg.Budget - m.elapsed() - m.checkReserve()
	return max(left/time.Duration(5*max(m.cfg.Probes, 1)), 5*time.Second)
}

// sayOverrun notes, once, that what is left of the memory study's
// minimum (the probes and the first setting's memMinSurvival limited
// trials not yet run, and one pair of the check) no longer fits in what
// the budget has left at what trials cost now, and by how much the study
// will outrun it: the minimum runs all the same (no memory figure rests
// on fewer limited trials), and the note names the --budget that would
// have held it. The memory study asks before its first trial and after
// each.
func (m *memBudget) sayOverrun() {
	if m.overrunSaid || len(m.cfg.MemSettings) == 0 {
		return
	}
	c := m.costs
	trials := max(m.cfg.Probes+memMinSurvival-c.memN, 0)
	need, left := time.Duration(trials)*c.memTrialCost()+c.pairCost(), m.cfg.Budget-m.elapsed()
	if need <= left {
		return
	}
	m.overrunSaid = true
	m.notes.add("trials now cost about %v each: what is left of the memory study's minimum (%d trials of its probes and first %d limited survival trials, and one pair of the check) needs %v, and the budget has %v left; it runs all the same, and the study will end about %v past its budget (--budget %v would hold it)",
		c.memTrialCost().Round(time.Second), trials, memMinSurvival, need.Round(time.Second), max(left, 0).Round(time.Second),
		(need - max(left, 0)).Round(time.Second), (m.elapsed() + need + time.Minute - 1).Truncate(time.Minute))
}

// memPlan is the memory study's plan for its closed-loop (survival)
// trials: requests per trial and a time cap per trial.
type memPlan struct {
	requests int
	maxTrial time.Duration
}

// memTrialsPlanned is how many closed-loop trials the memory study
// expects per setting: about six to bracket and bisect, and at most
// ConfirmOf runs on each of the ConfirmSpan steps that confirm the edge.
func memTrialsPlanned(cfg Config) int {
	if cfg.ConfirmOf <= 1 {
		return 6
	}
	return 6 + cfg.ConfirmOf*max(cfg.ConfirmSpan, 1)
}

// survivalTrialsMax bounds one survival search: what is planned, and as
// many again for an edge that does not hold and the climb past it.
func survivalTrialsMax(cfg Config) int {
	return max(16, 2*memTrialsPlanned(cfg))
}

// planSurvival sizes the survival trials to the time left (and keeps the
// plan for survivalLoad), from the probes'
// throughput: the same request count for every trial, so their peaks
// compare, and no more than a third of each setting's share (the healthy
// search gets the rest, memory.go) per planned trial allows.
func (m *memBudget) planSurvival(probeRPS, probeSeconds float64) memPlan {
	p := memPlan{requests: m.cfg.MemRequests}
	if probeRPS <= 0 {
		m.plan = p
		return p
	}
	left := max(m.cfg.Budget-m.elapsed()-m.checkReserve(), 0)
	trials := len(m.cfg.MemSettings) * memTrialsPlanned(*m.cfg)
	per := left / 3 / time.Duration(max(trials, 1))
	// A trial's start-up and stop cost what the probes' did beyond their
	// load.
	overhead := time.Duration(max(probeSeconds-float64(m.cfg.MemRequests)/probeRPS, 0.5) * float64(time.Second))
	if n := int(probeRPS * (per - overhead).Seconds()); n < p.requests {
		p.requests = max(n, minMemRequests)
		m.notes.add("survival trials of %d requests instead of %d: at %.0f rps, %d trials in a third of the %v left need it; peaks and floors rest on a shorter load",
			p.requests, m.cfg.MemRequests, probeRPS, trials, left.Round(time.Second))
	}
	// A trial that takes four times its plan is cut there: a target that
	// slow at this limit is not healthy.
	p.maxTrial = max(4*time.Duration(float64(p.requests)/probeRPS*float64(time.Second)), 5*time.Second)
	m.plan = p
	return p
}

// survivalLoad is the survival trials' load.
func (m *memBudget) survivalLoad(probeRPS float64) trial.MemLoad {
	return trial.MemLoad{Requests: m.plan.requests, MaxDur: m.plan.maxTrial, ProbeRPS: probeRPS}
}

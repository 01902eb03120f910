package lab

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/fit"
)

// memHeadroom above the healthy floor for the recommended memory limit:
// floors move with traffic mix and Go versions.
const memHeadroom = 1.25

type cpuChoice struct {
	cores   float64
	setting string
	sum     *result.CPUSummary
}

// openCells are the open-loop summaries at q that a recommendation may
// rest on: no errors, not saturated.
func (l *analysis) openAt(q float64) []result.CPUSummary {
	var out []result.CPUSummary
	for _, s := range l.res.CPUSummary {
		if s.Mode == result.Open && s.QuotaCores == q {
			out = append(out, s)
		}
	}
	return out
}

func usable(s result.CPUSummary) bool {
	return !s.Failed && !s.Saturated && (s.OfferedRPS == 0 || s.RPS.Value >= 0.95*s.OfferedRPS)
}

// quotas are the CPU limits studied, ascending; the request row (no
// limit) is not one: nothing is recommended from it.
func (l *analysis) quotas() []float64 {
	seen := map[float64]bool{}
	var qs []float64
	for _, s := range l.res.CPUSummary {
		if s.QuotaCores > 0 && !seen[s.QuotaCores] {
			seen[s.QuotaCores] = true
			qs = append(qs, s.QuotaCores)
		}
	}
	sort.Float64s(qs)
	return qs
}

// recommendCPU picks the quota and setting, appending its reasons to rec.
func (l *analysis) recommendCPU(rec *result.Recommendation) cpuChoice {
	if l.cfg.TargetRPS > 0 {
		return l.recommendForTarget(rec)
	}
	// The smallest quota whose open-loop p99 under gofit's plan is not
	// significantly more than twice the best such p99 at any quota: its
	// interval's low end is at most twice the best one's high end.
	var best *result.CPUSummary
	cands := map[float64]result.CPUSummary{}
	for _, q := range l.quotas() {
		for _, s := range l.openAt(q) {
			if s.Is(result.SetGofit) && usable(s) {
				cands[q] = s
				if best == nil || s.P99.Value < best.P99.Value {
					b := s
					best = &b
				}
			}
		}
	}
	if best == nil {
		rec.Reasons = append(rec.Reasons, "CPU: no quota has an error-free, unsaturated open-loop cell for gofit's plan; no CPU recommendation")
		return cpuChoice{}
	}
	for _, q := range l.quotas() {
		s, ok := cands[q]
		if !ok || s.P99.CILow > 2*best.P99.CIHigh {
			continue
		}
		c := cpuChoice{cores: q, setting: result.SetGofit, sum: &s}
		// gofit's plan unless go-default is significantly better here.
		if s.Verdict != nil && *s.Verdict == stats.Worse {
			for _, o := range l.openAt(q) {
				if o.Setting == result.SetGoDefault && usable(o) {
					c.setting = result.SetGoDefault
					c.sum = &o
				}
			}
		}
		rec.Confident = s.P99.CIHigh <= 2*best.P99.CIHigh
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("CPU %s: the smallest quota whose open-loop p99 with gofit's plan, %s at %.0f rps offered, is not significantly over twice the best at any quota (%s at %s)",
			result.Millicores(q), msCI(s.P99), s.OfferedRPS, msCI(best.P99), result.Millicores(best.QuotaCores)))
		if c.setting != result.SetGofit {
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("setting go-default: at %s gofit's plan is significantly worse than Go's default", result.Millicores(q)))
		}
		return c
	}
	return cpuChoice{}
}

// recommendForTarget picks the cheapest quota × setting whose open-loop
// p99 at the target rate meets the SLO (or, without one, stays within
// twice the best p99 seen at that rate).
func (l *analysis) recommendForTarget(rec *result.Recommendation) cpuChoice {
	rec.TargetRPS = l.cfg.TargetRPS
	slo := l.cfg.SLOP99.Seconds() * 1000
	rule := fmt.Sprintf("p99 ≤ %.1fms (--slo-p99)", slo)
	if slo <= 0 {
		best := math.Inf(1)
		for _, s := range l.res.CPUSummary {
			if s.Mode == result.Open && usable(s) {
				best = math.Min(best, s.P99.Value)
			}
		}
		slo = 2 * best
		rule = fmt.Sprintf("p99 ≤ %.1fms, twice the best p99 at this rate (no --slo-p99)", slo)
	} else {
		rec.SLOP99Ms = slo
	}
	for _, q := range l.quotas() {
		var meet []result.CPUSummary
		for _, s := range l.openAt(q) {
			if usable(s) && s.P99.Value <= slo {
				meet = append(meet, s)
			}
		}
		if len(meet) == 0 {
			continue
		}
		sort.SliceStable(meet, func(i, j int) bool {
			gi, gj := meet[i].Is(result.SetGofit), meet[j].Is(result.SetGofit)
			if gi != gj {
				return gi
			}
			return meet[i].P99.Value < meet[j].P99.Value
		})
		s := meet[0]
		setting := s.Setting
		if s.Is(result.SetGofit) {
			setting = result.SetGofit
		}
		rec.Confident = s.P99.CIHigh <= slo
		conf := "its whole 95% interval meets it"
		if !rec.Confident {
			conf = "NOT confidently: the interval's high end does not"
		}
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("CPU %s with %s: the cheapest quota × setting serving %.0f rps (served %s) with %s: p99 %s, %s",
			result.Millicores(q), setting, l.cfg.TargetRPS, rpsCI(s.RPS), rule, msCI(s.P99), conf))
		return cpuChoice{cores: q, setting: setting, sum: &s}
	}
	rec.Reasons = append(rec.Reasons, fmt.Sprintf("CPU: no quota tested serves %.0f rps with %s; try larger --quotas", l.cfg.TargetRPS, rule))
	return cpuChoice{}
}

func (l *analysis) recommend() result.Recommendation {
	rec := result.Recommendation{Env: map[string]string{}, Reasons: []string{}}
	cpu := l.recommendCPU(&rec)
	rec.CPURequestCores, rec.CPULimitCores, rec.Setting = cpu.cores, cpu.cores, cpu.setting
	rec.Reasons = append(rec.Reasons, l.cpuVerdicts()...)
	mem := l.recommendMemory(&rec)
	floor := mem.floor
	if cpu.cores > 0 || floor > 0 {
		env, plan := planEnv(l.cfg, l.rec, rec.CPULimitCores, rec.MemoryLimitBytes)
		delete(env, "GODEBUG") // the sample's lab setting, not advice
		switch rec.Setting {
		case result.SetGoDefault:
			delete(env, "GOMAXPROCS")
		case result.SetProcs1:
			env["GOMAXPROCS"] = "1"
		case result.SetProcsNCPU:
			env["GOMAXPROCS"] = strconv.Itoa(l.ncpu)
		}
		if mem.setting == result.SetAutoMemLimit {
			// The ratio needed less memory than gofit's accounting: its
			// rule, not gofit's GOMEMLIMIT, goes with the limit.
			env["GOMEMLIMIT"] = strconv.FormatInt(int64(float64(rec.MemoryLimitBytes)*automemlimitRatio), 10)
		}
		// The marker names the values that are gofit's plan, as gofit run
		// and the webhook export it: a target importing gofit's library
		// then refines them in-process (it measures the memory outside its
		// heap) instead of keeping them as the user's. Without it, a static
		// GOMEMLIMIT blind to an off-heap cache OOM-killed the check trial
		// of examples/offheap -live-mib 64 (docs/results/memory.md).
		if m := markerOf(env, plan.Export); m != "" {
			env[fit.MarkerVar] = m
		}
		if n := l.rec.Target.NonGoBytes; mem.setting != result.SetAutoMemLimit && n > 0 {
			declareNonGo(env, n)
			rec.NonGoBytes = n
			if m := l.rec.Target.NonGo; m != nil && plan.GOMEMLIMITReason == fit.ReasonUnmanaged {
				rec.Reasons = append(rec.Reasons, nonGoReason(m, rec.MemoryLimitBytes, env["GOMEMLIMIT"]))
			}
		}
		rec.Env = env
		for _, r := range plan.Reasons {
			if mem.setting == result.SetAutoMemLimit && r.Var == "GOMEMLIMIT" {
				continue // gofit's GOMEMLIMIT reasoning, overruled by the measurement
			}
			if rec.Setting != result.SetGofit && rec.Setting != "" && r.Var == "GOMAXPROCS" {
				continue // gofit's GOMAXPROCS reasoning, overruled by the measurement
			}
			rec.Reasons = append(rec.Reasons, "env: "+r.Text)
		}
		if v, ok := env["GOMAXPROCS"]; ok && rec.Setting != result.SetGofit {
			rec.Reasons = append(rec.Reasons, "env: GOMAXPROCS="+v+": the measured setting "+rec.Setting)
		}
	}
	if cpu.cores == 0 {
		rec.Confident = false
	}
	rec.YAML = deploymentYAML(rec)
	return rec
}

// markerOf is the GOFIT_RUN value for the variables of env that hold
// exactly what the plan exported: the ones gofit may refine.
func markerOf(env, exported map[string]string) string {
	var marks []string
	for _, name := range fit.VarNames() {
		if v, ok := env[name]; ok && name != fit.MarkerVar && exported[name] == v {
			marks = append(marks, name+"="+v)
		}
	}
	return strings.Join(marks, ",")
}

type memChoice struct {
	floor   int64
	setting string
}

// recommendMemory picks the memory limit: the healthy floor plus
// headroom, of gofit's plan, unless the 0.9 ratio (automemlimit's rule)
// was healthy lower, in which case the ratio and its floor: gofit never
// recommends more memory than the ratio needs. Without gofit or the ratio
// measured, the no-knob floor; without any healthy floor, gofit's
// survival floor, not confidently.
func (l *analysis) recommendMemory(rec *result.Recommendation) memChoice {
	healthy := map[string]int64{}
	for _, m := range l.res.Memory {
		if m.HealthyFloorBytes != nil {
			healthy[m.Setting] = *m.HealthyFloorBytes
		}
	}
	var c memChoice
	var found result.Finding
	kind := "healthy floor"
	switch g, a := healthy[result.SetGofit], healthy[result.SetAutoMemLimit]; {
	case g > 0 && (a == 0 || g <= a):
		c = memChoice{g, result.SetGofit}
	case a > 0:
		c = memChoice{a, result.SetAutoMemLimit}
		if g > 0 {
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("memory: gofit's plan was healthy from %s, the 0.9 ratio (automemlimit's rule) from %s: the ratio needs less, so it is what is recommended", fit.FormatBytes(g), fit.FormatBytes(a)))
		} else {
			rec.Reasons = append(rec.Reasons, fmt.Sprintf("memory: no healthy floor for gofit's plan; the 0.9 ratio (automemlimit's rule) was healthy from %s, so it is what is recommended", fit.FormatBytes(a)))
		}
	case healthy[result.SetNone] > 0:
		c = memChoice{healthy[result.SetNone], result.SetNone}
	default:
		for _, m := range l.res.Memory {
			if m.Setting == result.SetGofit && m.FloorBytes != nil {
				c = memChoice{*m.FloorBytes, result.SetGofit}
				kind = "survival floor (NO healthy floor was found: expect degraded service near it)"
				rec.Confident = false
			}
		}
	}
	if c.floor == 0 {
		if len(l.res.Memory) > 0 {
			rec.Reasons = append(rec.Reasons, "memory: no limit recommended: no setting has a floor that a trial under a memory limit found or bounded")
			rec.Reasons = append(rec.Reasons, l.memVerdicts()...)
		}
		return c
	}
	for _, m := range l.res.Memory {
		if m.Setting == c.setting {
			found = m.HealthyFinding
			if m.HealthyFloorBytes == nil || *m.HealthyFloorBytes != c.floor {
				found = m.SurvivalFinding
			}
		}
	}
	const step = 4 << 20
	rec.MemoryLimitBytes = int64(math.Ceil(float64(c.floor)*memHeadroom/step)) * step
	rec.MemoryRequestBytes = rec.MemoryLimitBytes
	rec.Reasons = append(rec.Reasons, fmt.Sprintf("memory %s: the %s with setting %q (%s, at %s CPU) plus %.0f%% headroom; request = limit so the pod is not reclaimed before others",
		mebi(rec.MemoryLimitBytes), kind, c.setting, fit.FormatBytes(c.floor), result.CPULabel(l.res.Target.ProbeCPU), (memHeadroom-1)*100))
	if found.Status == result.FloorBounded {
		n := fmt.Sprintf("%d limited trials", found.Trials)
		if found.Trials == 1 {
			n = "one limited trial"
		}
		rec.Reasons = append(rec.Reasons, fmt.Sprintf("memory: that floor is bounded, not found: the budget cut its search after %s, so the service may need less; a longer --budget finds it", n))
	}
	rec.Reasons = append(rec.Reasons, l.memVerdicts()...)
	return c
}

func msCI(m result.Metric) string {
	return fmt.Sprintf("%.1fms [%.1f–%.1f]", m.Value, m.CILow, m.CIHigh)
}

func rpsCI(m result.Metric) string {
	return fmt.Sprintf("%.0f rps [%.0f–%.0f]", m.Value, m.CILow, m.CIHigh)
}

// cpuVerdicts states, row by row, what the comparisons with go-default
// decided: the significant differences, the saturated open loops, the
// undecided comparisons with the smallest difference they could have
// shown, and "no setting differs significantly" only where every
// comparison was decided the same, inside the margin.
func (l *analysis) cpuVerdicts() []string {
	var out []string
	rows := l.quotas()
	if l.requestRow() > 0 {
		rows = append(rows, 0)
	}
	for _, q := range rows {
		var parts, undecided []string
		same := 0
		for _, s := range l.res.CPUSummary {
			if s.QuotaCores != q || s.Verdict == nil {
				continue
			}
			what := "closed-loop rps"
			if s.Mode == result.Open {
				what = "open-loop p99"
			}
			switch {
			case *s.Verdict == result.Saturated:
				parts = append(parts, fmt.Sprintf("%s saturated in the open loop at %.0f rps (no p99 verdict)", result.SummaryLabel(s), s.OfferedRPS))
			case !s.Decided:
				u := fmt.Sprintf("%s undecided on %s", result.SummaryLabel(s), what)
				switch {
				case s.DetectableRatio != nil && s.StoppedEarly:
					need := fmt.Sprintf("over %d", mostRunsProjected)
					if s.RunsToDecide > 0 {
						need = fmt.Sprintf("about %d", s.RunsToDecide)
					}
					u += fmt.Sprintf(" (a difference under ×%.2f would not show; given up at %d runs a side, as %s would decide it)", *s.DetectableRatio, s.VerdictRuns, need)
				case s.DetectableRatio != nil:
					u += fmt.Sprintf(" (a difference under ×%.2f would not show)", *s.DetectableRatio)
				default:
					u += fmt.Sprintf(" (under %d runs a side)", stats.MinRuns)
				}
				undecided = append(undecided, u)
			case *s.Verdict == stats.Same:
				same++
			case s.VerdictRatio != nil:
				parts = append(parts, fmt.Sprintf("%s %s on %s (×%.2f, %g%% CI %.2f–%.2f)", result.SummaryLabel(s), *s.Verdict, what, s.VerdictRatio.Value, 100*(1-l.cfg.looks().Level(float64(s.VerdictRuns), 1)), s.VerdictRatio.Low, s.VerdictRatio.High))
			}
		}
		if len(parts) == 0 && len(undecided) == 0 && same > 0 {
			parts = []string{"no setting differs significantly (every comparison decided the same, inside its margin)"}
		}
		if same > 0 && (len(parts) > 0 || len(undecided) > 0) {
			parts = append(parts, fmt.Sprintf("%d more decided the same", same))
		}
		parts = append(parts, undecided...)
		if len(parts) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("at %s against go-default: %s", result.RowLabel(q, l.requestRow()), strings.Join(parts, "; ")))
	}
	return append(out, l.res.Lab.NotCompared...)
}

func (l *analysis) memVerdicts() []string {
	var parts []string
	for _, m := range l.res.Memory {
		f, h := m.FloorLabels()
		parts = append(parts, fmt.Sprintf("%s: survival floor %s, healthy floor %s", m.Setting, f, h))
	}
	return []string{"memory floors: " + strings.Join(parts, "; ")}
}

// requestRow is the request of the CPU study's request row, 0 if none ran.
func (l *analysis) requestRow() float64 { return result.RequestCores(l.res.CPUSummary) }

func mebi(b int64) string { return fmt.Sprintf("%dMi", (b+(1<<20)-1)>>20) }

func deploymentYAML(r result.Recommendation) string {
	var b strings.Builder
	if r.CPULimitCores == 0 && r.MemoryLimitBytes == 0 {
		return "# no recommendation: see the reasons above\n"
	}
	b.WriteString("# container spec fragment from gofit lab\nresources:\n")
	for _, part := range []string{"requests", "limits"} {
		fmt.Fprintf(&b, "  %s:\n", part)
		cpu := r.CPURequestCores
		if part == "limits" {
			cpu = r.CPULimitCores
		}
		if cpu > 0 {
			fmt.Fprintf(&b, "    cpu: %s\n", result.Millicores(cpu))
		}
		if r.MemoryLimitBytes > 0 {
			fmt.Fprintf(&b, "    memory: %s\n", mebi(r.MemoryLimitBytes))
		}
	}
	if r.NonGoBytes > 0 {
		// The webhook reads the pod's annotation rather than the env.
		fmt.Fprintf(&b, "# %s outside the Go heap, measured by gofit lab, is declared below as %s (gofit run);\n", mebi(r.NonGoBytes), nongo.EnvVar)
		fmt.Fprintf(&b, "# with gofit's webhook, annotate the pod instead: %s: \"NAME=%s\" (NAME: this container)\n", nongo.Annotation, mebi(r.NonGoBytes))
	}
	if len(r.Env) > 0 {
		b.WriteString("env:\n")
		keys := make([]string, 0, len(r.Env))
		for k := range r.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  - name: %s\n    value: %q\n", k, r.Env[k])
		}
	}
	return b.String()
}

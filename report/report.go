// Package report assembles what `gofit inspect` shows and what the opt-in
// expvar publishes: a container's limits, its usage and the plan.
//
// It is public because two of gofit's modules use it: the library's
// debugvars package and the gofit command (gofit inspect). Its JSON form is
// the one they both print.
package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

// Report is the container's limits, its usage and the plan. Its JSON form
// is documented in the README; null means "no limit" or "not available".
type Report struct {
	CgroupVersion int          `json:"cgroup_version"`
	CPU           CPUReport    `json:"cpu"`
	Memory        MemoryReport `json:"memory"`
	Plan          PlanReport   `json:"plan"`
}

// CPUReport is the CPU part of a Report.
type CPUReport struct {
	Version        int      `json:"version"`
	Cgroup         string   `json:"cgroup"`
	LimitCores     *float64 `json:"limit_cores"`
	LimitSource    *string  `json:"limit_source"`
	PeriodUS       *int64   `json:"period_us"`
	LeafLimitCores *float64 `json:"leaf_limit_cores"`
	CPUSetCPUs     *int     `json:"cpuset_cpus"`
	// RequestCores is the CPU request read from cpu.shares or cpu.weight
	// (cgroup.CPULimits.RequestCores), Shares and Weight the raw values.
	RequestCores     *float64   `json:"request_cores"`
	Shares           *uint64    `json:"shares"`
	Weight           *uint64    `json:"weight"`
	AffinityCPUs     int        `json:"affinity_cpus"`
	UsageSeconds     float64    `json:"usage_seconds"`
	Periods          uint64     `json:"periods"`
	ThrottledPeriods uint64     `json:"throttled_periods"`
	ThrottledSeconds float64    `json:"throttled_seconds"`
	Pressure         *PSIReport `json:"pressure"`
}

// MemoryReport is the memory part of a Report.
type MemoryReport struct {
	Version         int        `json:"version"`
	Cgroup          string     `json:"cgroup"`
	MaxBytes        *int64     `json:"max_bytes"`
	MaxSource       *string    `json:"max_source"`
	HighBytes       *int64     `json:"high_bytes"`
	HighSource      *string    `json:"high_source"`
	EffectiveBytes  *int64     `json:"effective_bytes"`
	UsageBytes      uint64     `json:"usage_bytes"`
	WorkingSetBytes uint64     `json:"working_set_bytes"`
	PeakBytes       uint64     `json:"peak_bytes"`
	AnonBytes       uint64     `json:"anon_bytes"`
	FileBytes       uint64     `json:"file_bytes"`
	KernelBytes     uint64     `json:"kernel_bytes"`
	MajorFaults     uint64     `json:"major_faults"`
	OOMKills        uint64     `json:"oom_kills"`
	LimitHits       uint64     `json:"limit_hits"`
	Pressure        *PSIReport `json:"pressure"`
}

// PSIReport is a pressure file: percentages of wall time stalled.
type PSIReport struct {
	SomeAvg10     float64 `json:"some_avg10"`
	SomeAvg60     float64 `json:"some_avg60"`
	SomeTotalSecs float64 `json:"some_total_seconds"`
	FullAvg10     float64 `json:"full_avg10"`
	FullAvg60     float64 `json:"full_avg60"`
	FullTotalSecs float64 `json:"full_total_seconds"`
}

// PlanReport is the plan, with the environment changes `gofit run` would
// make (export, unset) or, in-process, what gofit does with GOMAXPROCS.
type PlanReport struct {
	GOMAXPROCS           int               `json:"gomaxprocs"`
	GOMEMLIMITBytes      *int64            `json:"gomemlimit_bytes"`
	GOGC                 *string           `json:"gogc"`
	RuntimeGOMAXPROCS    int               `json:"runtime_gomaxprocs"`
	RuntimeFollowsCgroup bool              `json:"runtime_follows_cgroup"`
	GOMAXPROCSAction     *string           `json:"gomaxprocs_action,omitempty"`
	Export               map[string]string `json:"export"`
	Unset                []string          `json:"unset"`
	GOMAXPROCSReason     fit.Reason        `json:"gomaxprocs_reason"`
	GOMEMLIMITReason     fit.Reason        `json:"gomemlimit_reason"`
	Reasons              []fit.Note        `json:"reasons"`
	Warnings             []fit.Note        `json:"warnings"`
}

func ptr[T any](v T) *T { return &v }

func nonZero[T int | int64 | uint64 | float64](v T) *T {
	if v == 0 {
		return nil
	}
	return &v
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func psiReport(p *cgroup.PSI) *PSIReport {
	if p == nil {
		return nil
	}
	return &PSIReport{
		SomeAvg10: p.Some.Avg10, SomeAvg60: p.Some.Avg60, SomeTotalSecs: p.Some.Total.Seconds(),
		FullAvg10: p.Full.Avg10, FullAvg60: p.Full.Avg60, FullTotalSecs: p.Full.Total.Seconds(),
	}
}

// New assembles a Report.
func New(c *cgroup.Cgroups, l cgroup.Limits, s cgroup.Stats, in fit.Input, p fit.Plan) Report {
	r := Report{CgroupVersion: c.Version()}
	r.CPU = CPUReport{
		Version: l.CPU.Version, Cgroup: l.CPU.Group,
		LimitCores: nonZero(l.CPU.Quota), LimitSource: nonEmpty(l.CPU.QuotaGroup),
		LeafLimitCores: nonZero(l.CPU.LeafQuota), CPUSetCPUs: nonZero(l.CPU.CPUSet),
		RequestCores: nonZero(l.CPU.RequestCores()), Shares: nonZero(l.CPU.Shares), Weight: nonZero(l.CPU.Weight),
		AffinityCPUs: in.CPUs,
		UsageSeconds: s.CPU.Usage.Seconds(), Periods: s.CPU.Periods,
		ThrottledPeriods: s.CPU.ThrottledPeriods, ThrottledSeconds: s.CPU.ThrottledTime.Seconds(),
		Pressure: psiReport(s.CPU.PSI),
	}
	if l.CPU.Period > 0 {
		r.CPU.PeriodUS = ptr(l.CPU.Period.Microseconds())
	}
	r.Memory = MemoryReport{
		Version: l.Memory.Version, Cgroup: l.Memory.Group,
		MaxBytes: nonZero(l.Memory.Max), MaxSource: nonEmpty(l.Memory.MaxGroup),
		HighBytes: nonZero(l.Memory.High), HighSource: nonEmpty(l.Memory.HighGroup),
		EffectiveBytes: nonZero(l.Memory.Effective()),
		UsageBytes:     s.Memory.Usage, WorkingSetBytes: s.Memory.WorkingSet, PeakBytes: s.Memory.Peak,
		AnonBytes: s.Memory.Anon, FileBytes: s.Memory.File, KernelBytes: s.Memory.Kernel,
		MajorFaults: s.Memory.MajorFaults, OOMKills: s.Memory.OOMKills, LimitHits: s.Memory.MaxHits,
		Pressure: psiReport(s.Memory.PSI),
	}
	r.Plan = PlanReport{
		GOMAXPROCS: p.GOMAXPROCS, GOMEMLIMITBytes: nonZero(p.GOMEMLIMIT), GOGC: nonEmpty(p.GOGC),
		RuntimeGOMAXPROCS: p.RuntimeGOMAXPROCS, RuntimeFollowsCgroup: p.RuntimeFollowsCgroup,
		Export: map[string]string{}, Unset: append([]string{}, p.Unset...),
		GOMAXPROCSReason: p.GOMAXPROCSReason, GOMEMLIMITReason: p.GOMEMLIMITReason,
		Reasons: append([]fit.Note{}, p.Reasons...), Warnings: append([]fit.Note{}, p.Warnings...),
	}
	for k, v := range p.Export {
		r.Plan.Export[k] = v
	}
	if in.Running != nil {
		r.Plan.GOMAXPROCSAction = ptr(p.GOMAXPROCSAction.String())
	}
	return r
}

// WriteText renders the report for people.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	none := func(s *string) string {
		if s == nil {
			return "-"
		}
		return cgroup.DisplayPath(*s)
	}
	fmt.Fprintf(&b, "cgroup v%d\n\n", r.CgroupVersion)
	c := r.CPU
	fmt.Fprintf(&b, "CPU      cgroup %s (v%d)\n", cgroup.DisplayPath(c.Cgroup), c.Version)
	if c.LimitCores != nil {
		fmt.Fprintf(&b, "         limit %g cores, period %dus, set on %s\n", *c.LimitCores, *c.PeriodUS, none(c.LimitSource))
	} else {
		fmt.Fprintf(&b, "         limit none\n")
	}
	cpuset := "-"
	if c.CPUSetCPUs != nil {
		cpuset = fmt.Sprint(*c.CPUSetCPUs)
	}
	fmt.Fprintf(&b, "         cpuset %s CPUs, affinity %d CPUs\n", cpuset, c.AffinityCPUs)
	switch {
	case c.RequestCores != nil && c.Shares != nil:
		fmt.Fprintf(&b, "         request %g cores (cpu.shares %d)\n", *c.RequestCores, *c.Shares)
	case c.RequestCores != nil && c.Weight != nil:
		fmt.Fprintf(&b, "         request at most %.3g cores (cpu.weight %d)\n", *c.RequestCores, *c.Weight)
	}
	fmt.Fprintf(&b, "         used %.2fs; throttled in %d of %d periods (%.2fs)\n", c.UsageSeconds, c.ThrottledPeriods, c.Periods, c.ThrottledSeconds)
	if c.Pressure != nil {
		fmt.Fprintf(&b, "         pressure some %.2f%% (10s) %.2f%% (60s)\n", c.Pressure.SomeAvg10, c.Pressure.SomeAvg60)
	}
	m := r.Memory
	fmt.Fprintf(&b, "\nMemory   cgroup %s (v%d)\n", cgroup.DisplayPath(m.Cgroup), m.Version)
	bytes := func(v *int64) string {
		if v == nil {
			return "none"
		}
		return fit.FormatBytes(*v)
	}
	fmt.Fprintf(&b, "         max %s (on %s), high %s (on %s), effective %s\n", bytes(m.MaxBytes), none(m.MaxSource), bytes(m.HighBytes), none(m.HighSource), bytes(m.EffectiveBytes))
	fmt.Fprintf(&b, "         usage %s, working set %s, peak %s\n", fit.FormatBytes(int64(m.UsageBytes)), fit.FormatBytes(int64(m.WorkingSetBytes)), fit.FormatBytes(int64(m.PeakBytes)))
	fmt.Fprintf(&b, "         anon %s, file %s, kernel %s; %d major faults, %d OOM kills\n", fit.FormatBytes(int64(m.AnonBytes)), fit.FormatBytes(int64(m.FileBytes)), fit.FormatBytes(int64(m.KernelBytes)), m.MajorFaults, m.OOMKills)
	if m.Pressure != nil {
		fmt.Fprintf(&b, "         pressure some %.2f%% full %.2f%% (10s)\n", m.Pressure.SomeAvg10, m.Pressure.FullAvg10)
	}
	p := r.Plan
	fmt.Fprintf(&b, "\nPlan     GOMAXPROCS=%d  GOMEMLIMIT=%s", p.GOMAXPROCS, bytes(p.GOMEMLIMITBytes))
	if p.GOGC != nil {
		fmt.Fprintf(&b, "  GOGC=%s", *p.GOGC)
	}
	fmt.Fprintf(&b, "\n")
	for _, n := range p.Reasons {
		fmt.Fprintf(&b, "         - %s\n", n.Text)
	}
	for _, n := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s [%s]\n", n.Text, n.Code)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

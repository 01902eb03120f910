// Package metrics exports gofit's view of the container as Prometheus
// metrics. It registers nothing globally:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(auto.Fitter()))
package metrics

import (
	"math"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/cgroup"
)

type desc struct {
	*prometheus.Desc
	typ prometheus.ValueType
}

func newDesc(name, help string, typ prometheus.ValueType, labels ...string) desc {
	return desc{prometheus.NewDesc(name, help, labels, nil), typ}
}

var (
	cpuLimit        = newDesc("gofit_cpu_limit_cores", "Tightest CFS bandwidth limit on the cgroup path, in cores (absent when unlimited).", prometheus.GaugeValue)
	cpuUsage        = newDesc("gofit_cpu_usage_seconds_total", "CPU time used by the cgroup.", prometheus.CounterValue)
	cpuPeriods      = newDesc("gofit_cpu_periods_total", "CFS enforcement periods with runnable tasks.", prometheus.CounterValue)
	cpuThrottled    = newDesc("gofit_cpu_throttled_periods_total", "CFS periods in which the cgroup was throttled.", prometheus.CounterValue)
	cpuThrottledSec = newDesc("gofit_cpu_throttled_seconds_total", "Time the cgroup spent throttled.", prometheus.CounterValue)
	memLimit        = newDesc("gofit_memory_limit_bytes", "Tightest hard memory limit on the cgroup path (absent when unlimited).", prometheus.GaugeValue)
	memHigh         = newDesc("gofit_memory_high_bytes", "Tightest memory.high on the cgroup path (absent when unset).", prometheus.GaugeValue)
	memUsage        = newDesc("gofit_memory_usage_bytes", "Memory charged to the cgroup.", prometheus.GaugeValue)
	memWorkingSet   = newDesc("gofit_memory_working_set_bytes", "Usage minus inactive page cache, as the kubelet computes it.", prometheus.GaugeValue)
	memUnmanaged    = newDesc("gofit_memory_unmanaged_bytes", "Memory charged on this process's behalf outside the Go runtime that cannot be reclaimed, as gofit budgets it, by part: anon (anonymous memory outside the Go heap), kernel (the cgroup's kernel memory), hot_file (the hot part of the mapped file pages).", prometheus.GaugeValue, "part")
	majorFaults     = newDesc("gofit_memory_major_faults_total", "Page faults that read from disk; a climb near the limit means the binary's code is being re-read.", prometheus.CounterValue)
	oomKills        = newDesc("gofit_oom_kills_total", "Processes killed by the OOM killer in the cgroup.", prometheus.CounterValue)
	limitHits       = newDesc("gofit_memory_limit_hits_total", "Times memory usage hit the limit.", prometheus.CounterValue)
	pressure        = newDesc("gofit_pressure_stalled_seconds_total", "Pressure stall time (PSI) of the cgroup.", prometheus.CounterValue, "resource", "kind")
	gomaxprocs      = newDesc("gofit_gomaxprocs", "GOMAXPROCS now.", prometheus.GaugeValue)
	gomemlimit      = newDesc("gofit_gomemlimit_bytes", "The Go runtime's memory limit now (absent when none).", prometheus.GaugeValue)
	planProcs       = newDesc("gofit_plan_gomaxprocs", "GOMAXPROCS in the plan in force.", prometheus.GaugeValue)
	planMemLimit    = newDesc("gofit_plan_gomemlimit_bytes", "GOMEMLIMIT in the plan in force (absent when none).", prometheus.GaugeValue)
	planGOGC        = newDesc("gofit_plan_gogc_percent", "GOGC in the plan in force, -1 for off (absent when gofit leaves GOGC alone).", prometheus.GaugeValue)
	planReason      = newDesc("gofit_plan_reason", "1 for where each planned setting comes from: setting is gomaxprocs or gomemlimit, reason one of a fixed set (see fit.Reasons).", prometheus.GaugeValue, "setting", "reason")
	planWarning     = newDesc("gofit_plan_warning", "1 for each warning in force, by a fixed code (see fit.Warnings).", prometheus.GaugeValue, "warning")
	readErrors      = newDesc("gofit_read_errors_total", "Refreshes that could not read the cgroup.", prometheus.CounterValue)
	cpuRequest      = newDesc("gofit_cpu_request_cores", "CPU request the leaf cgroup's cpu.shares or cpu.weight encode, in cores (absent when none).", prometheus.GaugeValue)
	highHits        = newDesc("gofit_memory_high_hits_total", "Times usage went over memory.high and the kernel reclaimed and throttled the cgroup (cgroup v2 memory.events high; 0 on v1).", prometheus.CounterValue)

	all = []desc{cpuLimit, cpuUsage, cpuPeriods, cpuThrottled, cpuThrottledSec, memLimit, memHigh, memUsage, memWorkingSet,
		memUnmanaged, majorFaults, oomKills, limitHits, pressure, gomaxprocs, gomemlimit, planProcs, planMemLimit, planGOGC,
		planReason, planWarning, readErrors, cpuRequest, highHits}
)

// Collector reads the cgroup at scrape time.
type Collector struct {
	f *gofit.Fitter
}

// NewCollector returns a collector for f. With a nil f (gofit inactive) it
// reports only the runtime's own values.
func NewCollector(f *gofit.Fitter) *Collector { return &Collector{f: f} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range all {
		ch <- d.Desc
	}
	for _, d := range runtimeDescs {
		ch <- d.Desc
	}
}

func emit(ch chan<- prometheus.Metric, d desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d.Desc, d.typ, v, labels...)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	emit(ch, gomaxprocs, float64(runtime.GOMAXPROCS(0)))
	if ml := debug.SetMemoryLimit(-1); ml != math.MaxInt64 {
		emit(ch, gomemlimit, float64(ml))
	}
	collectRuntime(ch)
	if c.f == nil {
		return
	}
	l := c.f.Limits()
	if l.CPU.Quota > 0 {
		emit(ch, cpuLimit, l.CPU.Quota)
	}
	if r := l.CPU.RequestCores(); r > 0 {
		emit(ch, cpuRequest, r)
	}
	if l.Memory.Max > 0 {
		emit(ch, memLimit, float64(l.Memory.Max))
	}
	if l.Memory.High > 0 {
		emit(ch, memHigh, float64(l.Memory.High))
	}
	n := c.f.NonGo()
	emit(ch, memUnmanaged, float64(n.Anon), "anon")
	emit(ch, memUnmanaged, float64(n.Kernel), "kernel")
	emit(ch, memUnmanaged, float64(n.HotFile), "hot_file")
	emit(ch, readErrors, float64(c.f.Errors()))
	// Values are gauges and labels come from fixed sets, so a plan that
	// moves by a byte does not make a new series.
	p := c.f.Plan()
	emit(ch, planProcs, float64(p.GOMAXPROCS))
	if p.GOMEMLIMIT > 0 {
		emit(ch, planMemLimit, float64(p.GOMEMLIMIT))
	}
	if p.GOGC == "off" {
		emit(ch, planGOGC, -1)
	} else if n, err := strconv.Atoi(p.GOGC); err == nil {
		emit(ch, planGOGC, float64(n))
	}
	if p.GOMAXPROCSReason != "" {
		emit(ch, planReason, 1, "gomaxprocs", string(p.GOMAXPROCSReason))
	}
	if p.GOMEMLIMITReason != "" {
		emit(ch, planReason, 1, "gomemlimit", string(p.GOMEMLIMITReason))
	}
	seen := map[string]bool{}
	for _, w := range p.Warnings {
		if !seen[w.Code] { // a duplicate label set would fail the whole scrape
			seen[w.Code] = true
			emit(ch, planWarning, 1, w.Code)
		}
	}

	s, err := c.f.Cgroups().Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(cpuUsage.Desc, err)
		return
	}
	emit(ch, cpuUsage, s.CPU.Usage.Seconds())
	emit(ch, cpuPeriods, float64(s.CPU.Periods))
	emit(ch, cpuThrottled, float64(s.CPU.ThrottledPeriods))
	emit(ch, cpuThrottledSec, s.CPU.ThrottledTime.Seconds())
	emit(ch, memUsage, float64(s.Memory.Usage))
	emit(ch, memWorkingSet, float64(s.Memory.WorkingSet))
	emit(ch, majorFaults, float64(s.Memory.MajorFaults))
	emit(ch, oomKills, float64(s.Memory.OOMKills))
	emit(ch, limitHits, float64(s.Memory.MaxHits))
	emit(ch, highHits, float64(s.Memory.HighHits))
	for _, r := range []struct {
		name string
		psi  *cgroup.PSI
	}{{"cpu", s.CPU.PSI}, {"memory", s.Memory.PSI}} {
		if r.psi != nil {
			emit(ch, pressure, r.psi.Some.Total.Seconds(), r.name, "some")
			emit(ch, pressure, r.psi.Full.Total.Seconds(), r.name, "full")
		}
	}
}

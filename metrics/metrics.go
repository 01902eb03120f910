// Package metrics exports gofit's view of the container as Prometheus
// metrics. It registers nothing globally:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewCollector(auto.Fitter()))
package metrics

import (
	"runtime"
	"strconv"
	"strings"

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
	memUnmanaged    = newDesc("gofit_memory_unmanaged_bytes", "Memory charged to the cgroup outside the Go runtime (page cache, kernel, cgo), as gofit estimates it.", prometheus.GaugeValue)
	majorFaults     = newDesc("gofit_memory_major_faults_total", "Page faults that read from disk; a climb near the limit means the binary's code is being re-read.", prometheus.CounterValue)
	oomKills        = newDesc("gofit_oom_kills_total", "Processes killed by the OOM killer in the cgroup.", prometheus.CounterValue)
	limitHits       = newDesc("gofit_memory_limit_hits_total", "Times memory usage hit the limit.", prometheus.CounterValue)
	pressure        = newDesc("gofit_pressure_stalled_seconds_total", "Pressure stall time (PSI) of the cgroup.", prometheus.CounterValue, "resource", "kind")
	gomaxprocs      = newDesc("gofit_gomaxprocs", "GOMAXPROCS now.", prometheus.GaugeValue)
	gomemlimit      = newDesc("gofit_gomemlimit_bytes", "The Go runtime's memory limit now (absent when none).", prometheus.GaugeValue)
	planInfo        = newDesc("gofit_plan_info", "The plan in force; its labels give the values and the reasons.", prometheus.GaugeValue, "gomaxprocs", "gomemlimit", "gogc", "reasons", "warnings")
	readErrors      = newDesc("gofit_read_errors_total", "Refreshes that could not read the cgroup.", prometheus.CounterValue)

	all = []desc{cpuLimit, cpuUsage, cpuPeriods, cpuThrottled, cpuThrottledSec, memLimit, memHigh, memUsage, memWorkingSet,
		memUnmanaged, majorFaults, oomKills, limitHits, pressure, gomaxprocs, gomemlimit, planInfo, readErrors}
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
}

func emit(ch chan<- prometheus.Metric, d desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d.Desc, d.typ, v, labels...)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	emit(ch, gomaxprocs, float64(runtime.GOMAXPROCS(0)))
	if ml := gofit.CurrentMemoryLimit(); ml != gofit.NoMemoryLimit {
		emit(ch, gomemlimit, float64(ml))
	}
	if c.f == nil {
		return
	}
	l := c.f.Limits()
	if l.CPU.Quota > 0 {
		emit(ch, cpuLimit, l.CPU.Quota)
	}
	if l.Memory.Max > 0 {
		emit(ch, memLimit, float64(l.Memory.Max))
	}
	if l.Memory.High > 0 {
		emit(ch, memHigh, float64(l.Memory.High))
	}
	emit(ch, memUnmanaged, float64(c.f.Unmanaged()))
	emit(ch, readErrors, float64(c.f.Errors()))
	p := c.f.Plan()
	ml := ""
	if p.GOMEMLIMIT > 0 {
		ml = strconv.FormatInt(p.GOMEMLIMIT, 10)
	}
	emit(ch, planInfo, 1, strconv.Itoa(p.GOMAXPROCS), ml, p.GOGC, strings.Join(p.Reasons, "; "), strings.Join(p.Warnings, "; "))

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

package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gofit-dev/gofit/kube/memqos"
)

// Metrics are the agent's Prometheus metrics, on a registry of the
// caller's (never the global one).
type Metrics struct {
	writes    *prometheus.CounterVec
	errors    prometheus.Counter
	protected *prometheus.GaugeVec
	duration  prometheus.Histogram
	missing   prometheus.Gauge
}

// NewMetrics registers the agent's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gofit_node_cgroup_writes_total", Help: "cgroup files written, by file name.",
		}, []string{"file"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gofit_node_cgroup_write_errors_total", Help: "cgroup reads or writes that failed.",
		}),
		protected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gofit_node_protected_bytes", Help: "memory.min (kind=min) and memory.low (kind=low) summed over running pods, by koordinator QoS class.",
		}, []string{"class", "kind"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gofit_node_reconcile_duration_seconds", Help: "time to plan and apply one reconcile.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		missing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_missing_files", Help: "distinct cgroup file names not present on this kernel (skipped).",
		}),
	}
	for _, c := range []prometheus.Collector{m.writes, m.errors, m.protected, m.duration, m.missing} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Error counts a failure outside a reconcile (a bad ConfigMap, say).
func (m *Metrics) Error() { m.errors.Inc() }

func (m *Metrics) observe(r *Report) {
	for _, c := range r.Apply.Changed {
		m.writes.WithLabelValues(c.File).Inc()
	}
	m.errors.Add(float64(len(r.Apply.Errors)))
	for _, c := range []memqos.Class{memqos.LSE, memqos.LSR, memqos.LS, memqos.BE} {
		p := r.Result.Protected[c]
		m.protected.WithLabelValues(string(c), "min").Set(float64(p.Min))
		m.protected.WithLabelValues(string(c), "low").Set(float64(p.Low))
	}
	m.duration.Observe(r.Duration.Seconds())
	n := 0
	for _, w := range r.Warnings {
		if len(w) > 0 && containsNotOnKernel(w) {
			n++
		}
	}
	m.missing.Set(float64(n))
}

func containsNotOnKernel(w string) bool {
	const s = ": not on this kernel; skipped"
	return len(w) >= len(s) && w[len(w)-len(s):] == s
}

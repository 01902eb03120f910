package agent

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gofit-dev/gofit/kube/memqos"
)

// Metrics are the agent's Prometheus metrics, on a registry of the
// caller's (never the global one). Every label takes values from a fixed
// set.
type Metrics struct {
	writes     *prometheus.CounterVec
	errors     prometheus.Counter
	protected  *prometheus.GaugeVec
	duration   prometheus.Histogram
	missing    prometheus.Gauge
	skipped    *prometheus.CounterVec
	kubelet    prometheus.Gauge
	defaults   prometheus.Gauge
	unreadable prometheus.Gauge
	valid      *prometheus.GaugeVec
	lastPass   prometheus.Gauge
	unprot     prometheus.Gauge
	viewLag    prometheus.Gauge
	unknown    prometheus.Gauge
	conflicts  prometheus.Gauge
	owned      *prometheus.GaugeVec
	foreign    *prometheus.CounterVec
}

// NewMetrics registers the agent's metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gofit_node_cgroup_writes_total", Help: "cgroup files written, by file name.",
		}, []string{"file"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gofit_node_cgroup_write_errors_total", Help: "cgroup reads or writes that failed or were refused.",
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
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gofit_node_skipped_reconciles_total",
			Help: "reconcile passes that wrote nothing, by reason: no_allocatable, bad_input, bad_config.",
		}, []string{"reason"}),
		kubelet: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_kubelet_memory_qos", Help: "1 when the kubelet's own Memory QoS writes some of memory.min/low/high on this node (gofit_node_kubelet_owned says which; the agent leaves those to it unless told to take over).",
		}),
		defaults: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_config_defaults", Help: "1 when the agent runs on the built-in defaults, as --no-configmap asks.",
		}),
		unreadable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_config_unreadable", Help: "1 when the QoS ConfigMap does not exist or the agent may not read it (404 or 403): a bad ConfigMap, so the last good configuration stays or, with none since the agent started, nothing is written.",
		}),
		valid: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gofit_node_config_valid",
			Help: "1 when the key (resource-qos-config, memory-qos) of the QoS ConfigMap as last read parses and checks (or is absent), 0 when it does not: the agent then keeps the last good configuration or, with none since it started, writes nothing.",
		}, []string{"key"}),
		lastPass: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_last_reconcile_timestamp_seconds", Help: "when the last reconcile pass ended (Unix time).",
		}),
		unprot: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_unprotected_pods", Help: "pods the last pass left without the memory QoS it planned: no cgroup found, or every running pod when the pass was skipped for bad input or no allocatable.",
		}),
		viewLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_pod_view_lag_seconds",
			Help: "how long the longest-missing pod the kubelet runs (processes in its cgroup) has been missing from the agent's view of the API; 0 when the view holds them all.",
		}),
		unknown: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_unknown_running_pods", Help: "pod cgroups with processes in them that the agent's view of the API does not hold (their values are kept).",
		}),
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gofit_node_kubelet_owned",
			Help: "1 for each file at each level (kubepods, qos, pod, container) that the kubelet's own Memory QoS writes and the agent leaves to it; 0 for those the agent writes.",
		}, []string{"level", "file"}),
		foreign: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gofit_node_foreign_writes_total",
			Help: "files the agent owns found changed since its last pass by another writer (the kubelet, an operator), by level and file: a fight over a file.",
		}, []string{"level", "file"}),
		conflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_node_cgroup_conflicts", Help: "pod cgroups that more than one API pod maps to (a forged kubernetes.io/config.mirror): those pods are not planned.",
		}),
	}
	for _, r := range []string{SkipNoAllocatable, SkipBadInput, SkipBadConfig} {
		m.skipped.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.owned, m.foreign, m.writes, m.errors, m.protected, m.duration, m.missing, m.skipped, m.kubelet, m.defaults, m.unreadable, m.valid, m.lastPass, m.unprot, m.viewLag, m.unknown, m.conflicts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Error counts a failure outside a reconcile (a bad ConfigMap, say).
func (m *Metrics) Error() { m.errors.Inc() }

// ConfigDefaults records whether the defaults stand in for the ConfigMap.
func (m *Metrics) ConfigDefaults(on bool) { m.defaults.Set(b2f(on)) }

// ConfigUnreadable records whether the QoS ConfigMap was last found
// missing or forbidden.
func (m *Metrics) ConfigUnreadable(on bool) { m.unreadable.Set(b2f(on)) }

// ConfigValid records which keys of the QoS ConfigMap, as last read, do
// not parse or check (bad; none: all valid).
func (m *Metrics) ConfigValid(bad []string) {
	for _, k := range ConfigKeys {
		m.valid.WithLabelValues(k).Set(b2f(!slices.Contains(bad, k)))
	}
}

// Skipped counts a pass that did not run (SkipBadConfig).
func (m *Metrics) Skipped(reason string) { m.skipped.WithLabelValues(reason).Inc() }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (m *Metrics) observe(r *Report) {
	m.lastPass.SetToCurrentTime()
	m.duration.Observe(r.Duration.Seconds())
	m.kubelet.Set(b2f(len(r.Owned) > 0))
	for _, l := range []memqos.Level{memqos.LevelKubepods, memqos.LevelQoS, memqos.LevelPod, memqos.LevelContainer} {
		if r.Skip != "" {
			break // a pass that planned nothing says nothing of who owns what
		}
		for _, f := range []string{memqos.FileMin, memqos.FileLow, memqos.FileHigh} {
			if l != memqos.LevelContainer && f == memqos.FileHigh {
				continue // the agent writes memory.high on containers only
			}
			_, owned := KubeletQoS{Owned: r.Owned}.Owns(l, f)
			m.owned.WithLabelValues(LevelName(l), f).Set(b2f(owned))
		}
	}
	for _, f := range r.Foreign {
		m.foreign.WithLabelValues(LevelName(f.Level), f.File).Inc()
	}
	m.unprot.Set(float64(r.Unprotected))
	m.viewLag.Set(r.ViewLag.Seconds())
	m.unknown.Set(float64(r.Unknown))
	m.conflicts.Set(float64(len(r.Result.Conflicts)))
	if r.Skip != "" {
		m.skipped.WithLabelValues(r.Skip).Inc()
	}
	for _, c := range r.Apply.Changed {
		m.writes.WithLabelValues(c.File).Inc()
	}
	m.errors.Add(float64(len(r.Apply.Errors)))
	for _, c := range []memqos.Class{memqos.LSE, memqos.LSR, memqos.LS, memqos.BE} {
		p := r.Result.Protected[c]
		m.protected.WithLabelValues(string(c), "min").Set(float64(p.Min))
		m.protected.WithLabelValues(string(c), "low").Set(float64(p.Low))
	}
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

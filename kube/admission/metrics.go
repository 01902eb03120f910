package admission

import (
	"crypto/tls"
	"crypto/x509"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the webhook's Prometheus metrics, on a registry of their own
// (never the global one).
type Metrics struct {
	Registry   *prometheus.Registry
	admissions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	certExpiry prometheus.Gauge
	certLoads  prometheus.Counter
}

// NewMetrics registers the webhook's metrics, plus Go and process metrics,
// on a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gofit_webhook_admissions_total",
			Help: "Admission requests by operation, outcome (patched, unchanged, skipped, ignored, warned, error) and HTTP status code.",
		}, []string{"operation", "outcome", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gofit_webhook_admission_duration_seconds",
			Help: "Time from reading a request to writing its response.",
			// The API server gives up after timeoutSeconds (2 s); the
			// goal is well under 5 ms, so resolve the low end finely.
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2},
		}, []string{"operation"}),
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gofit_webhook_certificate_expiry_timestamp_seconds",
			Help: "When the serving certificate now loaded expires (Unix time); 0 before one is loaded.",
		}),
		certLoads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gofit_webhook_certificate_loads_total",
			Help: "Serving certificates loaded (the first and each renewal).",
		}),
	}
	m.Registry.MustRegister(m.admissions, m.latency, m.certExpiry, m.certLoads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) observe(op string, o Outcome, code int, d time.Duration) {
	if m == nil {
		return
	}
	if op == "" {
		op = "unknown"
	}
	m.admissions.WithLabelValues(op, string(o), strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
}

// certLoaded records a newly loaded certificate's expiry.
func (m *Metrics) certLoaded(c tls.Certificate) {
	if m == nil {
		return
	}
	leaf := c.Leaf
	if leaf == nil && len(c.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	if leaf != nil {
		m.certExpiry.Set(float64(leaf.NotAfter.Unix()))
	}
	m.certLoads.Inc()
}

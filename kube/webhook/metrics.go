package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gofit-dev/gofit/kube/admission"
)

// Metrics are the webhook's Prometheus metrics, on a registry of their own
// (never the global one). Every label value comes from a fixed set
// (admission.Operations, admission.Outcomes, the status codes the handler
// answers with), whatever a client sends, so the number of series is
// bounded however many requests arrive.
type Metrics struct {
	Registry   *prometheus.Registry
	admissions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	certExpiry prometheus.Gauge
	certLoads  prometheus.Counter
	restarts   prometheus.Counter
}

// codes are the HTTP status codes the handler answers with; any other is
// counted as "other".
var codes = []int{200, 400, 405, 413, 415, 500, 503}

// NewMetrics registers the webhook's metrics, plus Go and process metrics,
// on a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gofit_webhook_admissions_total",
			Help: "Admission requests by operation, outcome (patched, unchanged, skipped, ignored, warned, error, busy) and HTTP status code.",
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
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gofit_webhook_rotator_restarts_total",
			Help: "Self-managed certificate rotators that ended (a lost leader lease, an API error) and were started again.",
		}),
	}
	m.Registry.MustRegister(m.admissions, m.latency, m.certExpiry, m.certLoads, m.restarts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveAdmission counts one answered request (admission.Observer). A
// value outside its fixed set is counted as "other", never as a new series.
func (m *Metrics) ObserveAdmission(op string, o admission.Outcome, code int, d time.Duration) {
	if m == nil {
		return
	}
	if !slices.Contains(admission.Operations(), op) {
		op = admission.OperationOther
	}
	outcome := string(o)
	if !slices.Contains(admission.Outcomes(), o) {
		outcome = "other"
	}
	c := "other"
	if slices.Contains(codes, code) {
		c = strconv.Itoa(code)
	}
	m.admissions.WithLabelValues(op, outcome, c).Inc()
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

func (m *Metrics) rotatorRestarted() {
	if m != nil {
		m.restarts.Inc()
	}
}

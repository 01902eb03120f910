package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
)

// series counts the series of the admission metrics.
func series(t *testing.T, m *Metrics) int {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		switch f.GetName() {
		case "gofit_webhook_admissions_total", "gofit_webhook_admission_duration_seconds":
			n += len(f.Metric)
		}
	}
	return n
}

// 300 reviews with made-up operations (and junk reported straight to the
// Metrics) grew /metrics to 5,448 series once. The labels come from fixed
// sets: the series stay within the product of those sets.
func TestMetricsSeriesBounded(t *testing.T) {
	m := NewMetrics()
	h := admission.NewHandler(admission.NewMutator(fit.Policy{}), admission.HandlerOptions{Observer: m})
	body := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		r.Request.Operation = admissionv1.Operation(fmt.Sprintf("MADE-UP-%d", i))
		b, _ := json.Marshal(r)
		if code, _ := post(t, h, b); code != 200 {
			t.Fatalf("status %d", code)
		}
		// Any other caller of the Observer interface is held to the sets too.
		m.ObserveAdmission(fmt.Sprintf("op-%d", i), admission.Outcome(fmt.Sprintf("outcome-%d", i)), 600+i, time.Millisecond)
	}
	// Bound: every operation × outcome × code for the counter, every
	// operation for the histogram.
	bound := len(admission.Operations())*(len(admission.Outcomes())+1)*(len(codes)+1) + len(admission.Operations())
	if n := series(t, m); n > 4 {
		t.Errorf("%d series after 600 made-up observations (bound %d); want the 2+2 of %q and %q", n, bound, admission.OperationOther, "other")
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	if len(b) > 64<<10 {
		t.Errorf("/metrics is %d bytes", len(b))
	}
}

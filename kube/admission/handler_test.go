package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestBadRequests(t *testing.T) {
	h := newHandler(t, Options{})
	h.maxBody = 4 << 10
	good := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")
	cases := []struct {
		name   string
		method string
		ctype  string
		body   string
		code   int
		msg    string
	}{
		{"empty", "POST", "application/json", "", 400, "empty body"},
		{"not JSON", "POST", "application/json", "{nope", 400, "decode AdmissionReview"},
		{"truncated", "POST", "application/json", string(good[:len(good)/2]), 400, "decode AdmissionReview"},
		{"wrong type", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, 400, `want admission.k8s.io/v1 AdmissionReview`},
		{"no request", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400, "no request"},
		{"no uid", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, 400, "no uid"},
		{"a field of the wrong type", "POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}`, 400, "decode AdmissionReview"},
		{"too large", "POST", "application/json", `{"apiVersion":"` + strings.Repeat("x", 5<<10) + `"}`, 413, "over 4096 bytes"},
		{"GET", "GET", "", "", 405, "POST an AdmissionReview"},
		{"YAML", "POST", "application/yaml", string(good), 415, "want application/json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, "/mutate", strings.NewReader(c.body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.msg) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), c.code, c.msg)
			}
		})
	}
}

// Anything that goes wrong inside still admits the pod, unchanged.
func TestAlwaysAllowed(t *testing.T) {
	h := newHandler(t, Options{})
	body := review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")

	// A pod the webhook cannot read.
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	r.Request.Object = runtime.RawExtension{Raw: []byte(`{"spec":{"containers":"not a list"}}`)}
	bad, _ := json.Marshal(r)
	code, resp, raw := post(t, h, bad)
	if code != 200 || !resp.Allowed || len(resp.Patch) != 0 || string(resp.UID) != "uid-p" || !hasWarning(resp.Warnings, "could not read the pod") {
		t.Errorf("unreadable pod: %d %s", code, raw)
	}

	// A panic inside the mutator (a nil one panics on first use).
	broken := NewHandler(nil, nil, NewMetrics(), 0)
	code, resp, raw = post(t, broken, body)
	if code != 200 || !resp.Allowed || len(resp.Patch) != 0 || string(resp.UID) != "uid-p" {
		t.Errorf("panic: %d %s", code, raw)
	}
	if got := counter(t, broken.metrics, "CREATE", "error"); got != 1 {
		t.Errorf("error outcome counted %v times", got)
	}

	// Not a pod, or not an operation it handles: admitted, untouched.
	for _, mod := range []func(*admissionv1.AdmissionRequest){
		func(q *admissionv1.AdmissionRequest) { q.Resource.Resource = "services" },
		func(q *admissionv1.AdmissionRequest) { q.Operation = admissionv1.Delete },
		func(q *admissionv1.AdmissionRequest) { q.Operation = admissionv1.Update },
		func(q *admissionv1.AdmissionRequest) { q.SubResource = "status" },
	} {
		_ = json.Unmarshal(body, &r)
		mod(r.Request)
		b, _ := json.Marshal(r)
		code, resp, raw := post(t, h, b)
		if code != 200 || !resp.Allowed || len(resp.Patch) != 0 {
			t.Errorf("ignored request: %d %s", code, raw)
		}
	}
	if got := counter(t, h.metrics, "UPDATE", "ignored"); got != 1 {
		t.Errorf("ignored UPDATEs counted %v times", got)
	}
}

func counter(t *testing.T, m *Metrics, op, outcome string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != "gofit_webhook_admissions_total" {
			continue
		}
		for _, s := range f.Metric {
			labels := map[string]string{}
			for _, l := range s.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["operation"] == op && labels["outcome"] == outcome {
				n += s.Counter.GetValue()
			}
		}
	}
	return n
}

// The response envelope is exactly what the API server expects.
func TestResponseEnvelope(t *testing.T) {
	h := newHandler(t, Options{})
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var m map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	resp := m["response"].(map[string]any)
	if m["apiVersion"] != "admission.k8s.io/v1" || m["kind"] != "AdmissionReview" || resp["uid"] != "uid-p" ||
		resp["allowed"] != true || resp["patchType"] != "JSONPatch" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("envelope %s", rec.Body.String())
	}
}

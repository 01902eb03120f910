package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/kube/podplan"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission/admissiontest"
)

var (
	review = admissiontest.Review
	ctr    = admissiontest.Container
	podOf  = admissiontest.Pod
	env    = admissiontest.Env
	envOf  = admissiontest.EnvOf
)

// post sends body to h and returns the status, the decoded response (nil
// unless 200) and the raw body.
func post(t testing.TB, h http.Handler, body []byte) (int, *admissionv1.AdmissionResponse, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return rec.Code, nil, rec.Body.String()
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response %q: %v", rec.Body.String(), err)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("response envelope: %s", rec.Body.String())
	}
	return rec.Code, out.Response, rec.Body.String()
}

// admit runs a CREATE through the handler and returns the patched pod and
// the response.
func admit(t testing.TB, h http.Handler, pod *corev1.Pod) (*corev1.Pod, *admissionv1.AdmissionResponse) {
	t.Helper()
	code, resp, body := post(t, h, review(t, pod, admissionv1.Create, ""))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if !resp.Allowed {
		t.Fatalf("not allowed: %s", body)
	}
	if string(resp.UID) != "uid-"+pod.Name {
		t.Fatalf("uid %q not echoed", resp.UID)
	}
	return applyPatch(t, pod, resp), resp
}

func newHandler(t testing.TB, opt fit.Options) *Handler {
	t.Helper()
	pol, err := fit.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return NewHandler(NewMutator(pol), HandlerOptions{Observer: &observations{}})
}

// observations records what a Handler reports.
type observations struct {
	mu   sync.Mutex
	list []observation
}

type observation struct {
	op      string
	outcome Outcome
	code    int
}

func (o *observations) ObserveAdmission(op string, outcome Outcome, code int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.list = append(o.list, observation{op, outcome, code})
}

// count is how many observations had op and outcome.
func (o *observations) count(op string, outcome Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, x := range o.list {
		if x.op == op && x.outcome == outcome {
			n++
		}
	}
	return n
}

func record(t testing.TB, pod *corev1.Pod) *podplan.Record {
	t.Helper()
	s, ok := pod.Annotations[AnnotationPlan]
	if !ok {
		t.Fatalf("no %s annotation", AnnotationPlan)
	}
	r, err := podplan.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// applyPatch applies a response's JSON patch to pod.
var applyPatch = admissiontest.ApplyPatch

package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/admission/admissiontest"
	"github.com/gofit-dev/gofit/kube/podplan"
)

var (
	review = admissiontest.Review
	ctr    = admissiontest.Container
	podOf  = admissiontest.Pod
	env    = admissiontest.Env
	envOf  = admissiontest.EnvOf
)

func record(t testing.TB, pod *corev1.Pod) *podplan.Record {
	t.Helper()
	s, ok := pod.Annotations[admission.AnnotationPlan]
	if !ok {
		t.Fatalf("no %s annotation", admission.AnnotationPlan)
	}
	var r podplan.Record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func hasWarning(ws []string, sub string) bool {
	for _, w := range ws {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

func optOut(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[admission.AnnotationInject] = "false"
	return p
}

// post sends body to h and returns the status and the decoded response
// (nil unless 200).
func post(t testing.TB, h http.Handler, body []byte) (int, *admissionv1.AdmissionResponse) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return rec.Code, nil
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("decode response %q: %v", rec.Body.String(), err)
	}
	return rec.Code, out.Response
}

// applyPatch applies a response's JSON patch to pod.
var applyPatch = admissiontest.ApplyPatch

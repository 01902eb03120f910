package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/kube/podplan"
)

// review wraps a pod in an AdmissionReview for CREATE (or UPDATE on
// pods/resize when sub is "resize").
func review(t testing.TB, pod *corev1.Pod, op admissionv1.Operation, sub string) []byte {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:         types.UID("uid-" + pod.Name),
			Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			SubResource: sub,
			Namespace:   "default",
			Name:        pod.Name,
			Operation:   op,
			Object:      runtime.RawExtension{Raw: raw},
		},
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

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

func applyPatch(t testing.TB, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Patch) > 0 {
		if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type %v", resp.PatchType)
		}
		p, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatalf("decode patch %s: %v", resp.Patch, err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatalf("apply patch %s: %v", resp.Patch, err)
		}
	}
	var out corev1.Pod
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func newHandler(t testing.TB, opt Options) *Handler {
	t.Helper()
	m, err := NewMutator(opt)
	if err != nil {
		t.Fatal(err)
	}
	return NewHandler(m, nil, NewMetrics(), 0)
}

// ctr builds a container with limits ("" for none) and env.
func ctr(name, cpu, mem string, env ...corev1.EnvVar) corev1.Container {
	c := corev1.Container{Name: name, Image: "example.com/app:1", Env: env}
	if cpu != "" || mem != "" {
		c.Resources.Limits = corev1.ResourceList{}
	}
	if cpu != "" {
		c.Resources.Limits[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return c
}

func podOf(name string, cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: cs},
	}
}

func env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// envOf returns a container's env as a map of literal values; valueFrom
// entries map to "<from>".
func envOf(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			out[e.Name] = "<from>"
		} else {
			out[e.Name] = e.Value
		}
	}
	return out
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

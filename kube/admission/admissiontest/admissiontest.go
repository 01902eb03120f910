// Package admissiontest builds pods and AdmissionReviews for the tests of
// kube/admission and kube/webhook.
package admissiontest

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Review wraps a pod in an AdmissionReview for op (CREATE, or UPDATE on
// pods/resize when sub is "resize"); its uid is "uid-" + the pod's name,
// its namespace the pod's ("default" when it has none).
func Review(t testing.TB, pod *corev1.Pod, op admissionv1.Operation, sub string) []byte {
	t.Helper()
	ns := pod.Namespace
	if ns == "" {
		ns = "default"
	}
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
			Namespace:   ns,
			Name:        pod.Name,
			Operation:   op,
			Object:      runtime.RawExtension{Raw: raw},
		},
	}
	if op == admissionv1.Update {
		r.Request.OldObject = runtime.RawExtension{Raw: raw}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Container builds a container with limits ("" for none) and env.
func Container(name, cpu, mem string, env ...corev1.EnvVar) corev1.Container {
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

// Pod builds a pod of containers.
func Pod(name string, cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: cs},
	}
}

// Env is a literal env entry.
func Env(name, value string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: value} }

// EnvOf returns a container's env as a map of the values the kubelet would
// pass (the last entry of a name wins); valueFrom entries map to "<from>".
func EnvOf(c corev1.Container) map[string]string {
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

// ApplyPatch applies a response's JSON patch (which must be a JSON Patch) to
// pod and returns the patched copy.
func ApplyPatch(t testing.TB, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) *corev1.Pod {
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

// ApplyPatchOps applies a patch (as a Mutator returns it) to pod.
func ApplyPatchOps(t testing.TB, pod *corev1.Pod, ops any) *corev1.Pod {
	t.Helper()
	b, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	pt := admissionv1.PatchTypeJSONPatch
	if string(b) == "null" {
		b = nil
	}
	return ApplyPatch(t, pod, &admissionv1.AdmissionResponse{Patch: b, PatchType: &pt})
}

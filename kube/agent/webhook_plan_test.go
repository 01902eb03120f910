package agent

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/memqos"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// TestPlanAnnotationFromWebhook: the agent reads the GOMEMLIMIT that the
// webhook recorded in its plan annotation (one podplan.Record for both),
// for a container whose env variable it cannot see (the variable removed
// here).
func TestPlanAnnotationFromWebhook(t *testing.T) {
	m := admission.NewMutator(fit.Policy{})
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("1Gi"),
		}},
	}}}}
	res := m.Create(pod)
	if res.Record == nil || len(res.Record.Containers) != 1 {
		t.Fatalf("webhook recorded %+v", res.Record)
	}
	want := res.Record.Containers[0].Env["GOMEMLIMIT"]
	if want == "" {
		t.Fatalf("webhook planned no GOMEMLIMIT: %+v", res.Record)
	}
	b, err := json.Marshal(res.Record)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{podplan.Annotation: string(b)}
	got, src, ok := memqos.GoMemLimit(pod, &pod.Spec.Containers[0])
	if !ok || src != "annotation "+podplan.Annotation {
		t.Fatalf("agent read no GOMEMLIMIT from %s (ok %v, source %q)", b, ok, src)
	}
	if want != jsonInt(got) {
		t.Errorf("agent read GOMEMLIMIT %d, webhook wrote %s", got, want)
	}
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

package webhook

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"

	"github.com/gofit-dev/gofit/kube/admission"
)

// TestArmAssignerSkipsStoppedArms: once the guard stops an arm on the
// experiment's Lease, new pods get the others; past maxDuration, the
// control only.
func TestArmAssignerSkipsStoppedArms(t *testing.T) {
	ctx := context.Background()
	e, err := admission.ParseExperiment("name: g\nmaxDuration: 1h\narms: [{name: a, fit: gofit}, {name: b, fit: none}, {name: c, env: {GOGC: '50'}}]")
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	now := time.Unix(1_700_000_000, 0)
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	as := &ArmAssigner{Client: cs, Metadata: metafake.NewSimpleMetadataClient(scheme), Namespaces: []string{"shop"}, now: func() time.Time { return now }}
	t.Cleanup(as.Close)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}
	if _, err := as.Assign(ctx, pod, e); err != nil {
		t.Fatal(err)
	}
	leases := cs.CoordinationV1().Leases("shop")
	l, err := leases.Get(ctx, admission.ExperimentLease("g", ""), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.CreationTimestamp = metav1.NewTime(now) // the fake stores none
	l.Annotations[admission.AnnotationGuard] = admission.GuardStatus{Stopped: map[string]admission.ArmStop{"b": {At: now, Reason: "harmful"}}}.String()
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for range 4 {
		a, err := as.Assign(ctx, pod, e)
		if err != nil {
			t.Fatal(err)
		}
		counts[a.Arm]++
	}
	if counts["b"] != 0 || counts["a"] != 2 || counts["c"] != 2 {
		t.Errorf("after b stopped: %v, want none for b, and a and c levelled", counts)
	}
	now = now.Add(time.Hour)
	for range 3 {
		if a, _ := as.Assign(ctx, pod, e); a.Arm != "a" {
			t.Errorf("past maxDuration: %s, want the control a", a.Arm)
		}
	}
}

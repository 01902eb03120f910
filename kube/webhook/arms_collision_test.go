package webhook

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// collidingDeployments finds two Deployment names whose workloads'
// Lease names collide: the first 32 bits of their hashes agree (about
// 2^16 tries, the birthday bound).
func collidingDeployments(t *testing.T) (string, string) {
	seen := map[[4]byte]string{}
	for i := range 1 << 22 {
		name := fmt.Sprintf("d%d", i)
		h := sha256.Sum256([]byte("Deployment/" + name))
		k := [4]byte(h[:4])
		if other, ok := seen[k]; ok {
			return other, name
		}
		seen[k] = name
	}
	t.Fatal("no collision in 2^22 names")
	return "", ""
}

// TestExperimentLeaseCollision: a Lease found by its name was used
// without checking the workload it names, then rewritten as the asker's
// (issue 51, item 8). Lease names carry 32 bits of the workload's hash,
// so two Deployments that collide merged their arms and guard status.
// Now the second gets a Lease of its own, under the 64-bit name, and the
// first's Lease keeps its workload; a Lease that names another workload
// under both names is refused.
func TestExperimentLeaseCollision(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e, err := admission.ParseExperiment("name: gmp\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	if err != nil {
		t.Fatal(err)
	}
	d1, d2 := collidingDeployments(t)
	w1, w2 := "Deployment/"+d1, "Deployment/"+d2
	if admission.ExperimentLease("gmp", w1) != admission.ExperimentLease("gmp", w2) {
		t.Fatalf("%s and %s do not collide", w1, w2)
	}
	t.Logf("%s and %s share Lease name %s", w1, w2, admission.ExperimentLease("gmp", w1))
	podOf := func(deploy string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: deploy + "-abc12-", Namespace: "shop",
			Labels: map[string]string{"app": deploy, "pod-template-hash": "abc12"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: deploy + "-abc12",
				UID: types.UID("uid-" + deploy), Controller: ptr(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	}
	as := newAssigner(t, cfg)
	assign := func(deploy string) error {
		_, err := as.Assign(ctx, podOf(deploy), e)
		return err
	}
	// The guard stopped arm b of d1's experiment.
	if err := assign(d1); err != nil {
		t.Fatal(err)
	}
	leases := cs.CoordinationV1().Leases("shop")
	short := admission.ExperimentLease("gmp", w1)
	l, err := leases.Get(ctx, short, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[admission.AnnotationGuard] = admission.GuardStatus{Stopped: map[string]admission.ArmStop{"b": {Reason: "harmful"}}}.String()
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := assign(d2); err != nil {
		t.Fatalf("%s: %v", d2, err)
	}
	l, err = leases.Get(ctx, short, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[admission.AnnotationWorkload]; got != w1 {
		t.Errorf("%s's Lease %s now names %s: the workloads merged", w1, short, got)
	}
	long, err := leases.Get(ctx, admission.ExperimentLeaseLong("gmp", w2), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s's own Lease: %v", w2, err)
	}
	if got := long.Annotations[admission.AnnotationWorkload]; got != w2 || long.Annotations[admission.AnnotationGuard] != "" || long.Labels[admission.LabelExperiment] != "gmp" {
		t.Errorf("%s's Lease: workload %q, guard %q, labels %v", w2, got, long.Annotations[admission.AnnotationGuard], long.Labels)
	}
	// Each keeps its own: d1's next pod again goes to the short name,
	// d2's to the long one (b open: its first pod took a).
	if err := assign(d1); err != nil {
		t.Fatal(err)
	}
	a2, err := as.Assign(ctx, podOf(d2), e)
	if err != nil || a2.Arm != "b" {
		t.Errorf("%s's second pod: %v %v, want arm b (its own Lease, b open)", d2, a2, err)
	}

	// Both names taken by other workloads' Leases: refused, nothing
	// rewritten.
	w3 := "Deployment/d-x"
	for _, n := range []string{admission.ExperimentLease("gmp", w3), admission.ExperimentLeaseLong("gmp", w3)} {
		forged := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "shop",
			Labels: map[string]string{admission.LabelExperiment: "gmp"}, Annotations: map[string]string{admission.AnnotationWorkload: "Deployment/victim"}}}
		if _, err := leases.Create(ctx, forged, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := assign("d-x"); !errors.Is(err, ErrLeaseTaken) {
		t.Errorf("both names taken: %v, want ErrLeaseTaken", err)
	}
	for _, n := range []string{admission.ExperimentLease("gmp", w3), admission.ExperimentLeaseLong("gmp", w3)} {
		if l, err := leases.Get(ctx, n, metav1.GetOptions{}); err != nil || l.Annotations[admission.AnnotationWorkload] != "Deployment/victim" || l.Annotations[annotationPending] != "" {
			t.Errorf("%s: %v, annotations %v: rewritten", n, err, l.Annotations)
		}
	}
}

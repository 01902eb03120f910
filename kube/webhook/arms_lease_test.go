package webhook

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/internal/kubetest"
)

// TestExperimentLeaseGoesWithItsOwners: on a real API server, the Lease
// an experiment's assignments are kept in names the controllers of the
// pods it gave arms as its owners (so the garbage collector deletes it
// with the last of them; the e2e node checks that deletion), without
// blocking their deletion; a bare pod adds none; and an assignment whose
// Lease the garbage collector deletes under it writes a new one, with its
// pod's owner, instead of failing.
func TestExperimentLeaseGoesWithItsOwners(t *testing.T) {
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
	// Two ReplicaSets of one Deployment, as a rollout leaves them (no
	// controller runs here: they create no pods).
	replicaSet := func(name string) *appsv1.ReplicaSet {
		t.Helper()
		sel := map[string]string{"app": "web", "pod-template-hash": name}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}, Spec: appsv1.ReplicaSetSpec{
			Replicas: new(int32), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}}}
		got, err := cs.AppsV1().ReplicaSets("shop").Create(ctx, rs, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	rs1, rs2 := replicaSet("web-1"), replicaSet("web-2")
	// podOf is a pod being admitted as the ReplicaSet controller creates
	// it: controlled by rs, blocking its owner's deletion, no UID yet.
	podOf := func(rs *appsv1.ReplicaSet) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: "shop"}}
		if rs != nil {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}
		}
		return p
	}
	as := &ArmAssigner{Client: cs}
	owners := func(t *testing.T) []metav1.OwnerReference {
		t.Helper()
		l, err := cs.CoordinationV1().Leases("shop").Get(ctx, leaseName("gmp"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.OwnerReferences
	}
	assign := func(t *testing.T, p *corev1.Pod) {
		t.Helper()
		if _, err := as.Assign(ctx, p, e); err != nil {
			t.Fatal(err)
		}
	}
	wantOwners := func(t *testing.T, rss ...*appsv1.ReplicaSet) {
		t.Helper()
		got := owners(t)
		if len(got) != len(rss) {
			t.Fatalf("lease owners %+v, want the ReplicaSets %d of them", got, len(rss))
		}
		for i, rs := range rss {
			o := got[i]
			if o.UID != rs.UID || o.Name != rs.Name || o.Kind != "ReplicaSet" || o.APIVersion != "apps/v1" {
				t.Errorf("lease owner %d: %+v, want ReplicaSet %s (%s)", i, o, rs.Name, rs.UID)
			}
			if o.BlockOwnerDeletion != nil || o.Controller != nil {
				t.Errorf("lease owner %s: blockOwnerDeletion %v, controller %v: want neither (the Lease must not hold its owners up)", o.Name, o.BlockOwnerDeletion, o.Controller)
			}
		}
	}

	t.Run("the first pod's ReplicaSet owns the new Lease", func(t *testing.T) {
		assign(t, podOf(rs1))
		wantOwners(t, rs1)
		assign(t, podOf(rs1))
		wantOwners(t, rs1)
	})
	t.Run("a rollout's new ReplicaSet is added", func(t *testing.T) {
		assign(t, podOf(rs2))
		assign(t, podOf(rs1))
		wantOwners(t, rs1, rs2)
	})
	t.Run("a bare pod adds no owner", func(t *testing.T) {
		assign(t, podOf(nil))
		wantOwners(t, rs1, rs2)
	})
	t.Run("an old Lease without owners gains them", func(t *testing.T) {
		l, err := cs.CoordinationV1().Leases("shop").Get(ctx, leaseName("gmp"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.OwnerReferences = nil
		if _, err := cs.CoordinationV1().Leases("shop").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		assign(t, podOf(rs2))
		wantOwners(t, rs2)
	})
	t.Run("the garbage collector deletes the Lease mid-assignment", func(t *testing.T) {
		// now runs between the assigner's read of the Lease and its
		// update: delete it there once, as the garbage collector would
		// when its owners had gone.
		var deleted atomic.Bool
		gc := &ArmAssigner{Client: cs, now: func() time.Time {
			if !deleted.Swap(true) {
				if err := cs.CoordinationV1().Leases("shop").Delete(ctx, leaseName("gmp"), metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete the lease: %v", err)
				}
			}
			return time.Now()
		}}
		if _, err := gc.Assign(ctx, podOf(rs1), e); err != nil {
			t.Fatalf("the Lease deleted between read and update: %v (want a new Lease)", err)
		}
		if !deleted.Load() {
			t.Fatal("the Lease was never deleted: the test did not test the race")
		}
		wantOwners(t, rs1)
	})
}

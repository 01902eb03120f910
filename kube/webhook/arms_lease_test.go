package webhook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
		// As a Deployment's ReplicaSets: NAME-HASH, the hash in the label.
		sel := map[string]string{"app": "web", "pod-template-hash": name[strings.LastIndex(name, "-")+1:]}
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
			p.Labels = rs.Spec.Template.Labels
		}
		return p
	}
	as := newAssigner(t, cfg)
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
	t.Run("a bare pod is another workload: no arm, no owner", func(t *testing.T) {
		if _, err := as.Assign(ctx, podOf(nil), e); !errors.Is(err, ErrOtherOwner) || !strings.Contains(err.Error(), "Deployment/web") {
			t.Errorf("a bare pod in Deployment web's experiment: %v, want ErrOtherOwner naming Deployment/web", err)
		}
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
		gc := newAssigner(t, cfg)
		gc.now = func() time.Time {
			if !deleted.Swap(true) {
				if err := cs.CoordinationV1().Leases("shop").Delete(ctx, leaseName("gmp"), metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete the lease: %v", err)
				}
			}
			return time.Now()
		}
		if _, err := gc.Assign(ctx, podOf(rs1), e); err != nil {
			t.Fatalf("the Lease deleted between read and update: %v (want a new Lease)", err)
		}
		if !deleted.Load() {
			t.Fatal("the Lease was never deleted: the test did not test the race")
		}
		wantOwners(t, rs1)
	})
}

// TestExperimentKeyedByOwner: two Deployments in one namespace that used
// the same experiment name merged their arms (pods were counted by the
// label alone). The experiment belongs to the first workload now: the
// second's pods get no arm and an error naming the first, the first's
// counts ignore any other workload's pods that carry the label, and once
// the first has no pods left the name passes to the next.
func TestExperimentKeyedByOwner(t *testing.T) {
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
	// podOf is a pod of Deployment deploy's ReplicaSet DEPLOY-abc12, as
	// the ReplicaSet controller creates it (the ReplicaSet need not exist
	// for admission).
	podOf := func(deploy string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: deploy + "-abc12-", Namespace: "shop",
			Labels: map[string]string{"app": deploy, "pod-template-hash": "abc12"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: deploy + "-abc12",
				UID: types.UID("uid-" + deploy), Controller: ptr(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	}
	// store writes the pod with its arm, as the API server would after
	// admission.
	store := func(t *testing.T, p *corev1.Pod, as admission.Assignment) {
		t.Helper()
		p = p.DeepCopy()
		p.Labels[admission.LabelExperiment], p.Labels[admission.LabelArm] = e.Name, as.Arm
		p.Annotations = map[string]string{admission.AnnotationArmTicket: as.Ticket}
		if _, err := cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	as := newAssigner(t, cfg)
	var arms []string
	for range 2 {
		a, err := as.Assign(ctx, podOf("web"), e)
		if err != nil {
			t.Fatal(err)
		}
		store(t, podOf("web"), a)
		arms = append(arms, a.Arm)
	}
	if fmt.Sprint(arms) != "[a b]" {
		t.Fatalf("web's arms %v, want [a b]", arms)
	}
	_, err = as.Assign(ctx, podOf("api"), e)
	if !errors.Is(err, ErrOtherOwner) || !strings.Contains(err.Error(), "Deployment/web") {
		t.Fatalf("Deployment api asking for web's experiment: %v, want ErrOtherOwner naming Deployment/web", err)
	}
	// A pod of api labelled by hand with arm a is not one of web's.
	store(t, podOf("api"), admission.Assignment{Arm: "a", Ticket: "by-hand"})
	a, err := as.Assign(ctx, podOf("web"), e)
	if err != nil {
		t.Fatal(err)
	}
	if a.Arm != "a" { // web has 1 a, 1 b: a tie goes to a
		t.Errorf("web's third pod: arm %s, want a (api's pod counted in web's arms)", a.Arm)
	}
	store(t, podOf("web"), a)
	// web's pods go: the name passes to api.
	if err := cs.CoreV1().Pods("shop").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{LabelSelector: "app=web"}); err != nil {
		t.Fatal(err)
	}
	l, err := cs.CoordinationV1().Leases("shop").Get(ctx, leaseName("gmp"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[annotationPending] = "" // web's assignments on their way are gone too
	if _, err := cs.CoordinationV1().Leases("shop").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "api to get the experiment", 10*time.Second, func() bool {
		a, err := as.Assign(ctx, podOf("api"), e)
		// api has one pod (the stray, arm a): its next is b.
		return err == nil && a.Arm == "b"
	})
}

func ptr[T any](v T) *T { return &v }

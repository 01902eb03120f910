package webhook

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
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
		l, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.ExperimentLease("gmp", "Deployment/web"), metav1.GetOptions{})
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
	t.Run("a bare pod is another workload: its own Lease, no owner", func(t *testing.T) {
		assign(t, podOf(nil))
		wantOwners(t, rs1, rs2)
		l, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.ExperimentLease("gmp", ""), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the bare pods' Lease: %v", err)
		}
		if len(l.OwnerReferences) != 0 || l.Annotations[admission.AnnotationWorkload] != "" {
			t.Errorf("bare pods' Lease: owners %+v, workload %q: want none", l.OwnerReferences, l.Annotations[admission.AnnotationWorkload])
		}
	})
	t.Run("an old Lease without owners gains them", func(t *testing.T) {
		l, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.ExperimentLease("gmp", "Deployment/web"), metav1.GetOptions{})
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
				if err := cs.CoordinationV1().Leases("shop").Delete(ctx, admission.ExperimentLease("gmp", "Deployment/web"), metav1.DeleteOptions{}); err != nil {
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

// TestExperimentPerWorkload: two Deployments in one namespace that used
// the same experiment name merged their arms (pods were counted by the
// label alone), and later the second was refused any arm. An experiment
// is its name within one workload: each Deployment gets its own Lease
// and its arms counted over its own pods only, whatever labels another
// workload's pods carry; an older webhook's Lease (one per name) is kept
// for the workload it names, its guard status with it.
func TestExperimentPerWorkload(t *testing.T) {
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
	// rolloutPod is a pod of Argo Rollout name's ReplicaSet NAME-6c9f.
	rolloutPod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-6c9f-", Namespace: "shop",
			Labels: map[string]string{"app": name, "rollouts-pod-template-hash": "6c9f"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-6c9f",
				UID: types.UID("uid-rollout-" + name), Controller: ptr(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	}
	// store writes the pod with its arm, as the API server would after
	// admission.
	store := func(t *testing.T, exp *admission.Experiment, p *corev1.Pod, as admission.Assignment) {
		t.Helper()
		p = p.DeepCopy()
		p.Labels[admission.LabelExperiment], p.Labels[admission.LabelArm] = exp.Name, as.Arm
		p.Annotations = map[string]string{admission.AnnotationArmTicket: as.Ticket}
		if _, err := cs.CoreV1().Pods("shop").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	as := newAssigner(t, cfg)
	// nextOf admits p for experiment exp through as and stores it.
	nextOf := func(t *testing.T, as *ArmAssigner, exp *admission.Experiment, p *corev1.Pod) string {
		t.Helper()
		a, err := as.Assign(ctx, p, exp)
		if err != nil {
			t.Fatalf("%s: %v", p.GenerateName, err)
		}
		store(t, exp, p, a)
		return a.Arm
	}
	next := func(t *testing.T, deploy string) string {
		t.Helper()
		return nextOf(t, as, e, podOf(deploy))
	}
	arms := func(t *testing.T, n int, f func() string) string {
		t.Helper()
		var got []string
		for range n {
			got = append(got, f())
		}
		return strings.Join(got, " ")
	}
	if got := arms(t, 3, func() string { return next(t, "web") }); got != "a b a" {
		t.Fatalf("web's arms %s, want a b a", got)
	}
	// api runs its own gmp: its first pod starts its own count (with
	// web's 2 a and 1 b it would get b).
	if got := next(t, "api"); got != "a" {
		t.Errorf("api's first pod: arm %s, want a (web's pods counted in api's arms)", got)
	}
	// A pod of api labelled by hand with arm a is api's, not web's.
	store(t, e, podOf("api"), admission.Assignment{Arm: "a", Ticket: "by-hand"})
	if got := next(t, "web"); got != "b" { // web: 2 a, 1 b
		t.Errorf("web's fourth pod: arm %s, want b", got)
	}
	if got := next(t, "api"); got != "b" { // api: 2 a
		t.Errorf("api's third pod: arm %s, want b", got)
	}
	for _, w := range []string{"Deployment/web", "Deployment/api"} {
		l, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.ExperimentLease("gmp", w), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s's Lease: %v", w, err)
		}
		if got := l.Annotations[admission.AnnotationWorkload]; got != w || l.Labels[admission.LabelExperiment] != "gmp" {
			t.Errorf("%s's Lease: workload %q, labels %v", w, got, l.Labels)
		}
	}

	// Older webhooks' Leases: gofit-experiment-NAME, arm b stopped by the
	// guard.
	st := admission.GuardStatus{Stopped: map[string]admission.ArmStop{"b": {At: time.Now().UTC(), Reason: "harmful"}}}
	legacy := func(t *testing.T, exp string, annotations map[string]string) {
		t.Helper()
		annotations[admission.AnnotationGuard] = st.String()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: admission.LegacyExperimentLease(exp), Namespace: "shop",
			Labels: map[string]string{admission.LabelExperiment: exp}, Annotations: annotations}}
		if _, err := cs.CoordinationV1().Leases("shop").Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kept := func(t *testing.T, exp, w string) {
		t.Helper()
		if _, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.ExperimentLease(exp, w), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s got a new Lease for %s (%v): want its older one kept", w, exp, err)
		}
		l, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.LegacyExperimentLease(exp), metav1.GetOptions{})
		if err != nil || l.Annotations[annotationPending] == "" || l.Annotations[admission.AnnotationWorkload] != w {
			t.Errorf("older Lease of %s: %v, annotations %v: want the assignments in it, and %s named", exp, err, l.Annotations, w)
		}
	}
	parse := func(spec string) *admission.Experiment {
		x, err := admission.ParseExperiment(spec)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	// One that names its workload: still that workload's experiment.
	legacy(t, "gmp", map[string]string{admission.AnnotationWorkload: "Deployment/old"})
	if got := arms(t, 2, func() string { return next(t, "old") }); got != "a a" {
		t.Errorf("Deployment old's arms %s, want a a (b stopped in its older Lease)", got)
	}
	kept(t, "gmp", "Deployment/old")
	// One from before Leases named a workload: the experiment of the
	// workload that asks, when no other has live pods of it...
	solo := parse("name: solo\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	legacy(t, "solo", map[string]string{})
	if got := arms(t, 2, func() string { return nextOf(t, as, solo, podOf("lone")) }); got != "a a" {
		t.Errorf("Deployment lone's arms %s, want a a (b stopped in the older Lease)", got)
	}
	kept(t, "solo", "Deployment/lone")
	// ...and not when another has: it gets its own.
	duo := parse("name: duo\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	legacy(t, "duo", map[string]string{})
	store(t, duo, podOf("first"), admission.Assignment{Arm: "b", Ticket: "old-webhook"})
	eventually(t, "the cache to see first's pod", 10*time.Second, func() bool {
		objs, _ := as.caches["shop"].inf.GetIndexer().ByIndex(byExperiment, "duo")
		return len(objs) == 1
	})
	if got := arms(t, 2, func() string { return nextOf(t, as, duo, podOf("second")) }); got != "a b" {
		t.Errorf("Deployment second's arms %s, want a b (its own experiment, b open)", got)
	}
	if _, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.ExperimentLease("duo", "Deployment/second"), metav1.GetOptions{}); err != nil {
		t.Errorf("Deployment second's own Lease: %v", err)
	}

	// An Argo Rollout's pods are one workload, counted from the cache
	// once their assignments have left the Lease.
	ro := newAssigner(t, cfg)
	roll := parse("name: roll\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	if got := arms(t, 3, func() string { return nextOf(t, ro, roll, rolloutPod("shop")) }); got != "a b a" {
		t.Fatalf("Rollout shop's arms %s, want a b a", got)
	}
	eventually(t, "the cache to see the Rollout's pods", 10*time.Second, func() bool {
		objs, _ := ro.caches["shop"].inf.GetIndexer().ByIndex(byExperiment, "roll")
		return len(objs) == 3
	})
	later := time.Now().Add(2 * time.Minute) // every assignment has left the Lease
	ro.now = func() time.Time { return later }
	if got := nextOf(t, ro, roll, rolloutPod("shop")); got != "b" {
		t.Errorf("Rollout shop's fourth pod: arm %s, want b (its 2 a and 1 b not counted)", got)
	}
}

func ptr[T any](v T) *T { return &v }

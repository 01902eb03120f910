package experiment

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gofit-dev/gofit/kube/admission"
)

// TestFindPerWorkload: each Lease is one workload's experiment, judged on
// that workload's pods only; a Lease of an older webhook that names no
// workload is the one workload's whose pods carry the experiment, and is
// left alone (never judged or evicted across workloads) when several do.
func TestFindPerWorkload(t *testing.T) {
	yes := true
	spec := func(name string) string {
		return "name: " + name + "\narms: [{name: a, fit: gofit}, {name: b, fit: none}]"
	}
	pod := func(name, deploy, exp string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
			Labels:          map[string]string{admission.LabelExperiment: exp, admission.LabelArm: "a", "pod-template-hash": "abc12"},
			Annotations:     map[string]string{admission.AnnotationExperiment: spec(exp)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: deploy + "-abc12", Controller: &yes}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	lease := func(name, exp string, annotations map[string]string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
			Labels: map[string]string{admission.LabelExperiment: exp}, Annotations: annotations}}
	}
	cs := fake.NewClientset(
		pod("web-1", "web", "gmp"), pod("api-1", "api", "gmp"), pod("api-2", "api", "gmp"),
		lease(admission.ExperimentLease("gmp", "Deployment/web"), "gmp", map[string]string{admission.AnnotationWorkload: "Deployment/web"}),
		lease(admission.ExperimentLease("gmp", "Deployment/api"), "gmp", map[string]string{admission.AnnotationWorkload: "Deployment/api"}),
		// older webhooks' Leases, naming no workload
		pod("solo-1", "solo", "solo"), lease(admission.LegacyExperimentLease("solo"), "solo", nil),
		pod("x-1", "x", "mixed"), pod("y-1", "y", "mixed"), lease(admission.LegacyExperimentLease("mixed"), "mixed", nil),
	)
	g := &Guard{Client: cs}
	got, err := g.Find(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"gmp Deployment/api": 2, "gmp Deployment/web": 1, "solo Deployment/solo": 1}
	if len(got) != len(want) {
		t.Errorf("found %d experiments, want %d: %+v", len(got), len(want), got)
	}
	for _, r := range got {
		k := r.Spec.Name + " " + r.Workload
		if n, ok := want[k]; !ok || len(r.Pods) != n {
			t.Errorf("experiment %s with %d pods, want %v", k, len(r.Pods), want)
		}
		for _, p := range r.Pods {
			if w := WorkloadOf(&p.ObjectMeta); w != r.Workload {
				t.Errorf("experiment %s judges pod %s of %s", k, p.Name, w)
			}
		}
	}
}

// TestFindInItsNamespaces: with Roles in the experiment namespaces only
// (issue 53, least privilege), a cluster-wide list of Leases is
// forbidden; the guard lists each of its namespaces and no other, and an
// error says which namespace it could not list.
func TestFindInItsNamespaces(t *testing.T) {
	lease := func(ns string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: admission.ExperimentLease("gmp", "Deployment/web"), Namespace: ns,
			Labels: map[string]string{admission.LabelExperiment: "gmp"}, Annotations: map[string]string{admission.AnnotationWorkload: "Deployment/web"}}}
	}
	cs := fake.NewClientset(lease("shop"), lease("kube-system"))
	var listed []string
	cs.PrependReactor("list", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ns := a.GetNamespace()
		listed = append(listed, ns)
		if ns != "shop" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", fmt.Errorf("no Role in %q", ns))
		}
		return false, nil, nil
	})
	g := &Guard{Client: cs, Namespaces: []string{"shop"}}
	got, err := g.Find(context.Background())
	if err != nil {
		t.Fatalf("find in shop: %v", err)
	}
	if fmt.Sprint(listed) != "[shop]" {
		t.Errorf("listed Leases in %q, want shop only", listed)
	}
	for _, r := range got {
		if r.Namespace != "shop" {
			t.Errorf("found an experiment in %s", r.Namespace)
		}
	}
	g.Namespaces = []string{"shop", "web"}
	if _, err := g.Find(context.Background()); err == nil || !strings.Contains(err.Error(), "namespace web") {
		t.Errorf("a namespace without the Role: %v, want an error naming it", err)
	}
}

// TestGuardWritesNoStopIntoANewRun (issue 53): when a new spec starts a
// new run on the Lease between the guard's look and its write (a
// conflict, then the re-read Lease has another run start), the look's
// decision, about the old run, is not written into the new one.
func TestGuardWritesNoStopIntoANewRun(t *testing.T) {
	ctx := context.Background()
	old := time.Unix(1_700_000_000, 0).UTC()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gofit-experiment-g", Namespace: "shop",
		Annotations: map[string]string{admission.AnnotationRun: admission.Run{Specs: []string{"old"}, Start: old}.String()}}}
	cs := fake.NewClientset(l)
	// The webhook's new run, written as the guard looked.
	fresh := l.DeepCopy()
	fresh.Annotations[admission.AnnotationRun] = admission.Run{Specs: []string{"new", "old"}, Start: old.Add(time.Hour)}.String()
	if _, err := cs.CoordinationV1().Leases("shop").Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conflicts := 0
	cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, l.Name, fmt.Errorf("stale"))
		}
		return false, nil, nil
	})
	g := &Guard{Client: cs}
	r := Running{Namespace: "shop", Lease: l, Started: admission.RunStart(&l.ObjectMeta)}
	err := g.update(ctx, r, func(s *admission.GuardStatus) bool {
		s.Stopped = map[string]admission.ArmStop{"b": {At: old, Reason: "harmful"}}
		return true
	})
	if err == nil || !strings.Contains(err.Error(), "new run") {
		t.Errorf("update across runs: %v, want an error saying a new run started", err)
	}
	got, err := cs.CoordinationV1().Leases("shop").Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Annotations[admission.AnnotationGuard]; s != "" {
		t.Errorf("the old run's stop was written into the new run: %s", s)
	}
}

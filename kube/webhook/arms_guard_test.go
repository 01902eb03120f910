package webhook

import (
	"context"
	"fmt"
	"strings"
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
	as := testAssigner(t, cs, &now)
	as.pick = func(int) int { return 0 } // spec order on ties, for the counts below
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

// TestNewSpecStartsFresh (issue 53): an experiment re-created under its
// old name with another spec reused the old Lease's start (so it was
// already past maxDuration) and its stopped arms. A spec the Lease has
// not run starts a new run; a pod with an earlier run's spec (the old
// ReplicaSet's, during a rollout) does not, nor does the current one.
func TestNewSpecStartsFresh(t *testing.T) {
	ctx := context.Background()
	parse := func(s string) *admission.Experiment {
		e, err := admission.ParseExperiment(s)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	first := parse("name: g\nmaxDuration: 1h\narms: [{name: a, fit: gofit}, {name: b, fit: none}, {name: c, env: {GOGC: '50'}}]")
	second := parse("name: g\nmaxDuration: 1h\narms: [{name: a, fit: gofit}, {name: b, fit: none}, {name: c, env: {GOGC: '200'}}]")
	same := parse("name: g\nmaxDuration: 1h\narms:\n  - {name: a, fit: gofit}\n  - {name: b, fit: none}\n  - {name: c, env: {GOGC: '50'}}")
	cs := fake.NewClientset()
	now := time.Unix(1_700_000_000, 0)
	as := testAssigner(t, cs, &now)
	as.pick = func(int) int { return 0 } // spec order on ties, for the counts below
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}
	leases := cs.CoordinationV1().Leases("shop")
	stop := func(arm string) {
		t.Helper()
		l, err := leases.Get(ctx, admission.ExperimentLease("g", ""), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.CreationTimestamp.IsZero() {
			l.CreationTimestamp = metav1.NewTime(now) // the fake stores none
		}
		l.Annotations[admission.AnnotationGuard] = admission.GuardStatus{Stopped: map[string]admission.ArmStop{arm: {At: now, Reason: "harmful"}}}.String()
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	arms := func(e *admission.Experiment, n int) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			a, err := as.Assign(ctx, pod, e)
			if err != nil {
				t.Fatal(err)
			}
			got[a.Arm]++
		}
		return got
	}
	arms(first, 1)
	stop("b")
	if got := arms(same, 2); got["b"] != 0 {
		t.Errorf("the same spec, re-indented: %v, want b still stopped", got)
	}
	now = now.Add(2 * time.Hour) // the first run is over: the control only
	if got := arms(first, 2); got["a"] != 2 {
		t.Errorf("past the first run's maxDuration: %v, want the control only", got)
	}
	// The second spec: a new run, from now, every arm open.
	if got := arms(second, 3); got["a"] != 1 || got["b"] != 1 || got["c"] != 1 {
		t.Errorf("a new spec under the old name: %v, want each arm once", got)
	}
	l, err := leases.Get(ctx, admission.ExperimentLease("g", ""), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Annotations[admission.AnnotationGuard]; ok {
		t.Errorf("the old run's guard status stayed: %s", l.Annotations[admission.AnnotationGuard])
	}
	if s := admission.RunStart(&l.ObjectMeta); !s.Equal(now) {
		t.Errorf("the new run started at %v, want %v", s, now)
	}
	// A pod of the first spec now (the old ReplicaSet's) stays in the
	// second run: b, stopped there, is not reopened.
	stop("b")
	if got := arms(first, 2); got["b"] != 0 {
		t.Errorf("the first spec again: %v, want b still stopped", got)
	}
	if l, err = leases.Get(ctx, admission.ExperimentLease("g", ""), metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if s := admission.RunStart(&l.ObjectMeta); !s.Equal(now) {
		t.Errorf("the run restarted at %v", s)
	}
}

// TestArmAssignerRandomizesTies (issue 53): the assigner breaks ties at
// random (LeastFilled with math/rand/v2), not in spec order: over 30
// new experiments the first pod does not always get the first arm (all
// 30 by chance: 3^-30).
func TestArmAssignerRandomizesTies(t *testing.T) {
	ctx := context.Background()
	as := testAssigner(t, fake.NewClientset(), nil)
	first := map[string]int{}
	for i := range 30 {
		e, err := admission.ParseExperiment(fmt.Sprintf("name: e%d\narms: [{name: a, fit: gofit}, {name: b, fit: none}, {name: c, env: {GOGC: '50'}}]", i))
		if err != nil {
			t.Fatal(err)
		}
		a, err := as.Assign(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}, e)
		if err != nil {
			t.Fatal(err)
		}
		first[a.Arm]++
	}
	if first["a"] == 30 {
		t.Errorf("first arms %v: ties broken in spec order", first)
	}
}

// TestArmAssignerFailsClosed (issue 53): once the guard has not judged an
// experiment for GuardStale, every new pod gets the control, with a note
// that says why; a fresh judgement gives the arms out again.
func TestArmAssignerFailsClosed(t *testing.T) {
	ctx := context.Background()
	e, err := admission.ParseExperiment("name: g\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	now := time.Unix(1_700_000_000, 0)
	as := testAssigner(t, cs, &now)
	as.GuardStale = 15 * time.Minute
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}
	assign := func() map[string]int {
		t.Helper()
		counts := map[string]int{}
		for range 4 {
			a, err := as.Assign(ctx, pod, e)
			if err != nil {
				t.Fatal(err)
			}
			counts[a.Arm]++
			if silent := counts["b"] == 0 && a.Note != ""; a.Note != "" && !silent {
				t.Errorf("arm %s with a note %q", a.Arm, a.Note)
			}
		}
		return counts
	}
	if got := assign(); got["a"] != 2 || got["b"] != 2 {
		t.Errorf("a new run: %v, want both arms", got)
	}
	now = now.Add(16 * time.Minute)
	a, err := as.Assign(ctx, pod, e)
	if err != nil {
		t.Fatal(err)
	}
	if a.Arm != "a" || !strings.Contains(a.Note, "has not judged this experiment") {
		t.Errorf("16 minutes with no look: arm %s, note %q; want the control a and a note", a.Arm, a.Note)
	}
	if got := assign(); got["b"] != 0 {
		t.Errorf("with no look: %v, want the control alone", got)
	}
	leases := cs.CoordinationV1().Leases("shop")
	l, err := leases.Get(ctx, admission.ExperimentLease("g", ""), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	looked := now.Add(-time.Minute)
	l.Annotations[admission.AnnotationGuard] = admission.GuardStatus{Looked: &looked}.String()
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := assign(); got["b"] == 0 {
		t.Errorf("after a look: %v, want b given out again", got)
	}
}

// testAssigner is an ArmAssigner of experiments in shop on cs, with an
// empty metadata client, closed with the test; its clock reads *now (nil:
// the real one).
func testAssigner(t *testing.T, cs *fake.Clientset, now *time.Time) *ArmAssigner {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	as := &ArmAssigner{Client: cs, Metadata: metafake.NewSimpleMetadataClient(scheme), Namespaces: []string{"shop"}}
	if now != nil {
		as.now = func() time.Time { return *now }
	}
	t.Cleanup(as.Close)
	return as
}

package experiment

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gofit-dev/gofit/kube/admission"
)

// TestGuardFailsClosed is issue 53's first item on the guard's side:
// with Prometheus down (the judge fails) or without series, an arm
// already stopped keeps being evicted, and the timestamp of the last
// look that judged every experiment on its data stays where it was, for
// the stale-looks alert. Before, a look returned at the judge's error,
// before the evictions.
func TestGuardFailsClosed(t *testing.T) {
	yes := true
	spec := "name: g\ncontrol: a\narms: [{name: a, fit: gofit}, {name: b, fit: none}]"
	pod := func(name, arm string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", CreationTimestamp: metav1.Now(),
			Labels:          map[string]string{admission.LabelExperiment: "g", admission.LabelArm: arm, "pod-template-hash": "abc12"},
			Annotations:     map[string]string{admission.AnnotationExperiment: spec},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc12", Controller: &yes}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	stopped := admission.GuardStatus{Stopped: map[string]admission.ArmStop{"b": {At: time.Unix(1_700_000_000, 0).UTC(), Reason: "restarts"}}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: admission.ExperimentLease("g", "Deployment/web"), Namespace: "shop",
		Labels:      map[string]string{admission.LabelExperiment: "g"},
		Annotations: map[string]string{admission.AnnotationWorkload: "Deployment/web", admission.AnnotationGuard: stopped.String()}}}
	for _, tc := range []struct {
		name  string
		judge error
		fails bool
	}{
		{"prometheus down", errors.New("prometheus query: connection refused"), true},
		{"no series", ErrNoData, false},
	} {
		cs := fake.NewClientset(pod("web-1", "a"), pod("web-2", "b"), pod("web-3", "b"), lease.DeepCopy())
		var evicted []string
		cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "eviction" {
				return false, nil, nil
			}
			evicted = append(evicted, a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName())
			return true, nil, nil
		})
		reg := prometheus.NewPedanticRegistry()
		g := &Guard{Client: cs, Looks: DefaultLooks(), Metrics: NewGuardMetrics(reg),
			Judge: func(context.Context, Running, *Sequential) (*Results, error) { return nil, tc.judge }}
		g.now = func() time.Time { return time.Unix(1_700_000_600, 0) }
		started := testutil.ToFloat64(g.Metrics.lastLook)
		err := g.Once(context.Background())
		if (err != nil) != tc.fails {
			t.Errorf("%s: look error %v", tc.name, err)
		}
		sort.Strings(evicted)
		if len(evicted) != 2 || evicted[0] != "web-2" || evicted[1] != "web-3" {
			t.Errorf("%s: evicted %v, want the stopped arm's web-2 and web-3", tc.name, evicted)
		}
		if v := testutil.ToFloat64(g.Metrics.lastLook); v != started || v < 1_700_000_000 {
			t.Errorf("%s: last successful look at %v, want the guard's start %v (none judged on data)", tc.name, v, started)
		}
		// Nor does the Lease say the guard judged: the webhook fails
		// closed once it has not for its bound.
		if st := leaseStatus(t, cs); st.Looked != nil {
			t.Errorf("%s: the Lease says the guard judged at %v", tc.name, st.Looked)
		}
	}
	// A look with data moves it.
	cs := fake.NewClientset(pod("web-1", "a"), lease.DeepCopy())
	g := &Guard{Client: cs, Looks: DefaultLooks(), Metrics: NewGuardMetrics(prometheus.NewPedanticRegistry()),
		Judge: func(context.Context, Running, *Sequential) (*Results, error) { return nil, nil }}
	g.now = func() time.Time { return time.Unix(1_700_000_600, 0) }
	if err := g.Once(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(g.Metrics.lastLook); v != 1_700_000_600 {
		t.Errorf("last successful look at %v, want 1700000600", v)
	}
	if st := leaseStatus(t, cs); st.Looked == nil || st.Looked.Unix() != 1_700_000_600 || len(st.Stopped) != 1 {
		t.Errorf("the Lease's guard status after a judged look: %+v, want looked at 1700000600 and b still stopped", st)
	}
}

func leaseStatus(t *testing.T, cs kubernetes.Interface) admission.GuardStatus {
	t.Helper()
	return guardStatusOf(t, cs, admission.ExperimentLease("g", "Deployment/web"))
}

// guardStatusOf is the guard status on the Lease name in shop.
func guardStatusOf(t *testing.T, cs kubernetes.Interface, name string) admission.GuardStatus {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := admission.ParseGuardStatus(l.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

package webhook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// TestGuardRightsOnARealAPIServer applies the experiments component's
// RBAC and Lease policies to a real API server and acts as the
// experiment guard's service account (issue 53, least privilege): in
// the experiment namespace (default) it lists and updates its
// experiment's Lease, lists pods and evicts one; it may not update
// kube-system's kube-scheduler Lease or evict a kube-system pod (a
// ClusterRole let a leaked token do both); and the policy refuses it any
// Lease but gofit-experiment-* and its own leader election's.
func TestGuardRightsOnARealAPIServer(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gofit-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, deployDir())
	if err != nil {
		t.Fatal(err)
	}
	k := "resources: [" + rel + "/self-managed]\ncomponents: [" + rel + "/experiments]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, o := range renderDir(t, dir) {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ServiceAccount":
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	// What the guard would take over: kube-system's scheduler election,
	// a pod there; and an experiment of its own, with a pod, in default.
	now := metav1.NewMicroTime(time.Now())
	for _, l := range []*coordinationv1.Lease{
		{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: "kube-system"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("scheduler-1"), RenewTime: &now}},
		{ObjectMeta: metav1.ObjectMeta{Name: "web-leader", Namespace: "default"}},
		{ObjectMeta: metav1.ObjectMeta{Name: admission.ExperimentLease("gmp", "Deployment/web"), Namespace: "default", Labels: map[string]string{admission.LabelExperiment: "gmp"}}},
	} {
		if _, err := cs.CoordinationV1().Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"kube-system", "default"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	gcfg := rest.CopyConfig(cfg)
	gcfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:gofit-system:gofit-experiment-guard",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:gofit-system", "system:authenticated"},
	}
	guard := kubernetes.NewForConfigOrDie(gcfg)
	leases := func(ns string) func(string) error {
		return func(name string) error {
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			l.Spec.HolderIdentity = ptr("gofit-experiment-guard")
			_, err = guard.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}
	}
	evict := func(ns string) error {
		return guard.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns}})
	}

	// Forbidden outside its namespaces, whatever the policy's state.
	if err := leases("kube-system")("kube-scheduler"); !apierrors.IsForbidden(err) {
		t.Errorf("update kube-system/kube-scheduler's Lease as the guard: %v, want forbidden", err)
	}
	if err := evict("kube-system"); !apierrors.IsForbidden(err) {
		t.Errorf("evict a kube-system pod as the guard: %v, want forbidden", err)
	}
	if _, err := guard.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list Leases cluster-wide as the guard: %v, want forbidden", err)
	}
	// The policy takes a moment to be loaded: until another Lease in
	// default is refused by it (RBAC alone grants update on every Lease
	// of the namespace).
	eventually(t, "the Lease policy to refuse the guard a Lease of another name", 30*time.Second, func() bool {
		err := leases("default")("web-leader")
		if err == nil {
			return false
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "gofit-experiment-") {
			t.Fatalf("update default/web-leader as the guard: %v, want the policy's refusal", err)
		}
		return true
	})
	// What the guard does, in its namespace: it works.
	if l, err := guard.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{LabelSelector: admission.LabelExperiment}); err != nil || len(l.Items) != 1 {
		t.Errorf("list experiment Leases in default as the guard: %v", err)
	}
	if err := leases("default")(admission.ExperimentLease("gmp", "Deployment/web")); err != nil {
		t.Errorf("update its experiment's Lease in default as the guard: %v", err)
	}
	if _, err := guard.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods in default as the guard: %v", err)
	}
	if err := evict("default"); err != nil {
		t.Errorf("evict a pod in default as the guard: %v", err)
	}
	// Its leader election, in its own namespace only.
	leader := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: admission.GuardLeaderLease}}
	if _, err := guard.CoordinationV1().Leases("gofit-system").Create(ctx, leader, metav1.CreateOptions{}); err != nil {
		t.Errorf("create its leader Lease as the guard: %v", err)
	}
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gofit-webhook-cert-rotator"}}
	if _, err := guard.CoordinationV1().Leases("gofit-system").Create(ctx, other, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "guard writes only") {
		t.Errorf("create the webhook's rotator Lease as the guard: %v, want the policy's refusal", err)
	}
}

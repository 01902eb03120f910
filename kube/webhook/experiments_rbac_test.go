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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/internal/kubetest"
)

// TestExperimentsRightsOnARealAPIServer applies the experiments
// component's Role, RoleBinding and Lease policy to a real API server and
// acts as the webhook's service account: it assigns arms in the
// namespace granted (pods read as metadata, its Lease written), may not
// read pods or write Leases anywhere else (kube-node-lease's heartbeats,
// kube-system's leader elections), and the ValidatingAdmissionPolicy
// refuses it any Lease in the granted namespace but gofit-experiment-*.
func TestExperimentsRightsOnARealAPIServer(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"gofit-system", "kube-node-lease"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
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
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	sa := asServiceAccount(cfg)
	saCS := kubernetes.NewForConfigOrDie(sa)
	lease := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	// The policy takes a moment to be loaded: until a non-experiment
	// Lease in default is refused by it.
	eventually(t, "the Lease policy to refuse the webhook a Lease of another name", 30*time.Second, func() bool {
		_, err := saCS.CoordinationV1().Leases("default").Create(ctx, lease("kube-scheduler"), metav1.CreateOptions{})
		if err == nil {
			_ = cs.CoordinationV1().Leases("default").Delete(ctx, "kube-scheduler", metav1.DeleteOptions{})
			return false
		}
		if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "gofit-experiment-") {
			t.Fatalf("a Lease of another name: %v, want the policy's refusal", err)
		}
		return true
	})
	// The guard's leader Lease is not the webhook's to write, in any
	// namespace it may run experiments in (issue 51, item 8: it was
	// gofit-experiment-guard, inside the policy's prefix).
	if _, err := saCS.CoordinationV1().Leases("default").Create(ctx, lease(admission.GuardLeaderLease), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "gofit-experiment-") {
		t.Errorf("the guard's leader Lease %s as the webhook: %v, want the policy's refusal", admission.GuardLeaderLease, err)
	}
	for _, ns := range []string{"kube-node-lease", "kube-system"} {
		if _, err := saCS.CoordinationV1().Leases(ns).Create(ctx, lease("gofit-experiment-x"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("a Lease in %s: %v, want forbidden", ns, err)
		}
		if _, err := saCS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list pods in %s: %v, want forbidden", ns, err)
		}
	}
	// What arm assignment does, as the account: it works in default.
	as := &ArmAssigner{Client: saCS, Metadata: metadata.NewForConfigOrDie(sa), Namespaces: []string{"default"}}
	t.Cleanup(as.Close)
	e, err := admission.ParseExperiment("name: gmp\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := as.Assign(actx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}}, e); err != nil {
			t.Fatalf("assignment %d as the webhook's account: %v", i, err)
		}
	}
	if _, err := as.Assign(actx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system"}}, e); err == nil || !strings.Contains(err.Error(), "not enabled in namespace kube-system") {
		t.Errorf("an experiment in kube-system: %v", err)
	}
}

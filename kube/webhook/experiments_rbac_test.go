package webhook

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
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

	// A forged review (issue 51, item 1): its pod names a ReplicaSet that
	// does not exist, or a real one's name with another UID. Nothing is
	// written: no Lease, no arm. A pod of the real ReplicaSet gets its arm,
	// the account's Role sufficing to check it.
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-5d8f7", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}}}
	rs, err = cs.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podOf := func(name string, uid types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Labels: map[string]string{"pod-template-hash": "5d8f7"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name, UID: uid, Controller: ptr(true)}}}}
	}
	for what, p := range map[string]*corev1.Pod{
		"a ReplicaSet that does not exist":      podOf("steal2-abc12", "forged-uid"),
		"a real ReplicaSet's name, another UID": podOf(rs.Name, "forged-uid"),
	} {
		if _, err := as.Assign(actx, p, e); !errors.Is(err, ErrUnverifiedOwner) {
			t.Errorf("%s: %v, want ErrUnverifiedOwner", what, err)
		}
	}
	leases, err := cs.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if w := l.Annotations[admission.AnnotationWorkload]; strings.Contains(w, "steal2") || strings.Contains(w, "web") {
			t.Errorf("Lease %s written for a forged review's workload %q", l.Name, w)
		}
	}
	// With no namespace list, a forged review starts no cache anywhere;
	// a bare pod there is refused too.
	open := &ArmAssigner{Client: saCS, Metadata: metadata.NewForConfigOrDie(sa)}
	t.Cleanup(open.Close)
	if _, err := open.Assign(actx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}}, e); !errors.Is(err, ErrUnverifiedOwner) {
		t.Errorf("a bare pod without a namespace list: %v, want ErrUnverifiedOwner", err)
	}
	if _, err := open.Assign(actx, podOf("steal2-abc12", "forged-uid"), e); !errors.Is(err, ErrUnverifiedOwner) {
		t.Errorf("a forged owner without a namespace list: %v, want ErrUnverifiedOwner", err)
	}
	open.mu.Lock()
	if len(open.caches) != 0 {
		t.Errorf("forged reviews started caches in %d namespaces", len(open.caches))
	}
	open.mu.Unlock()
	if a, err := as.Assign(actx, podOf(rs.Name, rs.UID), e); err != nil || a.Arm == "" {
		t.Errorf("a pod of the real ReplicaSet: %v %v", a, err)
	}
}

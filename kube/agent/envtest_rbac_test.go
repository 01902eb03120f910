package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gofit-dev/gofit/kube/internal/kubetest"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// rbacEnv starts an API server, creates node-a (4Gi allocatable) and gives
// back an admin client and a client for a user with only the given rules.
func rbacEnv(t *testing.T, rules []rbacv1.PolicyRule) (admin, agent kubernetes.Interface) {
	t.Helper()
	env := &envtest.Environment{}
	cfg := kubetest.Start(t, env)
	var err error
	if admin, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if node, err = admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gofit-node-test"}, Rules: rules}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gofit-node-test"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "gofit-node"}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "gofit-node"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if agent, err = kubernetes.NewForConfig(user.Config()); err != nil {
		t.Fatal(err)
	}
	return admin, agent
}

// TestEnvtestConfigMapForbidden: with a Role that does not cover the ConfigMap's
// namespace (here: a namespace that does not exist) the agent waited for
// a cache that never synced, while /healthz said ok. It now reconciles on
// the defaults and says why.
func TestEnvtestConfigMapForbidden(t *testing.T) {
	admin, cs := rbacEnv(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ls", Namespace: "shop"}, Spec: corev1.PodSpec{NodeName: "node-a",
		Containers: []corev1.Container{{Name: "app", Image: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")}}}}}}
	pod, err := admin.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "containerd://abc"}}}
	if _, err := admin.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	mem := filepath.Join(root, "sys/fs/cgroup")
	layout := &Layout{Version: 2, Driver: DriverCgroupfs, Mount: mem, Kubepods: "/kubepods"}
	cd := filepath.Join(mem, filepath.FromSlash(layout.PodPath(corev1.PodQOSBurstable, pod.UID)), "abc")
	for _, d := range []string{filepath.Join(mem, "kubepods"), filepath.Join(mem, "kubepods/burstable"), filepath.Dir(cd), cd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"memory.min", "memory.low"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte("0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	a := New(layout, Options{Policy: memqos.PolicyAuto})
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, cs, Source{NodeName: "node-a", ConfigMapNamespace: "no-such-namespace", Interval: time.Second})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	// The pod's memory.low: the container's is the kubelet's (v1.37, the
	// newest known, for a node without a kubelet version).
	file := filepath.Join(filepath.Dir(cd), "memory.low")
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(file)
		if got = strings.TrimSpace(string(b)); got == "104857600" {
			break
		}
	}
	if got != "104857600" {
		t.Fatalf("no reconcile with the ConfigMap forbidden: memory.low = %s", got)
	}
	// The pass records itself after its writes: the file can show the
	// value a moment before /healthz knows of the pass.
	var text string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if text, err = a.Health(time.Now(), time.Minute); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("health: %v", err)
	} else {
		t.Log(text)
	}
}

// TestEnvtestSyncTimeout: without the right to list pods the agent waited
// forever; it now fails after SyncTimeout, naming what it could not list
// and the API server's answer.
func TestEnvtestSyncTimeout(t *testing.T) {
	_, cs := rbacEnv(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}})
	layout := &Layout{Version: 2, Driver: DriverCgroupfs, Mount: t.TempDir(), Kubepods: "/kubepods"}
	a := New(layout, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := a.Run(ctx, cs, Source{NodeName: "node-a", SyncTimeout: 3 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "pods on node node-a") || !strings.Contains(err.Error(), "forbidden") ||
		strings.Contains(err.Error(), "and node node-a") {
		t.Errorf("run: %v, want an error naming the pods list (forbidden) and not the node", err)
	}
	if ctx.Err() != nil {
		t.Error("Run waited for the test's deadline")
	}
	if _, err := a.Health(time.Now(), time.Minute); err == nil {
		t.Error("healthy without ever reconciling")
	}
}

package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gofit-dev/gofit/kube/kubetest"
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

// TestEnvtestConfigMapUnreadable: a ConfigMap the agent may not read
// (403: the Role does not cover its namespace) or that does not exist
// (404) used to mean the defaults, whose first pass writes min 0, low 0
// and high max to every pod, while /healthz said ok (issue 51, item 3).
// Both are now a bad ConfigMap: nothing is written, /healthz answers 503
// naming it, gofit_node_config_unreadable is 1. Only NoConfigMap (the
// --no-configmap flag) runs on the defaults.
func TestEnvtestConfigMapUnreadable(t *testing.T) {
	admin, cs := rbacEnv(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}}})
	ctx := context.Background()
	for _, ns := range []string{"shop", "gofit-node"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The agent may read ConfigMaps in gofit-node, where there is none.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "config", Namespace: "gofit-node"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := admin.RbacV1().Roles("gofit-node").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "config", Namespace: "gofit-node"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "config"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "gofit-node"}}}
	if _, err := admin.RbacV1().RoleBindings("gofit-node").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
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
	// What a good configuration wrote before the restart.
	const before = "52428800"
	for _, d := range []string{filepath.Join(mem, "kubepods"), filepath.Join(mem, "kubepods/burstable"), filepath.Dir(cd), cd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"memory.min", "memory.low"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(before+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	file := filepath.Join(filepath.Dir(cd), "memory.low")
	read := func() string { b, _ := os.ReadFile(file); return strings.TrimSpace(string(b)) }

	run := func(t *testing.T, src Source, check func(t *testing.T, a *Agent, m *Metrics)) {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		a := New(layout, Options{Policy: memqos.PolicyAuto, Metrics: m})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(rctx, cs, src) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		check(t, a, m)
	}
	refused := func(why string) func(t *testing.T, a *Agent, m *Metrics) {
		return func(t *testing.T, a *Agent, m *Metrics) {
			// Three passes written off for the bad ConfigMap, then look.
			deadline := time.Now().Add(30 * time.Second)
			for testutil.ToFloat64(m.skipped.WithLabelValues(SkipBadConfig)) < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("no pass written off for the %s ConfigMap; memory.low = %s", why, read())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got := read(); got != before {
				t.Errorf("memory.low = %s with the ConfigMap %s, want %s kept", got, why, before)
			}
			_, err := a.Health(time.Now(), time.Minute)
			if err == nil || !errors.Is(err, ErrConfigUnreadable) && !strings.Contains(err.Error(), "unreadable") || !strings.Contains(err.Error(), "nothing under kubepods is written") {
				t.Errorf("health with the ConfigMap %s: %v, want 503 naming it", why, err)
			} else {
				t.Log(err)
			}
			if v := testutil.ToFloat64(m.unreadable); v != 1 {
				t.Errorf("gofit_node_config_unreadable = %v with the ConfigMap %s", v, why)
			}
			if v := testutil.ToFloat64(m.defaults); v != 0 {
				t.Errorf("gofit_node_config_defaults = %v with the ConfigMap %s", v, why)
			}
		}
	}
	t.Run("forbidden", func(t *testing.T) {
		run(t, Source{NodeName: "node-a", ConfigMapNamespace: "koordinator-system", Interval: 200 * time.Millisecond, MinGap: time.Millisecond}, refused("forbidden"))
	})
	t.Run("missing", func(t *testing.T) {
		run(t, Source{NodeName: "node-a", ConfigMapNamespace: "gofit-node", Interval: 200 * time.Millisecond, MinGap: time.Millisecond}, refused("missing"))
	})
	t.Run("no-configmap", func(t *testing.T) {
		// The administrator's explicit choice: the defaults, and --policy
		// auto protects the pod up to its request.
		run(t, Source{NodeName: "node-a", NoConfigMap: true, Interval: 200 * time.Millisecond, MinGap: time.Millisecond}, func(t *testing.T, a *Agent, m *Metrics) {
			var got string
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if got = read(); got == "104857600" {
					break
				}
			}
			if got != "104857600" {
				t.Fatalf("memory.low = %s with --no-configmap, want 104857600", got)
			}
			if v := testutil.ToFloat64(m.defaults); v != 1 {
				t.Errorf("gofit_node_config_defaults = %v with --no-configmap", v)
			}
		})
	})
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

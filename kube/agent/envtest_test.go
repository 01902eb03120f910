package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/kubetest"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// TestEnvtest runs the agent against a real kube-apiserver: pods bound to
// the node, with container IDs set through the status subresource, are
// discovered and their cgroups (a fixture tree) reconciled; a ConfigMap
// change and a pod deletion are followed.
func TestEnvtest(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"pool": "web"}}}
	if node, err = cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")}
	node.Status.Capacity = node.Status.Allocatable
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"shop", "batch", "koordinator-system"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The fixture's pods, created for real: the API server assigns new
	// UIDs, so the tree is laid out after creation.
	fixture, err := ReadPodList("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	mem := filepath.Join(root, "sys/fs/cgroup")
	write := func(p, v string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(mem, "cgroup.controllers"), "cpu memory\n")
	layout := &Layout{Version: 2, Driver: DriverCgroupfs, Mount: mem, Kubepods: "/kubepods"}
	for _, d := range []string{"kubepods", "kubepods/burstable", "kubepods/besteffort"} {
		write(filepath.Join(mem, d, "memory.min"), "0")
		write(filepath.Join(mem, d, "memory.low"), "0")
	}
	containerDir := map[string]string{}
	for _, fp := range fixture {
		if fp.Status.Phase != corev1.PodRunning {
			continue
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fp.Name, Namespace: fp.Namespace, Labels: fp.Labels, Annotations: fp.Annotations},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: fp.Spec.Containers}}
		p, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: fp.Status.ContainerStatuses}
		if p, err = cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if p.Status.QOSClass == "" {
			t.Logf("pod %s: no status.qosClass; computed from the spec", p.Name)
		}
		pd := filepath.Join(mem, filepath.FromSlash(layout.PodPath(memqos.KubeQoS(p), p.UID)))
		_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
		if strings.HasPrefix(p.Status.ContainerStatuses[0].ContainerID, "cri-o://") {
			id = "crio-" + id
		}
		cd := filepath.Join(pd, id)
		for _, d := range []string{pd, cd} {
			write(filepath.Join(d, "memory.min"), "0")
			write(filepath.Join(d, "memory.low"), "0")
		}
		write(filepath.Join(cd, "memory.high"), "max")
		write(filepath.Join(pd, "cgroup.events"), "populated 1\nfrozen 0\n")
		containerDir[p.Name] = cd
	}
	// A pod on another node must be ignored.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "shop"},
		Spec: corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if _, err := cs.CoreV1().Pods("shop").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// An empty ConfigMap: the defaults, named. (A missing one is a bad
	// one: the agent would write nothing.)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "slo-controller-config", Namespace: "koordinator-system"}}
	if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := New(layout, Options{Policy: memqos.PolicyAuto, ResetAfter: 2 * time.Second})
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, cs, Source{NodeName: "node-a", Interval: time.Second})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	waitFor := func(file, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var got string
		for time.Now().Before(deadline) {
			b, _ := os.ReadFile(file)
			if got = strings.TrimSpace(string(b)); got == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s = %q, want %q", file, got, want)
	}
	// auto: the LS pod is protected up to its request, and its container's
	// memory.high clears GOMEMLIMIT (180MiB) plus the non-Go budget. The
	// node has no kubelet version: taken as the newest known (v1.37), whose
	// MemoryQoS writes containers' memory.min and memory.low, so the agent
	// leaves those alone.
	waitFor(filepath.Join(filepath.Dir(containerDir["ls"]), "memory.low"), "104857600")
	waitFor(filepath.Join(containerDir["ls"], "memory.high"), "200540160")
	waitFor(filepath.Join(mem, "kubepods/burstable/memory.low"), "104857600")
	waitFor(filepath.Join(containerDir["be"], "memory.high"), "2147483648")
	if got := strings.TrimSpace(readFile(t, filepath.Join(containerDir["ls"], "memory.low"))); got != "0" {
		t.Errorf("container memory.low %s: the kubelet's (v1.37 MemoryQoS), want it left at 0", got)
	}

	// koordinator's ConfigMap sets BE throttling through a node strategy
	// matching this node's labels; the BE pod follows it once its
	// annotation asks for the default policy instead of --policy auto.
	cm.Data = map[string]string{memqos.ConfigKey: `{"nodeStrategies":[{"nodeSelector":{"matchLabels":{"pool":"web"}},"beClass":{"memoryQOS":{"enable":true,"throttlingPercent":25}}}]}`}
	if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	annotate := func(v string) {
		t.Helper()
		be, err := cs.CoreV1().Pods("batch").Get(ctx, "be", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		be.Annotations = map[string]string{memqos.AnnotationMemoryQOS: v}
		if _, err := cs.CoreV1().Pods("batch").Update(ctx, be, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotate(`{"policy":"default"}`)
	waitFor(filepath.Join(containerDir["be"], "memory.high"), "1073741824") // 25% of 4Gi
	// Policy none gives up protection, but a BE pod never lifts its own
	// throttle: memory.high goes back to what its class gives it (--policy
	// auto: half of allocatable), not to max.
	annotate(`{"policy":"none"}`)
	waitFor(filepath.Join(containerDir["be"], "memory.high"), "2147483648")

	// Deleting the LS pod drops it from the sums.
	zero := int64(0)
	if err := cs.CoreV1().Pods("shop").Delete(ctx, "ls", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	// While the kubelet still runs it, it keeps its values, and the sums
	// above it still count them.
	time.Sleep(3 * time.Second) // past ResetAfter
	for _, f := range []string{filepath.Join(filepath.Dir(containerDir["ls"]), "memory.low"), filepath.Join(mem, "kubepods/burstable/memory.low")} {
		if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) != "104857600" {
			t.Errorf("%s = %s while the kubelet still runs the deleted pod", f, b)
		}
	}
	// Once its cgroup is empty it gets the kernel defaults back.
	write(filepath.Join(filepath.Dir(containerDir["ls"]), "cgroup.events"), "populated 0\nfrozen 0\n")
	waitFor(filepath.Join(mem, "kubepods/burstable/memory.low"), "0")
	waitFor(filepath.Join(filepath.Dir(containerDir["ls"]), "memory.low"), "0")
}

func readFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

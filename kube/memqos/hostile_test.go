package memqos

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// compute runs Compute and fails the test on an error.
func compute(t *testing.T, in Input) Result {
	t.Helper()
	res, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestHugeLimit: a Burstable pod with limits.memory 1Ei (the kubelet admits
// it) overflowed the arithmetic: negative memory.min, a memory.high below
// its request, negative class sums, and the node cap switched off for
// everyone else.
func TestHugeLimit(t *testing.T) {
	s := cfg(t, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":100,"lowLimitPercent":100,"throttlingPercent":80}}}}`)
	huge := mkPod("huge", nil, nil, corev1.PodRunning, ctr{name: "app", req: "100Mi", lim: "1Ei"})
	hugeReq := mkPod("hugereq", nil, nil, corev1.PodRunning, ctr{name: "app", req: "1Ei", lim: "1Ei"})
	// Reading these as bytes rescales by 10^9999999920: without qty.Tame
	// the pass works for minutes in math/big.
	hugeExp := mkPod("huge", nil, nil, corev1.PodRunning, ctr{name: "app", req: "100Mi", lim: "1e9999999920"})
	hugeExpReq := mkPod("hugeexpreq", nil, nil, corev1.PodRunning, ctr{name: "app", req: "1e9999999920", lim: "2e9999999920"})
	var pods []*corev1.Pod
	for _, n := range []string{"a", "b", "c"} {
		pods = append(pods, mkPod(n, nil, nil, corev1.PodRunning, ctr{name: "c", req: "6Gi", lim: "8Gi"}))
	}
	for _, extra := range []*corev1.Pod{huge, hugeReq, hugeExp, hugeExpReq} {
		in := Input{Pods: append([]*corev1.Pod{extra}, pods...), Strategy: s, NodeAllocatable: 16 * gi, CgroupVersion: 2}
		res := compute(t, in)
		if err := checkRule(in, res); err != nil {
			t.Errorf("with %s: %v", extra.Name, err)
		}
		for _, p := range res.Pods {
			if p.Name != "huge" {
				continue
			}
			c := p.Containers[0].Settings
			if h := get(t, c, FileHigh); h != manage.Unlimited && h < 100*mi {
				t.Errorf("huge: memory.high %d below its 100Mi request", h)
			}
			if m := get(t, c, FileMin); m <= 0 {
				t.Errorf("huge: memory.min %d, want its request protected", m)
			}
		}
	}
}

// TestBestEffortEscape: a BestEffort pod's GOMEMLIMIT (env or a forged
// plan annotation) raised its memory.high far past the node: the Go-aware
// raise was bounded by the limit, and a BE pod has none.
func TestBestEffortEscape(t *testing.T) {
	env := mkPod("env", nil, nil, corev1.PodRunning, ctr{name: "hog", env: map[string]string{"GOMEMLIMIT": "1TiB"}})
	forged := mkPod("forged", nil, map[string]string{podplan.Annotation: `{"containers":[{"name":"hog","env":{"GOMEMLIMIT":"1099511627776"}}]}`},
		corev1.PodRunning, ctr{name: "hog"})
	limited := mkPod("limited", nil, nil, corev1.PodRunning, ctr{name: "hog", env: map[string]string{"GOMEMLIMIT": "3GiB"}})
	limited.Labels = map[string]string{LabelQoSClass: "BE"}
	limited.Spec.Containers[0].Resources.Limits[ResourceBatchMemory] = resource.MustParse("4Gi")
	in := Input{Pods: []*corev1.Pod{env, forged, limited}, Policy: PolicyAuto, NodeAllocatable: 16 * gi, CgroupVersion: 2}
	res := compute(t, in)
	if err := checkRule(in, res); err != nil {
		t.Error(err)
	}
	for _, p := range res.Pods {
		if p.Class != BE {
			t.Fatalf("%s: class %s", p.Name, p.Class)
		}
		h := get(t, p.Containers[0].Settings, FileHigh)
		want := 8 * gi // half of allocatable: the BE throttle of the auto profile
		if p.Name == "limited" {
			want = 2 * gi // half of its batch-memory limit
		}
		if h != want {
			s, _ := settingOf(p.Containers[0].Settings, FileHigh)
			t.Errorf("%s: BE memory.high %d, want %d whatever its GOMEMLIMIT (%s)", p.Name, h, want, s.Reason)
		}
	}
}

// TestDuplicateEnv: with two GOMEMLIMIT entries the kubelet passes the
// last to the container, so the agent must read the last.
func TestDuplicateEnv(t *testing.T) {
	pod := mkPod("dup", nil, nil, corev1.PodRunning, ctr{name: "app", req: "256Mi", lim: "1Gi"})
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "100MiB"}, {Name: "GOMEMLIMIT", Value: "900MiB"}}
	v, _, ok := GoMemLimit(pod, &pod.Spec.Containers[0])
	if !ok || v != 900*mi {
		t.Errorf("GOMEMLIMIT %d (ok %v), want the last entry's 900MiB", v, ok)
	}
	// The last entry from a secret or the downward API: unknown, not the
	// earlier literal.
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "900MiB"},
		{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	if v, src, ok := GoMemLimit(pod, &pod.Spec.Containers[0]); ok {
		t.Errorf("GOMEMLIMIT %d from %s, want unknown (the last entry is not a literal)", v, src)
	}
}

// TestSystemRelabel: a pod relabelled SYSTEM kept the min/low it was
// given, outside the sums and the cap. Its values go back to the kernel
// defaults.
func TestSystemRelabel(t *testing.T) {
	pod := mkPod("sys", map[string]string{LabelQoSClass: "SYSTEM"}, nil, corev1.PodRunning, ctr{name: "c", req: "1Gi", lim: "2Gi"})
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Policy: PolicyAuto, NodeAllocatable: 8 * gi, CgroupVersion: 2})
	if len(res.Pods) != 1 {
		t.Fatalf("SYSTEM pod not planned: its old protection would stay forever (%+v)", res.Pods)
	}
	p := res.Pods[0]
	if p.Class != SYSTEM || p.Policy != PolicyNone {
		t.Errorf("class %s policy %s", p.Class, p.Policy)
	}
	if get(t, p.Settings, FileMin) != 0 || get(t, p.Settings, FileLow) != 0 || get(t, p.Containers[0].Settings, FileLow) != 0 ||
		get(t, p.Containers[0].Settings, FileHigh) != manage.Unlimited {
		t.Errorf("SYSTEM pod not restored: %+v %+v", p.Settings, p.Containers[0].Settings)
	}
	if get(t, res.Kubepods, FileLow) != 0 {
		t.Errorf("SYSTEM pod counted in the sums")
	}
}

// mirrorOf makes pod a mirror pod of node as the kubelet makes it: the
// static pod's UID in the annotation, controlled by the Node object.
func mirrorOf(pod *corev1.Pod, node NodeID, staticUID string) *corev1.Pod {
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationMirror] = staticUID
	pod.Spec.NodeName = node.Name
	yes := true
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &yes}}
	return pod
}

// TestStaticPod: the kubelet names a static pod's cgroup after the pod's
// own UID, which the mirror pod in the API carries as the
// kubernetes.io/config.mirror annotation, not as its metadata.uid.
func TestStaticPod(t *testing.T) {
	node := NodeID{Name: "n1", UID: "node-uid-1"}
	pod := mirrorOf(mkPod("etcd", nil, nil, corev1.PodRunning, ctr{name: "etcd", req: "100Mi"}), node, "d8a9c5b9f8e7a6b5c4d3e2f1a0b9c8d7")
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Policy: PolicyAuto, NodeAllocatable: 8 * gi, Node: node})
	if got := res.Pods[0].UID; got != "d8a9c5b9f8e7a6b5c4d3e2f1a0b9c8d7" {
		t.Errorf("static pod planned for UID %s, want the mirror annotation's", got)
	}
	// A value that is not a UID the kubelet could have made is ignored.
	pod.Annotations[AnnotationMirror] = "../../x"
	if got := CgroupUID(pod, node); got != pod.UID {
		t.Errorf("bad mirror annotation gave UID %q", got)
	}
}

// TestForgedMirror: any user who may create pods can write the mirror
// annotation. It used to send the forger's plan into the victim's cgroup;
// now it is followed only for mirror pods the node's kubelet made, and two
// API pods on one cgroup are both left alone and reported.
func TestForgedMirror(t *testing.T) {
	node := NodeID{Name: "n1", UID: "node-uid-1"}
	victim := mkPod("victim", nil, nil, corev1.PodRunning, ctr{name: "app", req: "64Mi", lim: "4Gi"})
	forger := func() *corev1.Pod {
		return mkPod("forger", nil, map[string]string{AnnotationMirror: string(victim.UID)}, corev1.PodRunning, ctr{name: "app", req: "2Gi", lim: "4Gi"})
	}
	cfg := Strategy{LSClass: &ResourceQOS{MemoryQOS: &MemoryQOSCfg{Enable: ptr(true), MemoryQOS: MemoryQOS{MinLimitPercent: ptr(int64(100))}}}}
	minOf := func(res Result, uid types.UID) int64 {
		for _, p := range res.Pods {
			if p.UID == uid {
				return get(t, p.Settings, FileMin)
			}
		}
		return -1
	}
	// No owner reference: the annotation is the forger's word only.
	plain := forger()
	res := compute(t, Input{Pods: []*corev1.Pod{victim, plain}, Strategy: cfg, NodeAllocatable: 8 * gi, Node: node,
		PodOverrides: &PodOverrides{}})
	if got := minOf(res, victim.UID); got != 64<<20 {
		t.Errorf("victim's memory.min %d, want its own 64Mi", got)
	}
	if got := minOf(res, plain.UID); got != 2<<30 {
		t.Errorf("forger planned under its own UID: memory.min %d, want 2Gi", got)
	}
	// A forged owner reference naming another node, or this node with the
	// wrong UID, is not the kubelet's either.
	for _, n := range []NodeID{{Name: "n2", UID: node.UID}, {Name: node.Name, UID: "other"}} {
		p := mirrorOf(forger(), n, string(victim.UID))
		p.Spec.NodeName = node.Name
		if got := CgroupUID(p, node); got != p.UID {
			t.Errorf("owner %+v: annotation followed to %s", n, got)
		}
	}
	// Even an owner reference that passes (the node's UID is readable)
	// cannot take the victim's cgroup: both are skipped and reported.
	owned := mirrorOf(forger(), node, string(victim.UID))
	res = compute(t, Input{Pods: []*corev1.Pod{victim, owned}, Strategy: cfg, NodeAllocatable: 8 * gi, Node: node})
	if len(res.Pods) != 0 || len(res.Conflicts) != 1 || len(res.Conflicts[0].Pods) != 2 || res.Conflicts[0].UID != victim.UID {
		t.Fatalf("pods %+v conflicts %+v", res.Pods, res.Conflicts)
	}
	if !hasWarning(res.Warnings, "default/forger, default/victim") {
		t.Errorf("conflict not reported: %q", res.Warnings)
	}
	if get(t, res.Kubepods, FileMin) != 0 {
		t.Errorf("skipped pods counted in the sums: %+v", res.Kubepods)
	}
}

func hasWarning(ws []string, sub string) bool {
	for _, w := range ws {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

// TestNoAllocatable: without allocatable memory the cap was off and BE got
// memory.high = max; the pass must be refused instead.
func TestNoAllocatable(t *testing.T) {
	be := mkPod("be", nil, nil, corev1.PodRunning, ctr{name: "hog"})
	for _, alloc := range []int64{0, -1} {
		res, err := Compute(Input{Pods: []*corev1.Pod{be}, Policy: PolicyAuto, NodeAllocatable: alloc})
		if !errors.Is(err, ErrNoAllocatable) || len(res.Pods) != 0 {
			t.Errorf("allocatable %d: planned %d pods, error %v", alloc, len(res.Pods), err)
		}
	}
}

// TestSidecars: restartable init containers (sidecars) run beside the app
// containers and need container-level values too.
func TestSidecars(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := mkPod("be", nil, nil, corev1.PodRunning, ctr{name: "app"})
	pod.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always}, {Name: "setup"}}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", ContainerID: "containerd://side"}, {Name: "setup", ContainerID: "containerd://done"}}
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Policy: PolicyAuto, NodeAllocatable: 8 * gi})
	var found bool
	for _, c := range res.Pods[0].Containers {
		switch c.Name {
		case "proxy":
			found = true
			if c.ID != "containerd://side" || get(t, c.Settings, FileHigh) != 4*gi {
				t.Errorf("sidecar: id %q high %d, want BE throttling at 4Gi", c.ID, get(t, c.Settings, FileHigh))
			}
		case "setup":
			t.Error("a run-to-completion init container got values")
		}
	}
	if !found {
		t.Errorf("sidecar got no container values: %+v", res.Pods[0].Containers)
	}
}

// TestOldKernel: below Linux 5.9 memory.high under the limit can livelock
// (the reason KEP-2570's beta was cancelled); it stays at max there.
func TestOldKernel(t *testing.T) {
	ls := mkPod("ls", nil, nil, corev1.PodRunning, ctr{name: "app", req: "100Mi", lim: "1Gi"})
	be := mkPod("be", nil, nil, corev1.PodRunning, ctr{name: "hog"})
	for _, tc := range []struct {
		kernel string
		max    bool
	}{{"5.4.0-150-generic", true}, {"5.8.18", true}, {"5.9.0", false}, {"6.1.0-13-amd64", false}, {"", false}} {
		in := Input{Pods: []*corev1.Pod{ls, be}, Policy: PolicyAuto, NodeAllocatable: 8 * gi, KernelRelease: tc.kernel}
		res := compute(t, in)
		for _, p := range res.Pods {
			h := get(t, p.Containers[0].Settings, FileHigh)
			if (h == manage.Unlimited) != tc.max {
				t.Errorf("kernel %q, %s: memory.high %d", tc.kernel, p.Name, h)
			}
		}
	}
	if _, err := kernelAtLeast("garbage", 5, 9); err == nil {
		t.Error("kernel release garbage accepted")
	}
}

// TestBestEffortKeepsThrottle: a BE pod lifted its own memory.high to max
// with its annotation ({"policy":"none"}, or throttlingPercent 0), or
// above its class's (a higher throttlingPercent, policy default on a node
// that runs auto). Its throttle protects the LS pods beside it: the pod
// may lower it, never raise it. (The third way, the label
// koordinator.sh/qosClass: SYSTEM, is the QoS class policy's to refuse:
// TestEnvtestQoSClassPolicy.)
func TestBestEffortKeepsThrottle(t *testing.T) {
	classCfg := cfg(t, `{"clusterStrategy":{"beClass":{"memoryQOS":{"enable":true,"throttlingPercent":40}}}}`)
	for _, tc := range []struct {
		name, ann string
		policy    Policy
		strategy  Strategy
		want      int64 // memory.high of the BE container, on 10Gi allocatable
	}{
		{"policy none", `{"policy":"none"}`, PolicyAuto, Strategy{}, 5 * gi},
		{"policy none, class config", `{"policy":"none"}`, PolicyDefault, classCfg, 4 * gi},
		{"throttlingPercent 0", `{"throttlingPercent":0}`, PolicyAuto, Strategy{}, 5 * gi},
		{"throttlingPercent 0, class config", `{"throttlingPercent":0}`, PolicyDefault, classCfg, 4 * gi},
		{"throttlingPercent above the class's", `{"throttlingPercent":90}`, PolicyDefault, classCfg, 4 * gi},
		{"policy default on an auto node", `{"policy":"default"}`, PolicyAuto, Strategy{}, 5 * gi},
		{"lower is the pod's to ask", `{"throttlingPercent":10}`, PolicyDefault, classCfg, gi},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []int{1, 2} {
				pod := mkPod("be", nil, map[string]string{AnnotationMemoryQOS: tc.ann}, corev1.PodRunning, ctr{name: "hog"})
				in := Input{Pods: []*corev1.Pod{pod}, Policy: tc.policy, Strategy: tc.strategy, NodeAllocatable: 10 * gi, CgroupVersion: v}
				res := compute(t, in)
				if err := checkRule(in, res); err != nil {
					t.Error(err)
				}
				p := res.Pods[0]
				if p.Class != BE {
					t.Fatalf("class %s", p.Class)
				}
				c := p.Containers[0].Settings
				if s, _ := settingOf(c, FileHigh); s.Value != tc.want {
					t.Errorf("v%d: memory.high %s, want %d (%s)", v, manage.FormatValue(s.Value), tc.want, s.Reason)
				}
				if v == 1 {
					if s, _ := settingOf(c, FileSoftLimit); s.Value != 0 {
						t.Errorf("v1: soft limit %s, want 0: BE gives memory back first (%s)", manage.FormatValue(s.Value), s.Reason)
					}
				}
				held := false
				for _, w := range res.Warnings {
					held = held || strings.Contains(w, "cannot raise its own throttle")
				}
				if lifted := tc.want != gi; held != lifted {
					t.Errorf("warning about the held throttle: %v, want %v (%q)", held, lifted, res.Warnings)
				}
				// The reasons are formatted only outside a terse plan; the
				// values are the same.
				in.Terse = true
				if tr := compute(t, in); get(t, tr.Pods[0].Containers[0].Settings, FileHigh) != tc.want {
					t.Errorf("terse plan: memory.high %d", get(t, tr.Pods[0].Containers[0].Settings, FileHigh))
				}
			}
		})
	}
}

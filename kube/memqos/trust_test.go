package memqos

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func ptr[T any](v T) *T { return &v }

// TestAdmittedResources: a pod resized to 1Gi, of which the kubelet
// allocated 256Mi (the resize pending or Infeasible), was protected for
// 1Gi; the guard took a limit the kernel did not have.
func TestAdmittedResources(t *testing.T) {
	cfg := Strategy{LSClass: &ResourceQOS{MemoryQOS: &MemoryQOSCfg{Enable: ptr(true), MemoryQOS: MemoryQOS{
		MinLimitPercent: ptr(int64(100)), LowLimitPercent: ptr(int64(100))}}}}
	pod := mkPod("resized", nil, nil, corev1.PodRunning, ctr{name: "app", req: "1Gi", lim: "2Gi"})
	st := &pod.Status.ContainerStatuses[0]
	st.AllocatedResources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
	st.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: cfg, NodeAllocatable: 8 * gi, PodOverrides: &PodOverrides{}})
	p := res.Pods[0]
	if got := get(t, p.Settings, FileMin); got != 256<<20 {
		t.Errorf("pod memory.min %d, want the allocated 256Mi", got)
	}
	if p.Request != 256<<20 {
		t.Errorf("request %d, want 256Mi", p.Request)
	}

	// The limit in force (status.resources) is what the guard keeps
	// memory.min under: a spec limit of 2Gi would let 1Gi through.
	st.AllocatedResources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	st.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
	res = compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: cfg, NodeAllocatable: 8 * gi, PodOverrides: &PodOverrides{}})
	if got, guard := get(t, res.Pods[0].Containers[0].Settings, FileMin), int64(512<<20)*9/10/4096*4096; got != guard {
		t.Errorf("container memory.min %d, want 9/10 of the 512Mi limit in force (%d)", got, guard)
	}

	// Before the kubelet's first status, the spec.
	pod.Status.ContainerStatuses = nil
	res = compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: cfg, NodeAllocatable: 8 * gi, PodOverrides: &PodOverrides{}})
	if got := get(t, res.Pods[0].Settings, FileMin); got != 1<<30 {
		t.Errorf("before any status: pod memory.min %d, want the spec's 1Gi", got)
	}

	// Pod-level resources replace the containers' sum, and a pod-level
	// limit bounds the pod.
	pod.Spec.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("320Mi")},
	}
	res = compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: cfg, NodeAllocatable: 8 * gi, PodOverrides: &PodOverrides{}})
	if got := res.Pods[0].Request; got != 300<<20 {
		t.Errorf("pod-level request: %d, want 300Mi", got)
	}
	if got, guard := get(t, res.Pods[0].Settings, FileMin), int64(320<<20)*9/10/4096*4096; got != guard {
		t.Errorf("pod-level limit: pod memory.min %d, want 9/10 of 320Mi (%d)", got, guard)
	}
	// ... as the kubelet admitted them.
	pod.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("200Mi")}
	res = compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: cfg, NodeAllocatable: 8 * gi, PodOverrides: &PodOverrides{}})
	if got := res.Pods[0].Request; got != 200<<20 {
		t.Errorf("pod-level allocated request: %d, want 200Mi", got)
	}
}

// TestPodOverrides: a pod's annotation turned on a class the administrator
// had set to enable: false, asked for memory.min up to 100% of its request,
// and wrote kernel knobs; now the administrator's switch decides.
func TestPodOverrides(t *testing.T) {
	off := Strategy{LSRClass: &ResourceQOS{MemoryQOS: &MemoryQOSCfg{Enable: ptr(false)}}}
	claim := func(ann string) *corev1.Pod {
		return mkPod("claim", map[string]string{LabelQoSClass: "LSR"}, map[string]string{AnnotationMemoryQOS: ann}, corev1.PodRunning,
			ctr{name: "app", req: "512Mi", lim: "1Gi"})
	}
	for _, ann := range []string{`{"minLimitPercent":100}`, `{"policy":"auto"}`, `{"policy":"auto","lowLimitPercent":100}`} {
		for _, allow := range []*PodOverrides{nil, {true, true, true, true, true}} {
			res := compute(t, Input{Pods: []*corev1.Pod{claim(ann)}, Strategy: off, NodeAllocatable: 8 * gi, PodOverrides: allow})
			p := res.Pods[0]
			if get(t, p.Settings, FileMin) != 0 || get(t, p.Settings, FileLow) != 0 || p.Policy != PolicyNone {
				t.Errorf("%s (overrides %v): enable:false lost to the pod: %+v", ann, allow, p.Settings)
			}
		}
	}
	// By default a pod gets no memory.min and no kernel knob from its
	// annotation; it keeps its soft protection and throttle.
	on := Strategy{LSRClass: &ResourceQOS{MemoryQOS: &MemoryQOSCfg{Enable: ptr(true)}}}
	pod := claim(`{"minLimitPercent":100,"lowLimitPercent":50,"throttlingPercent":80,"oomKillGroup":1,"priority":12}`)
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: on, NodeAllocatable: 8 * gi})
	p := res.Pods[0]
	if got := get(t, p.Settings, FileMin); got != 0 {
		t.Errorf("default overrides: memory.min %d from the pod's annotation", got)
	}
	if got := get(t, p.Settings, FileLow); got != 256<<20 {
		t.Errorf("default overrides: memory.low %d, want 50%% of 512Mi", got)
	}
	for _, ss := range [][]Setting{p.Settings, p.Containers[0].Settings} {
		for _, s := range ss {
			if s.File == FileOOMGroup || s.File == FilePriority {
				t.Errorf("default overrides: %s written from the pod's annotation", s.File)
			}
		}
	}
	if !hasWarning(res.Warnings, "minLimitPercent, oomKillGroup") && !hasWarning(res.Warnings, "minLimitPercent") {
		t.Errorf("dropped fields not named: %q", res.Warnings)
	}
	// The administrator may allow them.
	all := &PodOverrides{true, true, true, true, true}
	res = compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: on, NodeAllocatable: 8 * gi, PodOverrides: all})
	if got := get(t, res.Pods[0].Settings, FileMin); got != 512<<20 {
		t.Errorf("all overrides: memory.min %d", got)
	}
	// A field a node strategy sets is the administrator's for that node.
	node := Strategy{LSRClass: &ResourceQOS{MemoryQOS: &MemoryQOSCfg{MemoryQOS: MemoryQOS{LowLimitPercent: ptr(int64(10))}}}}
	res = compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: on, NodeStrategy: node, NodeAllocatable: 8 * gi, PodOverrides: all})
	if got := get(t, res.Pods[0].Settings, FileLow); got == 256<<20 {
		t.Errorf("node strategy's lowLimitPercent overridden by the pod")
	}
	if !hasWarning(res.Warnings, "set by the node strategy") {
		t.Errorf("pinned field not reported: %q", res.Warnings)
	}
}

func TestParsePodOverrides(t *testing.T) {
	for _, s := range []string{"none", "all", DefaultPodOverrides, "minLimitPercent,kernelKnobs"} {
		o, err := ParsePodOverrides(s)
		if err != nil || o.String() != s {
			t.Errorf("%q: %v %q", s, err, o.String())
		}
	}
	if _, err := ParsePodOverrides("policy,memoryMin"); err == nil {
		t.Error("unknown field accepted")
	}
}

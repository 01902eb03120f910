package memqos

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/podplan"
)

const (
	mi = int64(1 << 20)
	gi = int64(1 << 30)
)

type ctr struct {
	name     string
	req, lim string
	env      map[string]string
}

func mkPod(name string, labels, ann map[string]string, phase corev1.PodPhase, cs ...ctr) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: labels, Annotations: ann},
		Status:     corev1.PodStatus{Phase: phase},
	}
	for _, c := range cs {
		k := corev1.Container{Name: c.name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}}
		if c.req != "" {
			k.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(c.req)
		}
		if c.lim != "" {
			k.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(c.lim)
		}
		for n, v := range c.env {
			k.Env = append(k.Env, corev1.EnvVar{Name: n, Value: v})
		}
		p.Spec.Containers = append(p.Spec.Containers, k)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.name, ContainerID: "containerd://" + name + c.name})
	}
	return p
}

func get(t *testing.T, ss []Setting, file string) int64 {
	t.Helper()
	for _, s := range ss {
		if s.File == file {
			return s.Value
		}
	}
	t.Fatalf("no %s in %+v", file, ss)
	return 0
}

func has(ss []Setting, file string) bool {
	for _, s := range ss {
		if s.File == file {
			return true
		}
	}
	return false
}

func cfg(t *testing.T, js string) Strategy {
	t.Helper()
	c, err := ParseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.ForNode(nil)
	return s
}

// TestKoordinatorFormulas checks min, low and high as koordinator computes
// them with explicit percentages, at pod and container level.
func TestKoordinatorFormulas(t *testing.T) {
	s := cfg(t, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":50,"lowLimitPercent":20,"throttlingPercent":60}}}}`)
	pod := mkPod("a", nil, nil, corev1.PodRunning,
		ctr{name: "app", req: "100Mi", lim: "200Mi"},
		ctr{name: "side", req: "50Mi"}) // no limit: node allocatable stands in
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: s, NodeAllocatable: 4 * gi, CgroupVersion: 2})
	if len(res.Pods) != 1 {
		t.Fatalf("pods: %+v", res.Pods)
	}
	p := res.Pods[0]
	if p.Class != LS || p.KubeQoS != corev1.PodQOSBurstable {
		t.Fatalf("class %s kube %s", p.Class, p.KubeQoS)
	}
	if got := get(t, p.Settings, FileMin); got != 75*mi {
		t.Errorf("pod min %d, want 150Mi×50%%", got)
	}
	// low (20%) is below min (50%): raised to min.
	if got := get(t, p.Settings, FileLow); got != 75*mi {
		t.Errorf("pod low %d, want raised to min", got)
	}
	app, side := p.Containers[0].Settings, p.Containers[1].Settings
	if got := get(t, app, FileMin); got != 50*mi {
		t.Errorf("app min %d", got)
	}
	wantHigh := (100*mi + (100*mi)*60/100) / 4096 * 4096
	if got := get(t, app, FileHigh); got != wantHigh {
		t.Errorf("app high %d, want %d", got, wantHigh)
	}
	wantSide := (50*mi + (4*gi-50*mi)*60/100) / 4096 * 4096
	if got := get(t, side, FileHigh); got != wantSide {
		t.Errorf("side high %d, want %d (node allocatable for the limit)", got, wantSide)
	}
	if has(app, FileSoftLimit) || has(app, FileWmarkRatio) {
		t.Errorf("v2 with no explicit knobs must not plan soft limit or wmark: %+v", app)
	}
	if got := get(t, res.Kubepods, FileMin); got != 75*mi {
		t.Errorf("kubepods min %d", got)
	}
	if got := get(t, res.QoS[corev1.PodQOSBurstable], FileLow); got != 75*mi {
		t.Errorf("burstable low %d", got)
	}
	if got := get(t, res.QoS[corev1.PodQOSBestEffort], FileMin); got != 0 {
		t.Errorf("besteffort min %d", got)
	}
}

func TestThrottlingZeroMeansMax(t *testing.T) {
	s := cfg(t, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"throttlingPercent":0,"minLimitPercent":10}}}}`)
	pod := mkPod("a", nil, nil, corev1.PodRunning, ctr{name: "app", req: "100Mi", lim: "200Mi"})
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Strategy: s, NodeAllocatable: 4 * gi})
	if got := get(t, res.Pods[0].Containers[0].Settings, FileHigh); got != manage.Unlimited {
		t.Errorf("high %d, want max", got)
	}
}

// TestAuto checks that auto protects LS requests, keeps high between
// request and limit, throttles BE well below its limit and leaves
// Guaranteed memory.high alone (memory.min never equal to memory.max).
func TestAuto(t *testing.T) {
	ls := mkPod("ls", nil, map[string]string{AnnotationMemoryQOS: `{"policy":"auto"}`}, corev1.PodRunning, ctr{name: "app", req: "100Mi", lim: "300Mi"})
	be := mkPod("be", map[string]string{LabelQoSClass: "BE"}, map[string]string{AnnotationMemoryQOS: `{"policy":"auto"}`}, corev1.PodRunning, ctr{name: "hog", lim: "1Gi", req: "0"})
	g := mkPod("g", nil, nil, corev1.PodRunning, ctr{name: "db", req: "1Gi", lim: "1Gi"})
	g.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	g.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	res := compute(t, Input{Pods: []*corev1.Pod{ls, be, g}, Policy: PolicyAuto, NodeAllocatable: 8 * gi, CgroupVersion: 2})
	byName := map[string]PodResult{}
	for _, p := range res.Pods {
		byName[p.Name] = p
	}
	c := byName["ls"].Containers[0].Settings
	if get(t, c, FileLow) != 100*mi || get(t, c, FileMin) != 0 {
		t.Errorf("ls low/min: %+v", c)
	}
	if h := get(t, c, FileHigh); h != (100*mi+200*mi*80/100)/4096*4096 {
		t.Errorf("ls high %d", h)
	}
	b := byName["be"].Containers[0].Settings
	if h := get(t, b, FileHigh); h != gi/2 || get(t, b, FileLow) != 0 {
		t.Errorf("be high %d (want half its limit), low %d", h, get(t, b, FileLow))
	}
	if byName["g"].Class != LSR || byName["g"].KubeQoS != corev1.PodQOSGuaranteed {
		t.Fatalf("g: %s %s", byName["g"].Class, byName["g"].KubeQoS)
	}
	gc := byName["g"].Containers[0].Settings
	if get(t, gc, FileHigh) != manage.Unlimited || get(t, gc, FileMin) >= gi || get(t, gc, FileLow) != gi {
		t.Errorf("guaranteed: %+v", gc)
	}
	if p := res.Protected[LS]; p.Low != 100*mi {
		t.Errorf("protected LS %+v", p)
	}
}

// TestGuaranteedMinGuard: a config asking for memory.min = request on a
// Guaranteed pod gets 9/10 of the limit instead.
func TestGuaranteedMinGuard(t *testing.T) {
	s := cfg(t, `{"clusterStrategy":{"lsrClass":{"memoryQOS":{"enable":true,"minLimitPercent":100,"lowLimitPercent":100}}}}`)
	g := mkPod("g", nil, nil, corev1.PodRunning, ctr{name: "db", req: "1Gi", lim: "1Gi"})
	g.Status.QOSClass = corev1.PodQOSGuaranteed
	res := compute(t, Input{Pods: []*corev1.Pod{g}, Strategy: s, NodeAllocatable: 8 * gi})
	c := res.Pods[0].Containers[0].Settings
	if m := get(t, c, FileMin); m >= gi || m != (gi*9/10)/4096*4096 {
		t.Errorf("min %d must stay below the limit", m)
	}
	if m := get(t, res.Pods[0].Settings, FileMin); m >= gi {
		t.Errorf("pod min %d must stay below the limit", m)
	}
}

func TestGoAware(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		ann  string
		want int64
	}{
		{"none", nil, "", (256*mi + 768*mi*80/100) / 4096 * 4096},
		{"env", map[string]string{"GOMEMLIMIT": "921MiB"}, "", (921*mi + 921*mi/16 + 4095) / 4096 * 4096},
		{"env-small", map[string]string{"GOMEMLIMIT": "300MiB"}, "", (256*mi + 768*mi*80/100) / 4096 * 4096},
		{"annotation", nil, `{"containers":[{"name":"other","env":{"GOMEMLIMIT":"1"}},{"name":"app","env":{"GOMEMLIMIT":"943718400"}}]}`, (900*mi + 900*mi/16 + 4095) / 4096 * 4096},
		{"annotation-suffix", nil, `{"containers":[{"name":"app","env":{"GOMEMLIMIT":"900MiB"}}]}`, (900*mi + 900*mi/16 + 4095) / 4096 * 4096},
		{"annotation-other-container", nil, `{"containers":[{"name":"other","env":{"GOMEMLIMIT":"900MiB"}}]}`, (256*mi + 768*mi*80/100) / 4096 * 4096},
		{"annotation-garbage", nil, `{"containers":"x"}`, (256*mi + 768*mi*80/100) / 4096 * 4096},
		{"at-limit", map[string]string{"GOMEMLIMIT": "1000MiB"}, "", manage.Unlimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{}
			if tc.ann != "" {
				ann[podplan.Annotation] = tc.ann
			}
			pod := mkPod("a", nil, ann, corev1.PodRunning, ctr{name: "app", req: "256Mi", lim: "1Gi", env: tc.env})
			res := compute(t, Input{Pods: []*corev1.Pod{pod}, Policy: PolicyAuto, NodeAllocatable: 8 * gi})
			var s Setting
			for _, x := range res.Pods[0].Containers[0].Settings {
				if x.File == FileHigh {
					s = x
				}
			}
			if s.Value != tc.want {
				t.Errorf("high %d, want %d (%s)", s.Value, tc.want, s.Reason)
			}
			if s.Value > gi && s.Value != manage.Unlimited {
				t.Errorf("high %d above the limit", s.Value)
			}
			if tc.name == "env" && !strings.Contains(s.Reason, "GOMEMLIMIT") {
				t.Errorf("reason does not say why: %s", s.Reason)
			}
		})
	}
}

// TestRestore: policy none, a disabled class and a disabled namespace get
// kernel defaults.
func TestRestore(t *testing.T) {
	s := cfg(t, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":100}},"beClass":{"memoryQOS":{"enable":false,"minLimitPercent":100}}}}`)
	none := mkPod("none", nil, map[string]string{AnnotationMemoryQOS: `{"policy":"none"}`}, corev1.PodRunning, ctr{name: "c", req: "100Mi", lim: "200Mi"})
	be := mkPod("be", map[string]string{LabelQoSClassLegacy: "BE"}, nil, corev1.PodRunning, ctr{name: "c", req: "100Mi", lim: "200Mi"})
	ns := mkPod("ns", nil, nil, corev1.PodRunning, ctr{name: "c", req: "100Mi", lim: "200Mi"})
	ns.Namespace = "blocked"
	res := compute(t, Input{Pods: []*corev1.Pod{none, be, ns}, Strategy: s, NodeAllocatable: 8 * gi, CgroupVersion: 1,
		Namespaces: Namespaces{Disabled: []string{"blocked"}}})
	if len(res.Pods) != 3 {
		t.Fatalf("%d pods", len(res.Pods))
	}
	for _, p := range res.Pods {
		c := p.Containers[0].Settings
		if p.Policy != PolicyNone || get(t, c, FileMin) != 0 || get(t, c, FileLow) != 0 || get(t, c, FileHigh) != manage.Unlimited || get(t, c, FileSoftLimit) != manage.Unlimited {
			t.Errorf("%s: policy %s %+v", p.Name, p.Policy, c)
		}
	}
	if get(t, res.Kubepods, FileMin) != 0 {
		t.Errorf("kubepods min %d", get(t, res.Kubepods, FileMin))
	}
}

func TestEnabledNamespaces(t *testing.T) {
	pod := mkPod("a", nil, nil, corev1.PodRunning, ctr{name: "c", req: "100Mi", lim: "200Mi"})
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Policy: PolicyAuto, Namespaces: Namespaces{Enabled: []string{"prod"}}, NodeAllocatable: gi})
	if res.Pods[0].Policy != PolicyNone {
		t.Errorf("pod outside enabledNamespaces got %s", res.Pods[0].Policy)
	}
	pod.Namespace = "prod"
	res = compute(t, Input{Pods: []*corev1.Pod{pod}, Policy: PolicyAuto, Namespaces: Namespaces{Enabled: []string{"prod"}}, NodeAllocatable: gi})
	if res.Pods[0].Policy != PolicyAuto {
		t.Errorf("pod inside enabledNamespaces got %s", res.Pods[0].Policy)
	}
}

func TestV1SoftLimits(t *testing.T) {
	ls := mkPod("ls", nil, nil, corev1.PodRunning, ctr{name: "c", req: "100Mi", lim: "200Mi"})
	be := mkPod("be", nil, nil, corev1.PodRunning, ctr{name: "c"})
	res := compute(t, Input{Pods: []*corev1.Pod{ls, be}, Policy: PolicyAuto, NodeAllocatable: gi, CgroupVersion: 1})
	for _, p := range res.Pods {
		want := 100 * mi
		if p.Name == "be" {
			want = 0
		}
		if got := get(t, p.Containers[0].Settings, FileSoftLimit); got != want {
			t.Errorf("%s soft limit %d, want %d", p.Name, got, want)
		}
		if has(p.Settings, FileSoftLimit) {
			t.Errorf("%s: soft limit at pod level", p.Name)
		}
	}
}

// TestProtectedCap scales memory.min down when it would exceed the share.
func TestProtectedCap(t *testing.T) {
	s := cfg(t, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":80,"lowLimitPercent":80}}}}`)
	var pods []*corev1.Pod
	for _, n := range []string{"a", "b", "c"} {
		pods = append(pods, mkPod(n, nil, nil, corev1.PodRunning, ctr{name: "c", req: "1Gi", lim: "2Gi"}))
	}
	res := compute(t, Input{Pods: pods, Strategy: s, NodeAllocatable: 2 * gi, MaxProtectedRatio: 0.8})
	total := get(t, res.Kubepods, FileMin)
	if total > 2*gi*8/10 || total < 2*gi*8/10-3*4096*2 {
		t.Errorf("total min %d, want about %d", total, 2*gi*8/10)
	}
	if len(res.Warnings) == 0 || !strings.Contains(res.Warnings[0], "scaled") {
		t.Errorf("no warning: %v", res.Warnings)
	}
	for _, p := range res.Pods {
		if get(t, p.Containers[0].Settings, FileMin) > get(t, p.Settings, FileMin) {
			t.Errorf("container min above pod min")
		}
		if get(t, p.Containers[0].Settings, FileLow) < get(t, p.Containers[0].Settings, FileMin) {
			t.Errorf("low below min")
		}
	}
}

// TestFinishedAndSystem: finished pods are out of the plan; SYSTEM pods are
// planned back to the kernel defaults (TestSystemRelabel), out of the sums.
func TestFinishedAndSystem(t *testing.T) {
	done := mkPod("done", nil, nil, corev1.PodSucceeded, ctr{name: "c", req: "1Gi", lim: "2Gi"})
	sys := mkPod("sys", map[string]string{LabelQoSClass: "SYSTEM"}, nil, corev1.PodRunning, ctr{name: "c", req: "1Gi", lim: "2Gi"})
	run := mkPod("run", nil, nil, corev1.PodRunning, ctr{name: "c", req: "1Gi", lim: "2Gi"})
	res := compute(t, Input{Pods: []*corev1.Pod{done, sys, run}, Policy: PolicyAuto, NodeAllocatable: 8 * gi})
	if len(res.Pods) != 2 || res.Pods[0].Name != "run" || res.Pods[1].Name != "sys" || res.Pods[1].Policy != PolicyNone {
		t.Fatalf("pods %+v", res.Pods)
	}
	if get(t, res.Kubepods, FileLow) != gi {
		t.Errorf("kubepods low %d: finished or SYSTEM pod counted", get(t, res.Kubepods, FileLow))
	}
}

func TestKubeQoS(t *testing.T) {
	be := mkPod("be", nil, nil, corev1.PodRunning, ctr{name: "c"})
	bu := mkPod("bu", nil, nil, corev1.PodRunning, ctr{name: "c", req: "1Gi"})
	g := mkPod("g", nil, nil, corev1.PodRunning, ctr{name: "c", lim: "1Gi"})
	g.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	for p, want := range map[*corev1.Pod]corev1.PodQOSClass{be: corev1.PodQOSBestEffort, bu: corev1.PodQOSBurstable, g: corev1.PodQOSGuaranteed} {
		if got := KubeQoS(p); got != want {
			t.Errorf("%s: %s, want %s", p.Name, got, want)
		}
	}
	bu.Status.QOSClass = corev1.PodQOSBestEffort
	if KubeQoS(bu) != corev1.PodQOSBestEffort {
		t.Error("status.qosClass not preferred")
	}
}

func TestPodOverridesAndBadInput(t *testing.T) {
	s := cfg(t, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":10}}}}`)
	over := mkPod("o", nil, map[string]string{AnnotationMemoryQOS: `{"minLimitPercent":50}`}, corev1.PodRunning, ctr{name: "c", req: "100Mi", lim: "1Gi"})
	bad := mkPod("b", map[string]string{LabelQoSClass: "GOLD"}, map[string]string{AnnotationMemoryQOS: `{"policy":"fast"}`}, corev1.PodRunning, ctr{name: "c", req: "100Mi", lim: "1Gi"})
	// memory.min from a pod's annotation needs the administrator's leave.
	res := compute(t, Input{Pods: []*corev1.Pod{over, bad}, Strategy: s, NodeAllocatable: 8 * gi, PodOverrides: &PodOverrides{MinLimitPercent: true}})
	for _, p := range res.Pods {
		want := 10 * mi
		if p.Name == "o" {
			want = 50 * mi
		}
		if got := get(t, p.Containers[0].Settings, FileMin); got != want/4096*4096 {
			t.Errorf("%s min %d want %d", p.Name, got, want)
		}
	}
	if len(res.Warnings) != 2 {
		t.Errorf("warnings %v", res.Warnings)
	}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{`{"clusterStrategy":{"lsClass":{"memoryQOS":{"minLimitPercent":101}}}}`, "clusterStrategy.lsClass.memoryQOS.minLimitPercent"},
		{`{"nodeStrategies":[{"lsClass":{}}]}`, "nodeStrategies[0].nodeSelector: missing"},
		{`{"clusterStrategy":`, "resource-qos-config"},
		{`{"clusterStrategy":{"beClass":{"memoryQOS":{"wmarkMinAdj":99}}}}`, "wmarkMinAdj"},
	} {
		_, err := ParseConfig([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one naming %q", tc.in, err, tc.err)
		}
	}
	c, err := ParseConfig([]byte(`{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":10,"lowLimitPercent":20}},"cpuQOS":{}},
		"nodeStrategies":[{"name":"big","nodeSelector":{"matchLabels":{"pool":"big"}},"lsClass":{"memoryQOS":{"minLimitPercent":30}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s, name := c.ForNode(map[string]string{"pool": "big"})
	m := s.class(LS)
	if name != "big" || *m.MinLimitPercent != 30 || *m.LowLimitPercent != 20 || !*m.Enable {
		t.Errorf("node strategy merge: %s %+v", name, m)
	}
	s, name = c.ForNode(map[string]string{"pool": "small"})
	if name != "" || *s.class(LS).MinLimitPercent != 10 {
		t.Errorf("cluster strategy: %s", name)
	}
	if c.ClusterStrategy.LSClass.MemoryQOS.MinLimitPercent == nil || *c.ClusterStrategy.LSClass.MemoryQOS.MinLimitPercent != 10 {
		t.Error("ForNode changed the config")
	}
}

// TestParseNamespaces: a memory-qos key that is not JSON, or names
// something that cannot be a namespace, is an error naming the field.
func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{`{"enabledNamespaces": [`, "memory-qos: unexpected end of JSON input"},
		{`{"enabledNamespaces": "prod"}`, "memory-qos: json: cannot unmarshal"},
		{`{"disabledNamespaces": ["kube system"]}`, `memory-qos: disabledNamespaces[0]: "kube system" is not a namespace name`},
		{`{"enabledNamespaces": ["prod", ""]}`, `enabledNamespaces[1]: "" is not a namespace name`},
	} {
		_, err := ParseNamespaces([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one with %q", tc.in, err, tc.err)
		}
	}
	n, err := ParseNamespaces([]byte(`{"enabledNamespaces": ["prod"], "disabledNamespaces": ["kube-system"], "other": 1}`))
	if err != nil || len(n.Enabled) != 1 || n.Disabled[0] != "kube-system" {
		t.Errorf("%+v, %v", n, err)
	}
}

func TestBatchMemory(t *testing.T) {
	pod := mkPod("b", map[string]string{LabelQoSClass: "BE"}, nil, corev1.PodRunning, ctr{name: "c"})
	pod.Spec.Containers[0].Resources.Limits[ResourceBatchMemory] = resource.MustParse("1Gi")
	res := compute(t, Input{Pods: []*corev1.Pod{pod}, Policy: PolicyAuto, NodeAllocatable: 8 * gi})
	if h := get(t, res.Pods[0].Containers[0].Settings, FileHigh); h != gi/2 {
		t.Errorf("high %d: batch-memory limit not used", h)
	}
}

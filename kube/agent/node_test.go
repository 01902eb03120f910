package agent

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/kube/memqos"
)

// snapshot reads every file of a fixture tree.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func nodeFixture(t *testing.T) (*Layout, State) {
	t.Helper()
	root := copyTree(t, "testdata/node-v2-cgroupfs")
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ReadPodList("testdata/node-pods.json")
	if err != nil {
		t.Fatal(err)
	}
	return l, State{Pods: pods, Config: &memqos.Config{}, NodeAllocatable: 4 << 30}
}

const (
	staticDir   = "kubepods/burstable/pod0f3c9a1e5b7d4c2a8e6f1b3d5a7c9e1f"
	relabelDir  = "kubepods/burstable/pod6666ffff-0000-4000-8000-000000000006"
	guaranteeed = "kubepods/pod7777aaaa-0000-4000-8000-000000000007"
	sidecarDir  = "kubepods/besteffort/pod8888bbbb-0000-4000-8000-000000000008"
)

// TestNodeFixture: a cgroupfs/v2 node as a real kubelet lays it out, with
// a static pod (whose cgroup is named after the static pod's UID, which
// the mirror pod carries in kubernetes.io/config.mirror), a pod relabelled
// SYSTEM that still holds protection from before, a Guaranteed pod in
// kubepods itself and a BestEffort pod with a sidecar beside its sandbox.
func TestNodeFixture(t *testing.T) {
	l, st := nodeFixture(t)
	a := New(l, Options{Policy: memqos.PolicyAuto})
	rep := a.Reconcile(st)
	if rep.Skip != "" || len(rep.Apply.Errors) != 0 {
		t.Fatalf("skip %q, errors %v", rep.SkipReason, rep.Apply.Errors)
	}
	for _, w := range rep.Warnings {
		if strings.Contains(w, "etcd") {
			t.Errorf("static pod: %s", w)
		}
	}
	f := func(p ...string) string { return filepath.Join(append([]string{l.Mount}, p...)...) }
	for file, want := range map[string]string{
		f(staticDir, "memory.low"):                  "104857600", // protected, not reset as unknown
		f(staticDir, "aaa777", "memory.low"):        "104857600",
		f(relabelDir, "memory.min"):                 "0", // SYSTEM: protection from before removed
		f(relabelDir, "memory.low"):                 "0",
		f(relabelDir, "bbb888", "memory.low"):       "0",
		f(relabelDir, "bbb888", "memory.high"):      "max",
		f(guaranteeed, "ccc999", "memory.low"):      "536870912",
		f(guaranteeed, "ccc999", "memory.high"):     "max",
		f(sidecarDir, "ddd000", "memory.high"):      "2147483648", // BE: half of allocatable
		f(sidecarDir, "eee111", "memory.high"):      "2147483648", // its sidecar too
		f(sidecarDir, "fff222pause", "memory.high"): "max",        // the sandbox is not a container of the spec
		f("kubepods/burstable", "memory.low"):       "104857600",  // the static pod's; not the SYSTEM pod's
		f("kubepods", "memory.low"):                 "641728512",  // 100Mi + 512Mi
	} {
		if got := readVal(t, file); got != want {
			t.Errorf("%s = %s, want %s", strings.TrimPrefix(file, l.Mount), got, want)
		}
	}
	if rep := a.Reconcile(st); len(rep.Apply.Changed) != 0 {
		t.Errorf("second pass changed %+v", rep.Apply.Changed)
	}
}

// TestNoAllocatable: a node without allocatable memory got the cap
// switched off and BE memory.high = max; now the pass writes nothing and
// says why.
func TestNoAllocatable(t *testing.T) {
	l, st := nodeFixture(t)
	st.NodeAllocatable = 0
	before := snapshot(t, l.Mount)
	rep := New(l, Options{Policy: memqos.PolicyAuto}).Reconcile(st)
	if rep.Skip != SkipNoAllocatable || !strings.Contains(rep.SkipReason, "allocatable") {
		t.Errorf("skip %q (%s)", rep.Skip, rep.SkipReason)
	}
	after := snapshot(t, l.Mount)
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s changed from %q to %q", p, v, after[p])
		}
	}
}

// TestKubeletMemoryQoS: where the kubelet's TieredReservation has written
// a Guaranteed pod's whole request into its memory.min, the agent stands
// aside (writes nothing, says why) unless told to take over.
func TestKubeletMemoryQoS(t *testing.T) {
	l, st := nodeFixture(t)
	if err := os.WriteFile(filepath.Join(l.Mount, guaranteeed, "memory.min"), []byte("536870912\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, l.Mount)
	rep := New(l, Options{Policy: memqos.PolicyAuto}).Reconcile(st)
	if rep.Skip != SkipKubeletQoS || !strings.Contains(rep.SkipReason, "TieredReservation") || !strings.Contains(rep.SkipReason, "shop/db") {
		t.Fatalf("skip %q: %s", rep.Skip, rep.SkipReason)
	}
	for p, v := range snapshot(t, l.Mount) {
		if before[p] != v {
			t.Errorf("%s written while standing aside", p)
		}
	}
	rep = New(l, Options{Policy: memqos.PolicyAuto, TakeOverKubelet: true}).Reconcile(st)
	if rep.Skip != "" || rep.Kubelet == "" || len(rep.Apply.Changed) == 0 {
		t.Errorf("take over: skip %q, kubelet %q, %d changes", rep.Skip, rep.Kubelet, len(rep.Apply.Changed))
	}
	// The configuration file says so too, before any pod shows it.
	l, st = nodeFixture(t)
	k, err := ParseKubeletConfig("config.yaml", []byte("kind: KubeletConfiguration\nfeatureGates: {MemoryQoS: true}\nmemoryReservationPolicy: TieredReservation\n"), "v1.36.0")
	if err != nil {
		t.Fatal(err)
	}
	if rep := New(l, Options{Kubelet: k}).Reconcile(st); rep.Skip != SkipKubeletQoS {
		t.Errorf("kubelet config: skip %q", rep.Skip)
	}
}

// TestHealth: /healthz passed before the agent had ever reconciled and
// while it was stuck; it now fails until a pass completes and when passes
// stop.
func TestHealth(t *testing.T) {
	l, st := nodeFixture(t)
	a := New(l, Options{Policy: memqos.PolicyAuto})
	a.health.wait("the first list of pods")
	if _, err := a.Health(time.Now(), time.Minute); err == nil || !strings.Contains(err.Error(), "first list of pods") {
		t.Errorf("before any pass: %v", err)
	}
	a.Reconcile(st)
	if text, err := a.Health(time.Now(), time.Minute); err != nil || !strings.HasPrefix(text, "ok") {
		t.Errorf("after a pass: %q %v", text, err)
	}
	if _, err := a.Health(time.Now().Add(2*time.Minute), time.Minute); err == nil {
		t.Error("healthy two minutes after the last pass")
	}
	st.NodeAllocatable = 0
	a.Reconcile(st)
	if text, err := a.Health(time.Now(), time.Minute); err != nil || !strings.Contains(text, "allocatable") {
		t.Errorf("skipped pass: %q %v", text, err)
	}
}

// TestUnprotectedPods: a planned pod whose cgroup is gone counts as left
// unprotected, as does every running pod when the pass is skipped for a
// missing allocatable; the gauge says so.
func TestUnprotectedPods(t *testing.T) {
	l, st := nodeFixture(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a := New(l, Options{Policy: memqos.PolicyAuto, Metrics: m})
	if rep := a.Reconcile(st); rep.Unprotected != 0 {
		t.Errorf("every cgroup present: %d unprotected (%v)", rep.Unprotected, rep.Warnings)
	}
	if err := os.RemoveAll(filepath.Join(l.Mount, sidecarDir)); err != nil {
		t.Fatal(err)
	}
	if rep := a.Reconcile(st); rep.Unprotected != 1 {
		t.Errorf("one pod cgroup gone: %d unprotected (%v)", rep.Unprotected, rep.Warnings)
	}
	if got := testutil.ToFloat64(m.unprot); got != 1 {
		t.Errorf("gofit_node_unprotected_pods = %v, want 1", got)
	}
	running := 0
	for _, p := range st.Pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running++
		}
	}
	st.NodeAllocatable = 0
	if rep := a.Reconcile(st); rep.Unprotected != running || running == 0 {
		t.Errorf("no allocatable: %d unprotected, want all %d running pods", rep.Unprotected, running)
	}
}

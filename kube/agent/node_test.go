package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gofit-dev/gofit/cgroup/manage"
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
	// The pass's duration reaches the caller (Run's "reconciled" log), not
	// only the metrics: it was set after the return had copied the report.
	if rep.Duration <= 0 {
		t.Errorf("Report.Duration = %v, want the pass's duration", rep.Duration)
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
	if rep.Duration <= 0 {
		t.Errorf("Report.Duration = %v on a skipped pass, want its duration", rep.Duration)
	}
	after := snapshot(t, l.Mount)
	for p, v := range before {
		if after[p] != v {
			t.Errorf("%s changed from %q to %q", p, v, after[p])
		}
	}
}

// TestKubeletMemoryQoS: where the kubelet's TieredReservation has written
// a Guaranteed pod's whole request into its memory.min, the agent leaves
// every level TieredReservation writes to it from then on (and says so),
// unless told to take over; the configuration file says so too, before
// any pod shows it.
func TestKubeletMemoryQoS(t *testing.T) {
	l, st := nodeFixture(t)
	if err := os.WriteFile(filepath.Join(l.Mount, guaranteeed, "memory.min"), []byte("536870912\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, l.Mount)
	a := New(l, Options{Policy: memqos.PolicyAuto})
	rep := a.Reconcile(st)
	if rep.Skip != "" || !strings.Contains(rep.Kubelet, "TieredReservation") || !strings.Contains(rep.Kubelet, "shop/db") {
		t.Fatalf("skip %q, kubelet %q", rep.Skip, rep.Kubelet)
	}
	for p, v := range snapshot(t, l.Mount) {
		if before[p] != v && (strings.HasSuffix(p, "memory.min") || strings.HasSuffix(p, "memory.low")) {
			t.Errorf("%s written (%q to %q): TieredReservation's", p, before[p], v)
		}
	}
	if got := readVal(t, filepath.Join(l.Mount, sidecarDir, "ddd000", "memory.high")); got != "2147483648" {
		t.Errorf("BE container memory.high %s: the agent's still", got)
	}
	if rep := a.Reconcile(st); len(rep.Deferred) == 0 || len(rep.Apply.Changed) != 0 {
		t.Errorf("second pass: deferred %q, changed %+v", rep.Deferred, rep.Apply.Changed)
	}
	l, st = nodeFixture(t)
	if err := os.WriteFile(filepath.Join(l.Mount, guaranteeed, "memory.min"), []byte("536870912\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = New(l, Options{Policy: memqos.PolicyAuto, TakeOverKubelet: true}).Reconcile(st)
	if rep.Skip != "" || rep.Kubelet == "" || len(rep.Deferred) != 0 || readVal(t, filepath.Join(l.Mount, "kubepods", "memory.low")) == "0" {
		t.Errorf("take over: skip %q, kubelet %q, deferred %q", rep.Skip, rep.Kubelet, rep.Deferred)
	}
	l, st = nodeFixture(t)
	k, err := ParseKubeletConfig("config.yaml", []byte("kind: KubeletConfiguration\nfeatureGates: {MemoryQoS: true}\nmemoryReservationPolicy: TieredReservation\n"), "v1.36.0")
	if err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, l.Mount)
	rep = New(l, Options{Kubelet: k}).Reconcile(st)
	for p, v := range snapshot(t, l.Mount) {
		if before[p] != v && !strings.HasSuffix(p, "memory.high") {
			t.Errorf("kubelet config TieredReservation: %s written", p)
		}
	}
	if len(rep.Deferred) != 5 {
		t.Errorf("deferred %q: want kubepods, qos, pod, container min/low and (v1.36's 0.9 factor) container memory.high", rep.Deferred)
	}
}

// TestOwnValuesNotKubelets: after an in-place downsize the memory.min the
// agent wrote for a Guaranteed pod can equal the pod's new request (LSR at
// 50% going 2Gi to 1Gi; 10Gi to 9Gi at 100%, which the 9/10 guard kept at
// 9Gi). The agent took its own value for the kubelet's TieredReservation
// and deferred every level to a kubelet that writes nothing. It must go on
// writing, in the same process and after a restart.
func TestOwnValuesNotKubelets(t *testing.T) {
	for _, tc := range []struct {
		name, cfg     string
		from, to      string
		before, after int64 // the pod's memory.min before and after the downsize
	}{
		{"LSR 50% 2Gi to 1Gi", `{"clusterStrategy":{"lsrClass":{"memoryQOS":{"enable":true,"minLimitPercent":50}}}}`,
			"2Gi", "1Gi", 1 << 30, 512 << 20},
		{"LSR 100% 10Gi to 9Gi", `{"clusterStrategy":{"lsrClass":{"memoryQOS":{"enable":true,"minLimitPercent":100,"lowLimitPercent":100}}}}`,
			"10Gi", "9Gi", 9 << 30, (9 << 30) * 9 / 10 / 4096 * 4096},
	} {
		for _, restart := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s restart=%v", tc.name, restart), func(t *testing.T) {
				l, st := nodeFixture(t)
				st.NodeAllocatable = 32 << 30
				cfg, err := memqos.ParseConfig([]byte(tc.cfg))
				if err != nil {
					t.Fatal(err)
				}
				st.Config = cfg
				var db *corev1.Pod
				for _, p := range st.Pods {
					if p.Name == "db" {
						db = p
					}
				}
				size := func(q string) {
					r := db.Spec.Containers[0].Resources
					r.Requests[corev1.ResourceMemory] = resource.MustParse(q)
					r.Limits[corev1.ResourceMemory] = resource.MustParse(q)
				}
				podMin := filepath.Join(l.Mount, guaranteeed, "memory.min")
				size(tc.from)
				a := New(l, Options{})
				if rep := a.Reconcile(st); rep.Skip != "" || len(rep.Apply.Errors) != 0 {
					t.Fatalf("first pass: skip %q, errors %v", rep.SkipReason, rep.Apply.Errors)
				}
				if got := readVal(t, podMin); got != fmt.Sprint(tc.before) {
					t.Fatalf("before the downsize: memory.min %s, want %d", got, tc.before)
				}
				size(tc.to)
				if q := resource.MustParse(tc.to); q.Value() != tc.before {
					t.Fatalf("the case does not test anything: new request %d, memory.min %d", q.Value(), tc.before)
				}
				if restart {
					a = New(l, Options{})
				}
				rep := a.Reconcile(st)
				if len(rep.Deferred) != 0 || strings.Contains(rep.Kubelet, "TieredReservation") {
					t.Errorf("its own value taken for the kubelet's: kubelet %q, deferred %q", rep.Kubelet, rep.Deferred)
				}
				if got := readVal(t, podMin); got != fmt.Sprint(tc.after) {
					t.Errorf("after the downsize: memory.min %s, want %d", got, tc.after)
				}
			})
		}
	}
}

// TestDeferToKubelet: one writer per file at each level. On the fixture
// node the agent writes exactly the files the kubelet's Memory QoS does
// not, for each of the kubelet's modes; the plan, /healthz and the
// metrics say what it defers and why; Reset leaves the kubelet's files.
func TestDeferToKubelet(t *testing.T) {
	for _, tc := range []struct {
		mode, version string
		owned         []string // level/file the kubelet writes
	}{
		{KubeletNone, "v1.37.2", []string{"container/memory.min", "container/memory.low"}},
		{KubeletAuto, "v1.37.2", []string{"container/memory.min", "container/memory.low"}},
		{KubeletTiered, "v1.37.2", []string{"kubepods/memory.min", "kubepods/memory.low", "qos/memory.min", "qos/memory.low",
			"pod/memory.min", "pod/memory.low", "container/memory.min", "container/memory.low"}},
		{KubeletOff, "v1.37.2", []string{"container/memory.high"}},
		{KubeletAuto, "v1.36.3", nil},
		{KubeletNone, "v1.36.3", []string{"kubepods/memory.min", "kubepods/memory.low", "qos/memory.min", "qos/memory.low",
			"container/memory.min", "container/memory.low", "container/memory.high"}},
	} {
		t.Run(tc.mode+"-"+tc.version, func(t *testing.T) {
			k, err := KubeletMode(tc.mode, tc.version)
			if err != nil {
				t.Fatal(err)
			}
			l, st := nodeFixture(t)
			// Every memory file starts at a marker value no plan yields.
			marker := "12345678"
			for p := range snapshot(t, l.Mount) {
				switch filepath.Base(p) {
				case "memory.min", "memory.low", "memory.high":
					if err := os.WriteFile(p, []byte(marker+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			a := New(l, Options{Policy: memqos.PolicyAuto, Kubelet: k, Metrics: m})
			rep := a.Reconcile(st)
			if rep.Skip != "" {
				t.Fatalf("skip %s", rep.SkipReason)
			}
			owned := map[string]bool{}
			for _, o := range tc.owned {
				owned[o] = true
			}
			for p, v := range snapshot(t, l.Mount) {
				file := filepath.Base(p)
				if file != "memory.min" && file != "memory.low" && file != "memory.high" {
					continue
				}
				level := levelOf(t, l, filepath.Dir(p))
				wrote := strings.TrimSpace(v) != marker
				if file == "memory.high" && level != "container" {
					continue // the agent writes memory.high on containers only
				}
				if level == "container" && filepath.Base(filepath.Dir(p)) == "fff222pause" && file != "memory.high" {
					continue // the sandbox: no container of the spec
				}
				switch {
				case owned[level+"/"+file] && wrote:
					t.Errorf("%s: written (%s), the kubelet's", strings.TrimPrefix(p, l.Mount), strings.TrimSpace(v))
				case !owned[level+"/"+file] && !wrote && file != "memory.high":
					t.Errorf("%s: not written, the agent's", strings.TrimPrefix(p, l.Mount))
				}
			}
			if len(tc.owned) > 0 && len(rep.Deferred) == 0 {
				t.Errorf("no deferral reported: %+v", rep)
			}
			plan := a.PlanOf(rep)
			var buf strings.Builder
			plan.WriteText(&buf)
			for _, o := range tc.owned {
				level, file, _ := strings.Cut(o, "/")
				if !strings.Contains(buf.String(), "defers to the kubelet: "+level+" ") || !strings.Contains(buf.String(), file) {
					t.Errorf("plan does not say it defers %s:\n%s", o, buf.String())
				}
			}
			text, err := a.Health(time.Now(), time.Minute)
			if err != nil || (len(tc.owned) > 0) != strings.Contains(text, "defers to the kubelet") {
				t.Errorf("health %q, %v", text, err)
			}
			for _, lf := range []string{"kubepods/memory.min", "qos/memory.low", "pod/memory.low", "container/memory.min", "container/memory.high"} {
				level, file, _ := strings.Cut(lf, "/")
				want := 0.0
				if owned[lf] {
					want = 1
				}
				if got := testutil.ToFloat64(m.owned.WithLabelValues(level, file)); got != want {
					t.Errorf("gofit_node_kubelet_owned{level=%q,file=%q} = %v, want %v", level, file, got, want)
				}
			}
			// Reset gives back what the agent wrote and nothing else.
			before := snapshot(t, l.Mount)
			a.Reset()
			for p, v := range snapshot(t, l.Mount) {
				file := filepath.Base(p)
				if file != "memory.min" && file != "memory.low" && file != "memory.high" {
					continue
				}
				if level := levelOf(t, l, filepath.Dir(p)); owned[level+"/"+file] && v != before[p] {
					t.Errorf("reset wrote %s, the kubelet's", strings.TrimPrefix(p, l.Mount))
				}
			}
		})
	}
	if _, err := KubeletMode("hard", ""); err == nil || !strings.Contains(err.Error(), "--kubelet-memory-qos") {
		t.Errorf("bad mode: %v", err)
	}
}

// levelOf names a cgroup directory's level in the fixture's cgroupfs tree.
func levelOf(t *testing.T, l *Layout, dir string) string {
	t.Helper()
	rel, err := filepath.Rel(filepath.Join(l.Mount, "kubepods"), dir)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	switch {
	case rel == ".":
		return "kubepods"
	case len(parts) == 1 && !strings.HasPrefix(parts[0], "pod"):
		return "qos"
	case strings.HasPrefix(parts[len(parts)-1], "pod"):
		return "pod"
	}
	return "container"
}

// TestForeignWrites: a file the agent owns that someone else changed
// between two passes is reported (the log, the metric) and written back;
// the files it leaves to the kubelet never are.
func TestForeignWrites(t *testing.T) {
	l, st := nodeFixture(t)
	k, _ := KubeletMode(KubeletNone, "v1.37.2")
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a := New(l, Options{Policy: memqos.PolicyAuto, Kubelet: k, Metrics: m})
	a.Reconcile(st)
	if rep := a.Reconcile(st); len(rep.Foreign) != 0 || len(rep.Apply.Changed) != 0 {
		t.Fatalf("a quiet second pass: foreign %+v, changed %+v", rep.Foreign, rep.Apply.Changed)
	}
	low := filepath.Join(l.Mount, "kubepods", "burstable", "memory.low")
	want := readVal(t, low)
	// A kubelet restart resets burstable memory.low; it also writes a
	// container's memory.low (0 under None) on resize: that one is its.
	os.WriteFile(low, []byte("0\n"), 0o644)
	ctr := filepath.Join(l.Mount, staticDir, "aaa777", "memory.low")
	os.WriteFile(ctr, []byte("7\n"), 0o644)
	rep := a.Reconcile(st)
	if len(rep.Foreign) != 1 || rep.Foreign[0].File != "memory.low" || rep.Foreign[0].Level != memqos.LevelQoS || rep.Foreign[0].Found != 0 {
		t.Fatalf("foreign %+v", rep.Foreign)
	}
	if got := readVal(t, low); got != want {
		t.Errorf("burstable memory.low %s, want %s back", got, want)
	}
	if got := readVal(t, ctr); got != "7" {
		t.Errorf("container memory.low %s: the kubelet's, want it left", got)
	}
	if got := testutil.ToFloat64(m.foreign.WithLabelValues("qos", "memory.low")); got != 1 {
		t.Errorf("gofit_node_foreign_writes_total{qos,memory.low} = %v", got)
	}
}

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

// TestForeignWritesNotTheAgentsOwn: what the agent itself left, or held
// back, is never reported as someone else's write. A file it set to
// Unlimited reads back as the kernel's maximum on v1 (page-rounded, not
// -1); and when the writer holds back a min/low/high group, its error
// names only the value that broke the order, not the others it held.
func TestForeignWritesNotTheAgentsOwn(t *testing.T) {
	l, _ := nodeFixture(t)
	a := New(l, Options{Policy: memqos.PolicyAuto})
	dir := t.TempDir()
	for _, f := range []string{memqos.FileMin, memqos.FileLow, memqos.FileHigh} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	val := func(file string, v int64) manage.Value { return manage.Value{Dir: dir, File: file, Value: v} }

	// Unlimited left, the kernel's maximum found.
	a.files.written = map[fileKey]int64{{dir, memqos.FileHigh}: manage.Unlimited}
	rep := Report{Values: []manage.Value{val(memqos.FileHigh, 100<<20)}}
	rep.Apply.Changed = []manage.Change{{Value: val(memqos.FileHigh, 100<<20), Old: 9223372036854771712}}
	a.files.noteForeign(&rep)
	if len(rep.Foreign) != 0 {
		t.Errorf("Unlimited read back as the v1 maximum: foreign %+v", rep.Foreign)
	}

	// A group held back (min above low), then written.
	a.files.written = nil
	held := []manage.Value{val(memqos.FileMin, 10<<20), val(memqos.FileLow, 5<<20), val(memqos.FileHigh, 50<<20)}
	rep = Report{Values: held, Apply: a.files.writer.Apply(held)}
	if len(rep.Apply.Errors) == 0 || len(rep.Apply.Changed) != 0 {
		t.Fatalf("want the group held back: %+v", rep.Apply)
	}
	a.files.noteForeign(&rep)
	ok := []manage.Value{val(memqos.FileMin, 1<<20), val(memqos.FileLow, 5<<20), val(memqos.FileHigh, 50<<20)}
	rep = Report{Values: ok, Apply: a.files.writer.Apply(ok)}
	if len(rep.Apply.Errors) != 0 || len(rep.Apply.Changed) == 0 {
		t.Fatalf("want the group written: %+v", rep.Apply)
	}
	a.files.noteForeign(&rep)
	if len(rep.Foreign) != 0 {
		t.Errorf("values the writer held back reported as another writer's: %+v", rep.Foreign)
	}
}

// TestLiveWithBadConfig: a QoS ConfigMap that does not parse makes the
// agent unhealthy (it writes nothing) but not dead: a liveness probe that
// asked /healthz would restart it in a loop that cannot fix the
// ConfigMap. Only a loop that stops coming round is dead.
func TestLiveWithBadConfig(t *testing.T) {
	l, _ := nodeFixture(t)
	a := New(l, Options{Policy: memqos.PolicyAuto})
	now := time.Now()
	if err := a.Live(now, time.Minute); err != nil {
		t.Errorf("before the loop starts (bounded by --sync-timeout): %v", err)
	}
	a.health.tick(now)
	a.health.badConfig(errors.New("configmap kube-system/memory-qos: resource-qos-config: bad"), true)
	if _, err := a.Health(now, time.Minute); err == nil {
		t.Error("healthy with a bad ConfigMap and nothing in force")
	}
	if err := a.Live(now.Add(30*time.Second), time.Minute); err != nil {
		t.Errorf("bad ConfigMap, loop coming round: not live: %v", err)
	}
	if err := a.Live(now.Add(2*time.Minute), time.Minute); err == nil {
		t.Error("live two minutes after the loop last came round")
	}
}

// setImmutable sets or clears the immutable flag of file, which makes the
// kernel refuse root's writes (EPERM) as nsdelegate does to a cgroup
// namespace's root.
func setImmutable(file string, on bool) error {
	const immutable = 0x10 // FS_IMMUTABLE_FL
	fd, err := unix.Open(file, unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetInt(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= immutable
	} else {
		flags &^= immutable
	}
	return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, flags)
}

// TestOwnCgroupNotWritten: where cgroup2 is mounted with nsdelegate, the
// kernel refuses the agent writes to its own container's cgroup (its
// cgroup namespace's root). The agent plans for its own pod like any
// other, so it met EPERM there every pass: an error logged and counted
// each time, and the write-errors alert firing for good (seen on the
// e2e node). Now that cgroup, known by this process in its cgroup.procs,
// is left alone after the first refusal, while a refused write anywhere
// else is still an error.
func TestOwnCgroupNotWritten(t *testing.T) {
	l, st := nodeFixture(t)
	own := filepath.Join(l.Mount, sidecarDir, "ddd000")
	other := filepath.Join(l.Mount, sidecarDir, "eee111")
	if err := os.WriteFile(filepath.Join(own, "cgroup.procs"), []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{own, other} {
		f := filepath.Join(d, "memory.high")
		if err := setImmutable(f, true); err != nil {
			t.Skipf("the immutable flag, which stands in for nsdelegate here, is not on this filesystem: %v", err)
		}
		t.Cleanup(func() { setImmutable(f, false) }) // before t.TempDir's removal
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	a := New(l, Options{Policy: memqos.PolicyAuto, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	rep := a.Reconcile(st)
	if len(rep.Apply.Errors) != 1 || !strings.Contains(rep.Apply.Errors[0].Error(), "eee111") {
		t.Fatalf("errors %v, want one, for the other container's memory.high", rep.Apply.Errors)
	}
	if !strings.Contains(logs.String(), "not writing the agent's own cgroup") || !strings.Contains(logs.String(), "ddd000") {
		t.Errorf("the log does not say why its own cgroup is left:\n%s", logs.String())
	}
	if got := readVal(t, filepath.Join(l.Mount, guaranteeed, "ccc999", "memory.low")); got != "536870912" {
		t.Errorf("the rest of the node: ccc999 memory.low %s, want 536870912", got)
	}
	// Later passes do not try it again, and say so no more.
	setImmutable(filepath.Join(other, "memory.high"), false)
	logs.Reset()
	for range 2 {
		rep = a.Reconcile(st)
		if len(rep.Apply.Errors) != 0 {
			t.Errorf("a later pass: errors %v", rep.Apply.Errors)
		}
		for _, c := range rep.Apply.Changed {
			if c.Dir == own {
				t.Errorf("a later pass wrote its own cgroup: %+v", c)
			}
		}
	}
	if strings.Contains(logs.String(), "own cgroup") {
		t.Errorf("said again:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(m.errors); got != 1 {
		t.Errorf("gofit_node_cgroup_write_errors_total = %v, want 1 (the other container's)", got)
	}
	if got := readVal(t, filepath.Join(other, "memory.high")); got != "2147483648" {
		t.Errorf("the other container's memory.high %s once writable, want 2147483648", got)
	}
}

// TestConfine: the agent's kubepods mount is writable for uid 0, so the
// kernel would let it write any file there (issue 51, item 10). The
// agent writes only the memory files it owns (Writable), below kubepods;
// anything else a plan could hold is dropped, logged and counted.
func TestConfine(t *testing.T) {
	l, _ := nodeFixture(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	a := New(l, Options{Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	kp := filepath.Join(l.Mount, filepath.FromSlash(l.Kubepods))
	pod := filepath.Join(kp, "burstable", "pod1")
	vals := []manage.Value{
		{Dir: pod, File: memqos.FileLow, Value: 1},
		{Dir: kp, File: memqos.FileMin, Value: 0},
		{Dir: pod, File: "memory.max", Value: 1},
		{Dir: pod, File: "cgroup.kill", Value: 1},
		{Dir: pod, File: "cgroup.procs", Value: 1},
		{Dir: filepath.Join(l.Mount, "system.slice"), File: memqos.FileLow, Value: 1},
		{Dir: filepath.Join(pod, "..", "..", "..", "system.slice"), File: memqos.FileLow, Value: 1},
		{Dir: kp + "-evil", File: memqos.FileLow, Value: 1},
	}
	got := a.files.confine(vals)
	if len(got) != 2 || got[0].Dir != pod || got[1].Dir != kp {
		t.Errorf("kept %+v, want the pod's memory.low and kubepods' memory.min only", got)
	}
	if n := testutil.ToFloat64(m.errors); n != 6 {
		t.Errorf("%v refusals counted, want 6", n)
	}
	if !strings.Contains(logs.String(), "cgroup.kill") {
		t.Errorf("the log does not name the refused file:\n%s", logs.String())
	}
}

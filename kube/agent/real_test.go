package agent

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// kubeletTree builds the kubelet's layout for driver under dir (a real
// cgroup), with one live process in each container cgroup, and removes it
// all when the test ends. It returns the layout's cgroup root below the
// mount's root (to hand to Detect) and the container dirs by pod name.
func kubeletTree(t *testing.T, dir string, v2 bool, driver string, pods []*corev1.Pod) map[string]string {
	t.Helper()
	var made []string
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
		for i := len(made) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(made[i]); err != nil && !os.IsNotExist(err) {
				t.Errorf("cleanup: rmdir %s: %v", made[i], err)
			}
		}
	})
	mk := func(p string) string {
		d := filepath.Join(dir, filepath.FromSlash(p))
		if v2 {
			// v2 hands the memory controller down one level at a time.
			parent := filepath.Dir(d)
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
				t.Fatalf("enable memory in %s: %v", parent, err)
			}
		}
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		made = append(made, d)
		return d
	}
	// The layout's own path functions name the cgroups, so the tree is
	// what Detect and Reconcile look for with either driver.
	l := &Layout{Driver: driver, Kubepods: "/kubepods"}
	if driver == DriverSystemd {
		l.Kubepods = "/kubepods.slice"
	}
	mk(l.Kubepods)
	mk(l.QoSPath(corev1.PodQOSBurstable))
	mk(l.QoSPath(corev1.PodQOSBestEffort))
	out := map[string]string{}
	for _, p := range pods {
		pp := l.PodPath(memqos.KubeQoS(p), p.UID)
		mk(pp)
		runtime, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
		name := id
		if driver == DriverSystemd {
			name = "cri-containerd-" + id + ".scope"
			if runtime == "cri-o" {
				name = "crio-" + id + ".scope"
			}
		}
		cd := mk(path.Join(pp, name))
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		if err := os.WriteFile(filepath.Join(cd, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatalf("move pid into %s: %v", cd, err)
		}
		out[p.Name] = cd
	}
	return out
}

func realPod(name, uid, id, req, lim string) *corev1.Pod {
	rr := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if req != "" {
		rr.Requests[corev1.ResourceMemory] = resource.MustParse(req)
	}
	if lim != "" {
		rr.Limits[corev1.ResourceMemory] = resource.MustParse(lim)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: rr}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "containerd://" + id}}},
	}
}

// readValue reads a cgroup number file as the agent's values are
// expressed: bytes, or manage.Unlimited for "max" and v1's page-rounded
// unlimited.
func readValue(t *testing.T, dir, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := manage.ParseValue(file, string(b))
	if err != nil {
		t.Fatal(err)
	}
	if v >= 1<<62 {
		return manage.Unlimited
	}
	return v
}

// TestRealCgroups runs the agent on real memory cgroups laid out as the
// kubelet does, with either driver, under the test's own cgroup (in the
// VM, a populated non-root one), with a live process in every container
// cgroup. On v2 it reads back memory.min, memory.low and memory.high at
// every level, on v1 the soft limits; then a second pass must find
// nothing to change (the kernel keeps what was written, page-rounded),
// and a pod that goes away gets kernel defaults back.
func TestRealCgroups(t *testing.T) {
	for _, driver := range []string{DriverCgroupfs, DriverSystemd} {
		t.Run(driver, func(t *testing.T) { testRealCgroups(t, driver) })
	}
}

func testRealCgroups(t *testing.T, driver string) {
	g := cgtest.NewGroup(t)
	if g.Memory == nil {
		t.Skip("skipping: no memory cgroup")
	}
	v2 := g.Memory.Version == 2
	// A Guaranteed pod following the ConfigMap, with a request that is not
	// a whole number of pages (100M), so min and low must be page-rounded
	// as the kernel stores them; a Burstable Go service under auto, with a
	// GOMEMLIMIT that lifts its memory.high; a BestEffort hog under auto.
	lsr := realPod("lsr", "cccc-3", "c3lsr", "100M", "100M")
	lsr.Annotations = map[string]string{memqos.AnnotationMemoryQOS: `{"policy":"default"}`}
	for _, rl := range []corev1.ResourceList{lsr.Spec.Containers[0].Resources.Requests, lsr.Spec.Containers[0].Resources.Limits} {
		rl[corev1.ResourceCPU] = resource.MustParse("100m") // Guaranteed: CPU too
	}
	ls := realPod("ls", "aaaa-1", "c1ls", "64Mi", "256Mi")
	ls.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "230MiB"}}
	be := realPod("be", "bbbb-2", "c2be", "", "")
	pods := []*corev1.Pod{lsr, ls, be}
	dirs := kubeletTree(t, g.Memory.Dir, v2, driver, pods)

	mount, _, err := MemoryMount("/")
	if err != nil {
		t.Fatalf("find the host's memory mount: %v", err)
	}
	if !strings.HasPrefix(g.Memory.Dir, mount+"/") {
		t.Skipf("skipping: the test cgroup %s is not under %s (cgroup namespace?)", g.Memory.Dir, mount)
	}
	rel, _ := relSlash(mount, g.Memory.Dir)
	l, err := Detect("/", rel)
	if err != nil {
		t.Fatal(err)
	}
	if l.Driver != driver || l.Version != g.Memory.Version {
		t.Fatalf("detected driver %s v%d, want %s v%d", l.Driver, l.Version, driver, g.Memory.Version)
	}
	cfg, err := memqos.ParseConfig([]byte(`{"clusterStrategy": {"lsrClass": {"memoryQOS":
		{"enable": true, "minLimitPercent": 50, "lowLimitPercent": 75, "throttlingPercent": 0}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := New(l, Options{Policy: memqos.PolicyAuto})
	st := State{Pods: pods, Config: cfg, NodeAllocatable: 1 << 30}
	rep := a.Reconcile(st)
	if len(rep.Apply.Errors) > 0 {
		t.Fatalf("errors: %v", rep.Apply.Errors)
	}
	for _, w := range rep.Warnings {
		t.Logf("warning: %s", w)
	}
	kp, burst, bestEffort := l.dir(l.Kubepods), l.dir(l.QoSPath(corev1.PodQOSBurstable)), l.dir(l.QoSPath(corev1.PodQOSBestEffort))
	if want := filepath.Join(g.Memory.Dir, filepath.Base(kp)); kp != want {
		t.Fatalf("kubepods found at %s, made at %s", kp, want)
	}
	page := int64(os.Getpagesize())
	floor := func(v int64) int64 { return v / page * page }
	lsrMin, lsrLow := floor(50_000_000), floor(75_000_000)
	// The Go service: 64Mi + 80% of the way to 256Mi is below GOMEMLIMIT
	// 230Mi plus its non-Go budget (230Mi/16), which memory.high is raised to.
	lsHigh := (230<<20 + 230<<20/16 + page - 1) / page * page

	type want struct {
		dir, file string
		v         int64
	}
	var wants []want
	if v2 {
		wants = []want{
			{dirs["lsr"], "memory.min", lsrMin}, {dirs["lsr"], "memory.low", lsrLow}, {dirs["lsr"], "memory.high", manage.Unlimited},
			{filepath.Dir(dirs["lsr"]), "memory.min", lsrMin}, {filepath.Dir(dirs["lsr"]), "memory.low", lsrLow},
			{dirs["ls"], "memory.min", 0}, {dirs["ls"], "memory.low", 64 << 20}, {dirs["ls"], "memory.high", lsHigh},
			{filepath.Dir(dirs["ls"]), "memory.low", 64 << 20},
			{dirs["be"], "memory.low", 0}, {dirs["be"], "memory.high", 512 << 20},
			{burst, "memory.min", 0}, {burst, "memory.low", 64 << 20},
			{bestEffort, "memory.min", 0}, {bestEffort, "memory.low", 0},
			{kp, "memory.min", lsrMin}, {kp, "memory.low", lsrLow + 64<<20},
		}
	} else {
		wants = []want{
			{dirs["lsr"], "memory.soft_limit_in_bytes", floor(100_000_000)},
			{dirs["ls"], "memory.soft_limit_in_bytes", 64 << 20},
			{dirs["be"], "memory.soft_limit_in_bytes", 0},
		}
	}
	for _, w := range wants {
		if got := readValue(t, w.dir, w.file); got != w.v {
			t.Errorf("%s/%s = %s, want %s", w.dir, w.file, manage.FormatValue(got), manage.FormatValue(w.v))
		}
	}
	// Everything the agent planned is what the kernel now holds.
	checkHolds(t, rep.Values, v2)
	if v2 {
		checkNested(t, kp)
	}

	// The kernel stores what was written (page-rounded values, "max"): a
	// second pass writes nothing.
	if rep := a.Reconcile(st); len(rep.Apply.Changed) != 0 || len(rep.Apply.Errors) != 0 {
		for _, c := range rep.Apply.Changed {
			t.Errorf("second pass changed %s from %s to %s", c.Path(), manage.FormatValue(c.Old), manage.FormatValue(c.Value.Value))
		}
		t.Errorf("second pass errors: %v", rep.Apply.Errors)
	}

	// The LS pod leaves the API while the kubelet still runs it (a
	// lagging watch looks the same): nothing of it changes, however long.
	left := State{Pods: []*corev1.Pod{lsr, be}, Config: cfg, NodeAllocatable: 1 << 30, Now: time.Now()}
	for _, after := range []time.Duration{0, 2 * DefaultResetAfter} {
		left.Now = left.Now.Add(after)
		rep = a.Reconcile(left)
		if len(rep.Apply.Errors) > 0 || len(rep.Apply.Changed) > 0 || rep.Unknown != 1 {
			t.Fatalf("running pod out of the API's view: errors %v, changed %v, unknown %d", rep.Apply.Errors, rep.Apply.Changed, rep.Unknown)
		}
	}
	// Once the kubelet runs nothing in it either (and it has been out of
	// the view for DefaultResetAfter), it gets kernel defaults back and
	// the sums above it shrink, children first.
	stopProcs(t, dirs["ls"])
	rep = a.Reconcile(left)
	if len(rep.Apply.Errors) > 0 {
		t.Fatalf("errors: %v", rep.Apply.Errors)
	}
	if v2 {
		for _, w := range []want{
			{dirs["ls"], "memory.low", 0}, {dirs["ls"], "memory.high", manage.Unlimited}, {filepath.Dir(dirs["ls"]), "memory.low", 0},
			{burst, "memory.low", 0}, {kp, "memory.low", lsrLow}, {kp, "memory.min", lsrMin},
		} {
			if got := readValue(t, w.dir, w.file); got != w.v {
				t.Errorf("after the LS pod left: %s/%s = %s, want %s", w.dir, w.file, manage.FormatValue(got), manage.FormatValue(w.v))
			}
		}
		checkNested(t, kp)
	} else if got := readValue(t, dirs["ls"], "memory.soft_limit_in_bytes"); got != manage.Unlimited {
		t.Errorf("removed pod soft limit %s, want unlimited", manage.FormatValue(got))
	}
	checkHolds(t, rep.Values, v2)
}

// stopProcs kills the processes of a cgroup and waits until it is empty.
func stopProcs(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes %v still there", dir, pids)
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkHolds reads back every planned value. On v1 the v2-only files are
// absent, and the agent skips them.
func checkHolds(t *testing.T, vals []manage.Value, v2 bool) {
	t.Helper()
	for _, v := range vals {
		if _, err := os.Stat(v.Path()); !v2 && os.IsNotExist(err) {
			continue
		}
		if got := readValue(t, v.Dir, v.File); got != v.Value {
			t.Errorf("%s holds %s, the agent planned %s (%s)", v.Path(), manage.FormatValue(got), manage.FormatValue(v.Value), v.Reason)
		}
	}
}

// checkNested walks a v2 tree and fails where a cgroup's memory.min or
// memory.low is below the sum of its children's: the agent's values must
// be consistent at every level, as the kernel distributes protection
// top-down in proportion.
func checkNested(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sumMin, sumLow int64
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		c := filepath.Join(dir, e.Name())
		sumMin += readValue(t, c, "memory.min")
		sumLow += readValue(t, c, "memory.low")
		checkNested(t, c)
	}
	if mn := readValue(t, dir, "memory.min"); mn < sumMin {
		t.Errorf("%s: memory.min %d below its children's sum %d", dir, mn, sumMin)
	}
	if lo := readValue(t, dir, "memory.low"); lo < sumLow {
		t.Errorf("%s: memory.low %d below its children's sum %d", dir, lo, sumLow)
	}
}

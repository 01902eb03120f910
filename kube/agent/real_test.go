package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/internal/cgtest"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// kubeletTree builds a cgroupfs-driver kubelet layout under dir (a real
// cgroup), with one live process in each container cgroup, and removes it
// all when the test ends. It returns the container dirs by pod name.
func kubeletTree(t *testing.T, dir string, v2 bool, pods []*corev1.Pod) map[string]string {
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
	mk := func(parent, name string) string {
		if v2 {
			// v2 hands the memory controller down one level at a time.
			if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
				t.Fatalf("enable memory in %s: %v", parent, err)
			}
		}
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		made = append(made, d)
		return d
	}
	kp := mk(dir, "kubepods")
	qos := map[corev1.PodQOSClass]string{corev1.PodQOSGuaranteed: kp, corev1.PodQOSBurstable: mk(kp, "burstable"), corev1.PodQOSBestEffort: mk(kp, "besteffort")}
	out := map[string]string{}
	for _, p := range pods {
		pd := mk(qos[memqos.KubeQoS(p)], "pod"+string(p.UID))
		_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
		cd := mk(pd, id)
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

// TestRealCgroups runs the agent on real memory cgroups laid out as the
// kubelet does (cgroupfs driver) under the test's own cgroup, with live
// processes: on v1 it sets soft limits, on v2 memory.min/low/high; a pod
// that goes away gets kernel defaults back.
func TestRealCgroups(t *testing.T) {
	g := cgtest.NewGroup(t)
	if g.Memory == nil {
		t.Skip("skipping: no memory cgroup")
	}
	v2 := g.Memory.Version == 2
	ls := realPod("ls", "aaaa-1", "c1ls", "64Mi", "256Mi")
	be := realPod("be", "bbbb-2", "c2be", "", "")
	pods := []*corev1.Pod{ls, be}
	dirs := kubeletTree(t, g.Memory.Dir, v2, pods)

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
	if l.Driver != DriverCgroupfs {
		t.Fatalf("driver %s", l.Driver)
	}
	a := New(l, Options{Policy: memqos.PolicyAuto})
	st := State{Pods: pods, Config: &memqos.Config{}, NodeAllocatable: 1 << 30}
	rep := a.Reconcile(st)
	if len(rep.Apply.Errors) > 0 {
		t.Fatalf("errors: %v", rep.Apply.Errors)
	}
	read := func(dir, file string) int64 {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return memqos.Max
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v2 {
		if got := read(dirs["ls"], "memory.low"); got != 64<<20 {
			t.Errorf("ls memory.low %d, want the request", got)
		}
		if got := read(dirs["ls"], "memory.high"); got != (64<<20+(192<<20)*80/100)/4096*4096 {
			t.Errorf("ls memory.high %d", got)
		}
		if got := read(dirs["be"], "memory.high"); got != 512<<20 {
			t.Errorf("be memory.high %d, want half of node allocatable", got)
		}
		if got := read(filepath.Join(g.Memory.Dir, "kubepods"), "memory.low"); got != 64<<20 {
			t.Errorf("kubepods memory.low %d", got)
		}
	} else {
		if got := read(dirs["ls"], "memory.soft_limit_in_bytes"); got != 64<<20 {
			t.Errorf("ls soft limit %d, want the request", got)
		}
		if got := read(dirs["be"], "memory.soft_limit_in_bytes"); got != 0 {
			t.Errorf("be soft limit %d, want 0", got)
		}
	}
	if rep := a.Reconcile(st); len(rep.Apply.Changed) != 0 {
		t.Errorf("second pass changed %d values", len(rep.Apply.Changed))
	}
	// The LS pod leaves the API: its cgroup gets kernel defaults back.
	a.Reconcile(State{Pods: []*corev1.Pod{be}, Config: &memqos.Config{}, NodeAllocatable: 1 << 30})
	if v2 {
		if got := read(dirs["ls"], "memory.low"); got != 0 {
			t.Errorf("removed pod memory.low %d, want 0", got)
		}
		if got := read(dirs["ls"], "memory.high"); got != memqos.Max {
			t.Errorf("removed pod memory.high %d, want max", got)
		}
	} else if got := read(dirs["ls"], "memory.soft_limit_in_bytes"); got < 1<<62 {
		t.Errorf("removed pod soft limit %d, want unlimited", got)
	}
}

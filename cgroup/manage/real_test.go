package manage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

// Real-kernel tests of the writes. They run on the host's cgroups (v1 or
// hybrid here) and, through tools/vmtest, on a v2 and a hybrid kernel in
// a VM; tests of v2-only files skip elsewhere with one line.

// TestMain lets the test binary act as cgtest's children inside a group.
func TestMain(m *testing.M) { cgtest.Main(m, nil) }

func helper(g *manage.Group, mode string) *exec.Cmd { return cgtest.Child(g, mode) }

// readFile returns a cgroup file's content, trimmed.
func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// keyed parses a flat keyed file such as memory.events.
func keyed(t *testing.T, dir, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, l := range strings.Split(readFile(t, dir, name), "\n") {
		var k string
		var v int64
		if _, err := fmt.Sscan(l, &k, &v); err == nil {
			out[k] = v
		}
	}
	return out
}

func TestCommandStartsInsideGroup(t *testing.T) {
	g := cgtest.NewGroup(t)
	cmd := helper(g, "cgroup")
	if cmd.SysProcAttr == nil {
		t.Fatal("Command left SysProcAttr nil: callers could not add to it")
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	// Every hierarchy of the group appears in the process's own view from
	// its first instruction: it was never outside.
	want := map[string]bool{}
	for _, n := range []*cgroup.Node{g.CPU, g.Memory, g.Unified} {
		if n != nil {
			want[n.Path] = true
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && want[parts[2]] {
			delete(want, parts[2])
		}
	}
	if len(want) > 0 {
		t.Errorf("the process did not start in %v; /proc/self/cgroup:\n%s", want, out)
	}
	v2Only := g.CPU.Version == 2 && g.Memory.Version == 2 && len(g.Dirs()) == 1
	if direct := cmd.SysProcAttr.UseCgroupFD; v2Only && !direct {
		t.Errorf("on cgroup v2 Command used the /bin/sh trampoline, want clone3 CLONE_INTO_CGROUP")
	} else if !v2Only && direct {
		t.Errorf("Command used CLONE_INTO_CGROUP for a group spanning v1 hierarchies %v", g.Dirs())
	}
	t.Logf("clone into cgroup: %v (%s)", cmd.SysProcAttr.UseCgroupFD, cmd.Path)
}

func TestMemoryValuesV2(t *testing.T) {
	g := cgtest.NewGroup(t)
	cgtest.NeedV2(t, g)
	dir := g.Memory.Dir
	for _, step := range []struct {
		set  func(int64) error
		file string
		v    int64
		want string
	}{
		{g.SetMemoryMax, "memory.max", 96 << 20, "100663296"},
		{g.SetMemoryHigh, "memory.high", 80 << 20, "83886080"},
		{g.SetMemoryLow, "memory.low", 16 << 20, "16777216"},
		{g.SetMemoryMin, "memory.min", 8 << 20, "8388608"},
		{g.SetMemoryMin, "memory.min", 0, "0"},
		{g.SetMemoryLow, "memory.low", -1, "0"},
		{g.SetMemoryHigh, "memory.high", 0, "max"},
	} {
		if err := step.set(step.v); err != nil {
			t.Fatalf("set %s to %d: %v", step.file, step.v, err)
		}
		if got := readFile(t, dir, step.file); got != step.want {
			t.Errorf("%s = %q after setting %d, want %q", step.file, got, step.v, step.want)
		}
	}
	// A memory limit means what it says: no swap behind it, where the
	// kernel accounts swap at all.
	if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
		if got := readFile(t, dir, "memory.swap.max"); got != "0" {
			t.Errorf("memory.swap.max = %q after SetMemoryMax, want 0", got)
		}
	} else {
		t.Logf("no memory.swap.max on this kernel (%v)", err)
	}
	if err := g.SetOOMGroup(true); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, dir, "memory.oom.group"); got != "1" {
		t.Errorf("memory.oom.group = %q, want 1", got)
	}
	l, err := g.MemoryLimits()
	if err != nil || l.Max != 96<<20 || l.High != 0 || l.MaxGroup != g.Memory.Path {
		t.Errorf("limits read back = %+v, %v", l, err)
	}
}

// With memory.oom.group on, one process exceeding the limit takes the
// whole group down, and memory.events counts it.
func TestOOMGroupKillsAll(t *testing.T) {
	g := cgtest.NewGroup(t)
	cgtest.NeedV2(t, g)
	if err := g.SetMemoryMax(48 << 20); err != nil {
		t.Fatal(err)
	}
	if err := g.SetOOMGroup(true); err != nil {
		t.Fatal(err)
	}
	sleeper := helper(g, "sleep")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Wait() }()
	err := helper(g, "hog").Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("a 256MiB allocation in a 48MiB group ended with %v, want SIGKILL", err)
	}
	select {
	case err := <-slept:
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the sleeping process ended with %v, want SIGKILL from the group OOM kill", err)
		}
	case <-time.After(10 * time.Second):
		sleeper.Process.Kill()
		t.Fatal("the sleeping process survived an OOM kill with memory.oom.group=1")
	}
	ev := keyed(t, g.Memory.Dir, "memory.events")
	if ev["oom_kill"] < 2 || ev["oom"] < 1 || ev["max"] < 1 {
		t.Errorf("memory.events = %v, want oom >= 1, oom_kill >= 2 (both processes), max >= 1", ev)
	}
	if _, ok := ev["oom_group_kill"]; ok && ev["oom_group_kill"] < 1 {
		t.Errorf("memory.events oom_group_kill = %d, want >= 1", ev["oom_group_kill"])
	}
	m, err := g.MemoryStats()
	if err != nil || m.OOMKills != uint64(ev["oom_kill"]) || m.MaxHits != uint64(ev["max"]) || m.OOMs != uint64(ev["oom"]) {
		t.Errorf("MemoryStats = %+v, %v; memory.events says %v", m, err, ev)
	}
	// The kernel reclaimed before it killed: that stall is memory pressure.
	if m.PSI == nil || m.PSI.Some.Total <= 0 {
		t.Errorf("memory.pressure after reclaim and an OOM kill = %+v, want some stall time", m.PSI)
	}
}

// Processes competing for the CPUs show up in the group's PSI (v2, or the
// v2 group beside the v1 controllers on a hybrid host).
func TestCPUPressure(t *testing.T) {
	g := cgtest.NewGroup(t)
	if g.Unified == nil && g.CPU.Version != 2 {
		t.Skip("skipping: no cgroup v2 hierarchy for PSI here")
	}
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		t.Skipf("skipping: this kernel has no PSI: %v", err)
	}
	before, err := g.CPUStats()
	if err != nil {
		t.Fatal(err)
	}
	if before.PSI == nil {
		t.Fatalf("no cpu.pressure read for %v", g.Dirs())
	}
	// One more spinner than CPUs: someone is always runnable and waiting.
	var cmds []*exec.Cmd
	for range runtime.NumCPU() + 1 { // NumCPU counts the affinity mask
		cmd := helper(g, "spin")
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := g.CPUStats()
	if err != nil {
		t.Fatal(err)
	}
	if after.PSI.Some.Total <= before.PSI.Some.Total {
		t.Errorf("cpu.pressure some total did not grow with %d spinners: %v -> %v", len(cmds), before.PSI.Some.Total, after.PSI.Some.Total)
	}
	if after.Usage-before.Usage < 500*time.Millisecond {
		t.Errorf("CPU usage grew by %v only", after.Usage-before.Usage)
	}
}

// NewChild works from inside a populated v2 cgroup, as from a systemd
// service: its processes move into a leaf, the controllers are enabled, the
// leaf stays and goes with the group.
func TestNewChildFromPopulatedCgroup(t *testing.T) {
	parent := cgtest.NewGroup(t)
	cgtest.NeedV2(t, parent)
	// A process lives in the parent, and a previous half-done attempt left
	// the threaded cpu controller on (then memory fails with EOPNOTSUPP).
	sleeper := helper(parent, "sleep")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	if err := os.WriteFile(filepath.Join(parent.Memory.Dir, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
		t.Fatalf("pre-enable the threaded cpu controller in a populated group: %v", err)
	}
	child, err := manage.NewChild(parent.Cgroups, "trial")
	if err != nil {
		t.Fatalf("NewChild under a populated cgroup: %v", err)
	}
	if sc := strings.Fields(readFile(t, parent.Memory.Dir, "cgroup.subtree_control")); !slices.Contains(sc, "cpu") || !slices.Contains(sc, "memory") {
		t.Errorf("parent subtree_control = %v, want cpu and memory", sc)
	}
	leaf := filepath.Join(parent.Memory.Dir, manage.LeafName)
	if got := readFile(t, leaf, "cgroup.procs"); got != fmt.Sprint(sleeper.Process.Pid) {
		t.Errorf("leaf holds %q, want the parent's process %d", got, sleeper.Process.Pid)
	}
	if err := child.SetCPU(0.5, 0); err != nil {
		t.Fatal(err)
	}
	if err := child.SetMemoryMax(64 << 20); err != nil {
		t.Fatal(err)
	}
	// A child of the leaf's cgroup goes beside the leaf, not inside it.
	inLeaf := parent.FS().Bind(cgroup.Cgroups{CPU: leafNode(parent.Memory), Memory: leafNode(parent.Memory), CPUAcct: leafNode(parent.Memory)})
	sib, err := manage.NewChild(inLeaf, "sibling")
	if err != nil {
		t.Fatalf("NewChild from the leaf: %v", err)
	}
	if want := filepath.Join(parent.Memory.Dir, "sibling"); sib.Dirs()[0] != want {
		t.Errorf("NewChild from the leaf made %v, want %s", sib.Dirs(), want)
	}
	if err := sib.Remove(context.Background()); err != nil {
		t.Error(err)
	}
	if err := child.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Removing the parent takes the leaf and its process with it.
	if err := parent.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leaf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", leaf, err)
	}
}

func leafNode(n *cgroup.Node) *cgroup.Node {
	return &cgroup.Node{Version: n.Version, Path: n.Path + "/" + manage.LeafName, Dir: filepath.Join(n.Dir, manage.LeafName), Top: n.Top}
}

// A controller the parent does not hand down is named in the error, which
// is not a permission error (no "needs root" hint applies).
func TestNewChildControllerNotDelegated(t *testing.T) {
	g := cgtest.NewGroup(t)
	cgtest.NeedV2(t, g)
	sc := filepath.Join(g.Memory.Dir, "cgroup.subtree_control")
	if err := os.WriteFile(sc, []byte("+cpu"), 0); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(g.Memory.Dir, "cpu-only")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	n := &cgroup.Node{Version: 2, Path: g.Memory.Path + "/cpu-only", Dir: inner, Top: g.Memory.Top}
	_, err := manage.NewChild(g.FS().Bind(cgroup.Cgroups{CPU: n, CPUAcct: n, CPUSet: n, Memory: n}), "x")
	if !errors.Is(err, manage.ErrNotDelegated) || !strings.Contains(err.Error(), "memory") || errors.Is(err, os.ErrPermission) {
		t.Errorf("NewChild under a group without memory: %v, want ErrNotDelegated naming memory", err)
	}
	if _, serr := os.Stat(filepath.Join(inner, "x")); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a failed NewChild left %s/x behind", inner)
	}
}

// RemoveTree kills what runs in a nested group it did not create and
// removes the whole tree, as the lab's sweep of a killed lab's groups needs.
func TestRemoveTree(t *testing.T) {
	g := cgtest.NewGroup(t)
	top := g.Dirs()[0]
	leaf := filepath.Join(top, "stale", "trial-1")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("skipping: cannot start sleep: %v", err)
	}
	defer cmd.Process.Kill()
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(fmt.Sprint(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("move sleep into %s: %v", leaf, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := manage.RemoveTree(ctx, filepath.Join(top, "stale")); err != nil {
		t.Fatalf("RemoveTree: %v", err)
	}
	if _, err := os.Stat(filepath.Join(top, "stale")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", filepath.Join(top, "stale"), err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Error("sleep exited cleanly; want it killed")
		}
	case <-ctx.Done():
		t.Error("sleep still running after RemoveTree")
	}
	if err := manage.RemoveTree(ctx, filepath.Join(top, "missing")); err != nil {
		t.Errorf("RemoveTree of a missing dir: %v", err)
	}
}

package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/kube/memqos"
)

// TestPassCacheSweep: an entry a pass uses is kept and not made again; one
// it does not use is dropped when the next pass ends.
func TestPassCacheSweep(t *testing.T) {
	var c passCache[string, int]
	made := 0
	mk := func(v int) func() int { return func() int { made++; return v } }
	c.get("a", mk(1))
	c.get("b", mk(2))
	c.sweep()
	if got := c.get("a", mk(9)); got != 1 || made != 2 {
		t.Errorf("kept a = %d after %d makes; want 1 after 2", got, made)
	}
	c.sweep() // b was not used by this pass
	if _, ok := c.m["b"]; ok || len(c.m) != 1 {
		t.Errorf("after a pass without b: %v", c.m)
	}
	if got := c.get("b", mk(3)); got != 3 {
		t.Errorf("b made again = %d, want 3", got)
	}
}

// TestExplainWrites: a pass plans tersely and explains only what it
// writes. Every write has the reason a dry run gives for it, and the
// report's values and plan carry them too; a pass that writes nothing
// explains nothing.
func TestExplainWrites(t *testing.T) {
	for _, tree := range []string{"v2-systemd", "v1-cgroupfs"} {
		t.Run(tree, func(t *testing.T) {
			root := copyTree(t, filepath.Join("testdata", tree))
			l, err := Detect(root, "/")
			if err != nil {
				t.Fatal(err)
			}
			st := fixtureState(t)
			st.Now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
			dry := New(l, Options{DryRun: true, Policy: memqos.PolicyAuto})
			plan := dry.PlanOf(dry.Reconcile(st))
			want := map[string]string{}
			for _, w := range plan.Writes {
				want[w.Cgroup+"/"+w.File] = w.Reason
			}
			a := New(l, Options{Policy: memqos.PolicyAuto})
			rep := a.Reconcile(st)
			if len(rep.Apply.Changed) == 0 || len(rep.Apply.Changed) != len(plan.Writes) {
				t.Fatalf("%d writes, the dry run planned %d", len(rep.Apply.Changed), len(plan.Writes))
			}
			for _, c := range rep.Apply.Changed {
				k := a.files.cgroupPath(c.Dir) + "/" + c.File
				if c.Reason == "" || c.Reason != want[k] {
					t.Errorf("%s: reason %q, the dry run says %q", k, c.Reason, want[k])
				}
			}
			for _, v := range rep.Values {
				if v.Reason == "" {
					t.Errorf("%s/%s: planned without a reason in a pass that wrote", v.Dir, v.File)
				}
			}
			for _, p := range rep.Result.Pods {
				for _, s := range p.Settings {
					if s.Reason == "" {
						t.Errorf("pod %s %s: no reason in the report's plan", p.Name, s.File)
					}
				}
			}
			again := a.Reconcile(st)
			if len(again.Apply.Changed) != 0 {
				t.Fatalf("second pass wrote %d values", len(again.Apply.Changed))
			}
			for _, v := range again.Values {
				if v.Reason != "" {
					t.Fatalf("%s/%s: a pass that writes nothing formatted %q", v.Dir, v.File, v.Reason)
				}
			}
		})
	}
}

// TestContainerPathFollowsDisk: the names of a container's cgroup are kept
// between passes, not whether it exists: a cgroup removed is missed on the
// next pass, and one made again is found, under the name ContainerPath
// prefers.
func TestContainerPathFollowsDisk(t *testing.T) {
	root := copyTree(t, "testdata/v2-cgroupfs")
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	a := New(l, Options{})
	st := fixtureState(t)
	st.Now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	pod := "/kubepods/besteffort/pod2222bbbb-0000-4000-8000-000000000002"
	ctr := filepath.Join(l.Mount, pod, "crio-bbb222")
	if p, ok := a.files.containerPath(pod, "cri-o://bbb222"); !ok || p != pod+"/crio-bbb222" {
		t.Fatalf("containerPath = %q, %v", p, ok)
	}
	a.Reconcile(st)
	saved := t.TempDir()
	if err := os.Rename(ctr, filepath.Join(saved, "c")); err != nil {
		t.Fatal(err)
	}
	rep := a.Reconcile(st)
	if !hasWarning(rep, "no cgroup for cri-o://bbb222") {
		t.Errorf("container cgroup gone, no warning: %q", rep.Warnings)
	}
	// The other name CRI-O's cgroupfs containers may have.
	if err := os.Rename(filepath.Join(saved, "c"), filepath.Join(l.Mount, pod, "bbb222")); err != nil {
		t.Fatal(err)
	}
	if p, ok := a.files.containerPath(pod, "cri-o://bbb222"); !ok || p != pod+"/bbb222" {
		t.Errorf("after the rename containerPath = %q, %v", p, ok)
	}
	if err := os.Mkdir(ctr, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, ok := a.files.containerPath(pod, "cri-o://bbb222"); !ok || p != pod+"/crio-bbb222" {
		t.Errorf("with both names containerPath = %q, %v; want the crio- one, as Layout.ContainerPath", p, ok)
	}
	if p, _ := l.ContainerPath(pod, "cri-o://bbb222"); p != pod+"/crio-bbb222" {
		t.Errorf("Layout.ContainerPath = %q", p)
	}
}

func hasWarning(rep Report, s string) bool {
	for _, w := range rep.Warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

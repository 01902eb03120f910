package cgroup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

// These tests create real cgroups under the test process's own and run
// real processes in them. They skip, with a reason, where the machine does
// not allow it, and always remove what they made.

func newTestGroup(t *testing.T) *manage.Group { return cgtest.NewGroup(t) }

// TestMain lets the test binary act as a child process inside a cgroup:
// cgtest's children, and "limits", which prints the limits it reads.
func TestMain(m *testing.M) {
	cgtest.Main(m, map[string]func() int{"limits": func() int {
		c, err := NewFS("/").Self()
		if err == nil {
			var l Limits
			if l, err = c.Limits(); err == nil {
				json.NewEncoder(os.Stdout).Encode(l)
				return 0
			}
		}
		fmt.Fprintln(os.Stderr, err)
		return 3
	}})
}

func helper(g *manage.Group, mode string) *exec.Cmd { return cgtest.Child(g, mode) }

func TestRealLimitsInsideGroup(t *testing.T) {
	g := newTestGroup(t)
	if err := g.SetCPU(0.5, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMemoryMax(100 << 20); err != nil {
		t.Fatal(err)
	}
	out, err := helper(g, "limits").Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var l Limits
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if l.CPU.Quota != 0.5 || l.CPU.QuotaGroup != g.CPU.Path || l.CPU.Period != 100*time.Millisecond {
		t.Errorf("CPU limits seen inside the group = %+v, want 0.5 cores from %s", l.CPU, g.CPU.Path)
	}
	if l.Memory.Max != 100<<20 || l.Memory.MaxGroup != g.Memory.Path {
		t.Errorf("memory limits seen inside the group = %+v, want 100MiB from %s", l.Memory, g.Memory.Path)
	}
	// Reading from outside agrees.
	outside, err := g.Limits()
	if err != nil || outside.CPU.Quota != 0.5 || outside.Memory.Max != 100<<20 {
		t.Errorf("limits read from outside = %+v, %v", outside, err)
	}
}

func TestRealNestedTighterAncestor(t *testing.T) {
	parent := newTestGroup(t)
	if err := parent.SetCPU(0.3, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := parent.SetMemoryMax(80 << 20); err != nil {
		t.Fatal(err)
	}
	child, err := manage.NewChild(parent.Cgroups, "leaf")
	if err != nil {
		t.Fatal(err)
	}
	defer child.Remove(context.Background())
	// The leaf has no limit of its own (v1 refuses a child quota above its
	// parent's), which is exactly what Go's runtime reads.
	l, err := child.Limits()
	if err != nil {
		t.Fatal(err)
	}
	if l.CPU.Quota != 0.3 || l.CPU.QuotaGroup != parent.CPU.Path || l.CPU.Period != 200*time.Millisecond || l.CPU.LeafQuota != 0 {
		t.Errorf("CPU = %+v, want 0.3 cores over 200ms from %s, none on the leaf", l.CPU, parent.CPU.Path)
	}
	if l.Memory.Max != 80<<20 || l.Memory.MaxGroup != parent.Memory.Path {
		t.Errorf("memory = %+v, want 80MiB from %s", l.Memory, parent.Memory.Path)
	}
}

func TestRealThrottling(t *testing.T) {
	g := newTestGroup(t)
	if err := g.SetCPU(0.2, 0); err != nil {
		t.Fatal(err)
	}
	before, err := g.CPUStats()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper(g, "spin").Run(); err != nil {
		t.Fatal(err)
	}
	after, err := g.CPUStats()
	if err != nil {
		t.Fatal(err)
	}
	if after.ThrottledPeriods <= before.ThrottledPeriods || after.ThrottledTime <= before.ThrottledTime {
		t.Errorf("a busy loop at 0.2 cores was not throttled: before %+v after %+v", before, after)
	}
	if after.Usage-before.Usage < 50*time.Millisecond {
		t.Errorf("CPU usage grew by only %v", after.Usage-before.Usage)
	}
}

func TestRealOOMKill(t *testing.T) {
	g := newTestGroup(t)
	if err := g.SetMemoryMax(48 << 20); err != nil {
		t.Fatal(err)
	}
	err := helper(g, "hog").Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(ee.String(), "killed") {
		t.Fatalf("a 256MiB allocation in a 48MiB cgroup ended with %v, want killed", err)
	}
	m, err := g.MemoryStats()
	if err != nil {
		t.Fatal(err)
	}
	if m.OOMKills < 1 || m.MaxHits < 1 {
		t.Errorf("memory stats after the kill = %+v, want oom kills and limit hits", m)
	}
}

func TestRealRemoveKillsAndDrains(t *testing.T) {
	g := newTestGroup(t)
	cmd := g.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids, err := g.PIDs()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == 1 && pids[0] == cmd.Process.Pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never showed up in the group: %v", cmd.Process.Pid, pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-waited
	for _, d := range g.Dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after Remove", d)
		}
	}
}

func BenchmarkLimitsReal(b *testing.B) {
	c, err := NewFS("/").Self()
	if err != nil {
		b.Skip(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := c.Limits(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemoryLimitsReal is the runtime library's memory watch: the
// memory limit alone, read every gofit.MemoryWatch.
func BenchmarkMemoryLimitsReal(b *testing.B) {
	c, err := NewFS("/").Self()
	if err != nil {
		b.Skip(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := c.MemoryLimits(); err != nil {
			b.Fatal(err)
		}
	}
}

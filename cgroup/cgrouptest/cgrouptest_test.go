package cgrouptest_test

import (
	"testing"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/cgrouptest"
)

// A tree reads as the cgroup it describes, and follows a rewrite while
// the reader keeps its files open.
func TestTreeReadsAsCgroup(t *testing.T) {
	tr := cgrouptest.NewV2(t, "pod/ctr")
	tr.Set("cpu.max", "50000 100000")
	tr.Set("memory.max", "134217728")
	tr.SetParent("cpu.max", "25000 100000")
	c, err := cgroup.NewFS(tr.Root).Self()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Limits()
	if err != nil {
		t.Fatal(err)
	}
	if l.CPU.Quota != 0.25 || l.CPU.QuotaGroup != "/pod" || l.CPU.LeafQuota != 0.5 || l.Memory.Max != 128<<20 || l.Memory.MaxGroup != "/pod/ctr" {
		t.Fatalf("limits %+v", l)
	}
	tr.SetParent("cpu.max", "max 100000")
	if l, err = c.Limits(); err != nil || l.CPU.Quota != 0.5 || l.CPU.QuotaGroup != "/pod/ctr" {
		t.Errorf("after the rewrite: %+v %v", l.CPU, err)
	}
}

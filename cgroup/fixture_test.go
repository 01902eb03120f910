package cgroup

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFixtureLimits(t *testing.T) {
	for _, tc := range []struct {
		dir     string
		version int
		cpu     CPULimits
		mem     MemoryLimits
	}{
		{"v1-docker", 1,
			CPULimits{Version: 1, Group: "/docker/abc", Quota: 0.5, QuotaGroup: "/docker/abc", Period: 100 * time.Millisecond, LeafQuota: 0.5, CPUSet: 4, CPUSetGroup: "/docker/abc"},
			MemoryLimits{Version: 1, Group: "/docker/abc", Max: 100 << 20, MaxGroup: "/docker/abc"}},
		{"v2-cgroupns", 2,
			CPULimits{Version: 2, Group: "/", Quota: 1.5, QuotaGroup: "/", Period: 100 * time.Millisecond, LeafQuota: 1.5, CPUSet: 8, CPUSetGroup: "/"},
			MemoryLimits{Version: 2, Group: "/", Max: 256 << 20, MaxGroup: "/", High: 192 << 20, HighGroup: "/"}},
		{"v2-kubepods-systemd", 2,
			CPULimits{Version: 2, Group: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abc.scope",
				Quota: 0.5, QuotaGroup: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice", Period: 100 * time.Millisecond,
				LeafQuota: 2, CPUSet: 16, CPUSetGroup: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abc.scope",
				Weight: 20},
			MemoryLimits{Version: 2, Group: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-abc.scope",
				Max: 512 << 20, MaxGroup: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice"}},
		{"hybrid", 1,
			CPULimits{Version: 1, Group: "/lab/svc", Quota: 0.25, QuotaGroup: "/lab/svc", Period: 100 * time.Millisecond, LeafQuota: 0.25},
			MemoryLimits{Version: 1, Group: "/lab/svc", Max: 64 << 20, MaxGroup: "/lab/svc"}},
		{"v1-kubepods-cgroupfs", 1,
			CPULimits{Version: 1, Group: "/kubepods/burstable/pod5678/abc", Quota: 0.75, QuotaGroup: "/kubepods/burstable/pod5678", Period: 200 * time.Millisecond, LeafQuota: 2, Shares: 512},
			MemoryLimits{Version: 1, Group: "/kubepods/burstable/pod5678/abc", Max: 200 << 20, MaxGroup: "/kubepods/burstable/pod5678"}},
		{"v1-hidden-ancestor", 1,
			CPULimits{Version: 1, Group: "/outer/inner"},
			MemoryLimits{Version: 1, Group: "/outer/inner", Max: 300 << 20, MaxGroup: "(ancestor above /outer/inner)"}},
		{"v2-nolimits", 2,
			CPULimits{Version: 2, Group: "/user.slice/session.scope"},
			MemoryLimits{Version: 2, Group: "/user.slice/session.scope"}},
		{"v2-missing", 2,
			CPULimits{Version: 2, Group: "/a/b"},
			MemoryLimits{Version: 2, Group: "/a/b"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			c, err := NewFS(filepath.Join("testdata", tc.dir)).Self()
			if err != nil {
				t.Fatal(err)
			}
			if c.Version() != tc.version {
				t.Errorf("Version() = %d, want %d", c.Version(), tc.version)
			}
			l, err := c.Limits()
			if err != nil {
				t.Fatal(err)
			}
			if l.CPU != tc.cpu {
				t.Errorf("CPU limits\n got %+v\nwant %+v", l.CPU, tc.cpu)
			}
			if l.Memory != tc.mem {
				t.Errorf("memory limits\n got %+v\nwant %+v", l.Memory, tc.mem)
			}
			if _, err := c.Stats(); err != nil {
				t.Errorf("Stats: %v", err)
			}
		})
	}
}

// The CPU request as the kubelet writes it: shares = millicores × 1024 /
// 1000 on v1; on v2 a weight the runtime converted from the shares, with
// either of two formulas (read back with the one giving the larger
// request).
func TestRequestCores(t *testing.T) {
	for _, tc := range []struct {
		l    CPULimits
		want float64
	}{
		{CPULimits{Version: 1, Shares: 512}, 0.5},   // 500m
		{CPULimits{Version: 1, Shares: 2048}, 2},    // 2000m
		{CPULimits{Version: 1, Shares: 2}, 0},       // BestEffort: no request
		{CPULimits{Version: 1}, 0},                  // no file
		{CPULimits{Version: 2, Weight: 39}, 1.00},   // 1000m, linear formula (runc < 1.3.2)
		{CPULimits{Version: 2, Weight: 100}, 2.561}, // 1000m with the new formula, or 2.5 CPUs with the old: the larger
		{CPULimits{Version: 2, Weight: 1}, 0},       // BestEffort
		{CPULimits{Version: 2, Weight: 10000}, 256}, // the most shares there are
		{CPULimits{Version: 2, Weight: 20}, 0.514},  // 500m (512 shares), linear
	} {
		if got := tc.l.RequestCores(); got < tc.want-0.01 || got > tc.want+0.01 {
			t.Errorf("RequestCores(%+v) = %.3f, want %.3f", tc.l, got, tc.want)
		}
	}
}

func TestFixtureStats(t *testing.T) {
	c, err := NewFS("testdata/v1-docker").Self()
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	wantCPU := CPUStats{Usage: 1234 * time.Millisecond, Periods: 40, ThrottledPeriods: 12, ThrottledTime: 850 * time.Millisecond}
	if s.CPU != wantCPU {
		t.Errorf("v1 CPU stats = %+v, want %+v", s.CPU, wantCPU)
	}
	wantMem := MemoryStats{Usage: 50 << 20, WorkingSet: 48 << 20, Peak: 60 << 20, Anon: 40 << 20, File: 8 << 20, InactiveFile: 2 << 20,
		Kernel: 1 << 20, MajorFaults: 17, FileRefaults: 99, OOMKills: 2, MaxHits: 3}
	if s.Memory != wantMem {
		t.Errorf("v1 memory stats\n got %+v\nwant %+v", s.Memory, wantMem)
	}

	c, err = NewFS("testdata/v2-cgroupns").Self()
	if err != nil {
		t.Fatal(err)
	}
	if s, err = c.Stats(); err != nil {
		t.Fatal(err)
	}
	if s.CPU.Usage != 2500*time.Millisecond || s.CPU.Periods != 100 || s.CPU.ThrottledPeriods != 7 || s.CPU.ThrottledTime != 300*time.Millisecond {
		t.Errorf("v2 CPU stats = %+v", s.CPU)
	}
	if s.CPU.PSI == nil || s.CPU.PSI.Some.Avg10 != 1.5 || s.Memory.PSI == nil || s.Memory.PSI.Full.Total != 5*time.Microsecond {
		t.Errorf("v2 PSI = %+v / %+v", s.CPU.PSI, s.Memory.PSI)
	}
	m := s.Memory
	if m.Usage != 96<<20 || m.WorkingSet != 92<<20 || m.Peak != 128<<20 || m.Anon != 80<<20 || m.File != 16<<20 || m.Kernel != 2<<20 ||
		m.MajorFaults != 5 || m.FileRefaults != 321 || m.OOMKills != 1 || m.OOMs != 1 || m.MaxHits != 1 || m.HighHits != 4 {
		t.Errorf("v2 memory stats = %+v", m)
	}

	// Hybrid: v1 counters, PSI from the process's v2 group.
	c, err = NewFS("testdata/hybrid").Self()
	if err != nil {
		t.Fatal(err)
	}
	if s, err = c.Stats(); err != nil {
		t.Fatal(err)
	}
	if s.CPU.Usage != 700*time.Millisecond || s.CPU.ThrottledPeriods != 9 || s.CPU.PSI == nil || s.CPU.PSI.Some.Avg10 != 20 ||
		s.Memory.PSI == nil || s.Memory.PSI.Full.Avg10 != 0.25 || s.Memory.WorkingSet != 9<<20 {
		t.Errorf("hybrid stats = %+v cpu psi %+v mem psi %+v", s, s.CPU.PSI, s.Memory.PSI)
	}
}

func TestFixtureMalformed(t *testing.T) {
	for _, tc := range []struct{ dir, file, text string }{
		{"malformed-cpu-max", "sys/fs/cgroup/svc/cpu.max", "fifty 100000"},
		{"malformed-memory-max", "sys/fs/cgroup/svc/memory.max", "100M"},
		{"malformed-cpuset", "sys/fs/cgroup/svc/cpuset.cpus.effective", "3-1"},
		{"malformed-cpu-stat", "sys/fs/cgroup/svc/cpu.stat", "usage_usec lots"},
		{"malformed-mountinfo", "proc/self/mountinfo", "25 20 0:22 garbage"},
		{"malformed-proc-cgroup", "proc/self/cgroup", "zero::svc"},
		{"malformed-period", "sys/fs/cgroup/cpu/svc/cpu.cfs_period_us", "0"},
		{"malformed-cpu-weight", "sys/fs/cgroup/svc/cpu.weight", "0"},
		{"malformed-cpu-shares", "sys/fs/cgroup/cpu/svc/cpu.shares", "1024 shares"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			root := filepath.Join("testdata", tc.dir)
			c, err := NewFS(root).Self()
			if err == nil {
				_, err = c.Limits()
				if err == nil {
					_, err = c.Stats()
				}
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error = %v, want a *ParseError", err)
			}
			if pe.File != filepath.Join(root, tc.file) {
				t.Errorf("error names %q, want %q", pe.File, filepath.Join(root, tc.file))
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q does not quote %q", err, tc.text)
			}
		})
	}
}

func TestNoCgroup(t *testing.T) {
	_, err := NewFS(t.TempDir()).Self()
	if !errors.Is(err, ErrNoCgroup) {
		t.Fatalf("error = %v, want ErrNoCgroup", err)
	}
}

func BenchmarkLimits(b *testing.B) {
	for _, dir := range []string{"testdata/v2-kubepods-systemd", "testdata/v1-kubepods-cgroupfs"} {
		b.Run(filepath.Base(dir), func(b *testing.B) {
			c, err := NewFS(dir).Self()
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				if _, err := c.Limits(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// From the node, a container's process: its /proc/PID/cgroup names its
// group from the node's cgroup namespace, and only the node's own mounts
// say where that group is here. Its own mountinfo mounts the group itself
// at /sys/fs/cgroup, which from the node is the root group.
func TestObserveFromTheNode(t *testing.T) {
	fs := NewFS("testdata/v2-node-observe")
	c, err := fs.Observe(4242)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Limits()
	if err != nil {
		t.Fatal(err)
	}
	if l.Memory.Max != 512<<20 || l.CPU.Quota != 0.5 {
		t.Errorf("Observe: memory max %d, cpu quota %v; want 512 MiB and 0.5 from the pod", l.Memory.Max, l.CPU.Quota)
	}
	p, err := fs.Process(4242)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if pl, err := p.Limits(); err != nil || pl.Memory.Max == 512<<20 {
		t.Errorf("Process through the container's own mounts: %+v, %v; want the node's root group", pl.Memory, err)
	}
}

package vmtest

import "testing"

func TestLayoutOf(t *testing.T) {
	const tmpfs = 0x01021994
	for _, c := range []struct {
		root, unified, memory int64
		want                  Layout
		ok                    bool
	}{
		{cgroup2Magic, 0, 0, V2, true},
		{tmpfs, cgroup2Magic, cgroupMagic, Hybrid, true},
		{tmpfs, 0, cgroupMagic, "", false},             // legacy v1: no unified hierarchy
		{tmpfs, cgroup2Magic, 0, "", false},            // a unified hierarchy without v1 memory
		{0, 0, 0, "", false},                           // no cgroups mounted
		{tmpfs, cgroup2Magic, cgroup2Magic, "", false}, // not the hybrid systemd makes
	} {
		if got, ok := layoutOf(c.root, c.unified, c.memory); got != c.want || ok != c.ok {
			t.Errorf("layoutOf(%#x, %#x, %#x) = %q, %v; want %q, %v", c.root, c.unified, c.memory, got, ok, c.want, c.ok)
		}
	}
}

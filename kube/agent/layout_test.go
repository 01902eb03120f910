package agent

import "testing"

// TestRecursiveProt: the cgroup2 mount's super options say whether a pod's
// protection reaches its containers' pages.
func TestRecursiveProt(t *testing.T) {
	info := `24 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
31 30 0:22 / /host/sys/fs/cgroup ro,relatime - cgroup2 cgroup2 rw,nsdelegate
40 1 0:30 / /proc rw - proc proc rw
`
	for dir, want := range map[string]int{"/sys/fs/cgroup": 1, "/host/sys/fs/cgroup/": -1, "/proc": 0, "/elsewhere": 0} {
		if got := recursiveProt(info, dir); got != want {
			t.Errorf("%s: %d, want %d", dir, got, want)
		}
	}
}

package vmtest

import "syscall"

// Filesystem magic numbers (linux/magic.h).
const (
	cgroupMagic  = 0x27e0eb
	cgroup2Magic = 0x63677270
)

// HostLayout is how this machine mounts cgroups, as far as the VM's
// layouts go: V2 with the unified hierarchy at /sys/fs/cgroup, Hybrid
// with v1 memory at /sys/fs/cgroup/memory beside a v2 hierarchy at
// /sys/fs/cgroup/unified; ok is false for anything else.
func HostLayout() (Layout, bool) {
	return layoutOf(fsType("/sys/fs/cgroup"), fsType("/sys/fs/cgroup/unified"), fsType("/sys/fs/cgroup/memory"))
}

// layoutOf is the layout that the filesystem types of /sys/fs/cgroup,
// /sys/fs/cgroup/unified and /sys/fs/cgroup/memory (0: none there) make.
func layoutOf(root, unified, memory int64) (Layout, bool) {
	switch {
	case root == cgroup2Magic:
		return V2, true
	case unified == cgroup2Magic && memory == cgroupMagic:
		return Hybrid, true
	}
	return "", false
}

func fsType(path string) int64 {
	var st syscall.Statfs_t
	if syscall.Statfs(path, &st) != nil {
		return 0
	}
	return int64(st.Type)
}

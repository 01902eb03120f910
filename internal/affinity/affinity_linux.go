// Package affinity counts the CPUs the calling thread may run on now.
// runtime.NumCPU is only read at start-up; the mask can change after
// (taskset, a cpuset update), so gofit reads it at every refresh.
package affinity

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// CPUs is the number of CPUs in the calling thread's affinity mask.
func CPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return runtime.NumCPU()
	}
	if n := set.Count(); n > 0 {
		return n
	}
	return runtime.NumCPU()
}

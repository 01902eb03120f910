package gofit

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// AffinityCPUs is the number of CPUs in the calling thread's affinity mask
// now (runtime.NumCPU is only read at start-up).
func AffinityCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return runtime.NumCPU()
	}
	if n := set.Count(); n > 0 {
		return n
	}
	return runtime.NumCPU()
}

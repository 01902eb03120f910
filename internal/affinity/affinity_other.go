//go:build !linux

// Package affinity counts the CPUs the calling thread may run on now.
package affinity

import "runtime"

// CPUs is runtime.NumCPU outside Linux.
func CPUs() int { return runtime.NumCPU() }

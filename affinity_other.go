//go:build !linux

package gofit

import "runtime"

// AffinityCPUs is runtime.NumCPU outside Linux.
func AffinityCPUs() int { return runtime.NumCPU() }

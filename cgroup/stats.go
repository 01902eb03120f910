package cgroup

import (
	"path/filepath"
	"time"
)

// CPUStats are cumulative counters of the process's cpu cgroup.
type CPUStats struct {
	Usage            time.Duration // CPU time used (v1 cpuacct.usage, v2 cpu.stat usage_usec)
	Periods          uint64        // enforcement periods that had runnable tasks
	ThrottledPeriods uint64        // periods in which the group hit its quota
	ThrottledTime    time.Duration // total time throttled
	PSI              *PSI          // cpu.pressure, nil where absent
}

// MemoryStats describe the process's memory cgroup now.
type MemoryStats struct {
	Usage        uint64 // bytes charged (v1 memory.usage_in_bytes, v2 memory.current)
	WorkingSet   uint64 // Usage minus inactive file pages, as the kubelet computes it
	Peak         uint64 // high-water mark where the kernel keeps one, else 0
	Anon         uint64 // anonymous memory (the Go heap lives here)
	File         uint64 // page cache, including the binary's own code pages
	InactiveFile uint64
	Kernel       uint64 // kernel memory (v2 "kernel"; v1 memory.kmem.usage_in_bytes)
	MajorFaults  uint64 // page faults that read from disk
	// FileRefaults counts file pages read back soon after the kernel
	// evicted them (memory.stat workingset_refault_file, or
	// workingset_refault before Linux 5.9): the file working set does not
	// fit. 0 where the kernel does not count them.
	FileRefaults uint64

	OOMKills uint64 // processes killed by the OOM killer in this group
	OOMs     uint64 // times the group hit its limit and the OOM killer ran (v2) or under_oom now (v1)
	MaxHits  uint64 // times usage hit the limit (v2 memory.events max, v1 memory.failcnt)
	HighHits uint64 // times usage went over memory.high (v2 only)

	PSI *PSI // memory.pressure, nil where absent
}

// Stats holds both.
type Stats struct {
	CPU    CPUStats
	Memory MemoryStats
}

// Stats reads the current CPU and memory statistics.
func (c *Cgroups) Stats() (Stats, error) {
	var s Stats
	var err error
	if s.CPU, err = c.CPUStats(); err != nil {
		return s, err
	}
	s.Memory, err = c.MemoryStats()
	return s, err
}

// readPSI reads a pressure file from the node's directory or, on a hybrid
// host whose v1 controllers have none, from the process's v2 group.
func (c *Cgroups) readPSI(n *Node, name string) (*PSI, error) {
	for _, m := range []*Node{n, c.Unified} {
		if m == nil {
			continue
		}
		file := filepath.Join(m.Dir, name)
		s, ok, err := c.rd.read(file)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		p, err := parsePSI(s)
		if err != nil {
			return nil, withFile(err, file)
		}
		return &p, nil
	}
	return nil, nil
}

// CPUStats reads usage, throttling and pressure.
func (c *Cgroups) CPUStats() (CPUStats, error) {
	var out CPUStats
	n := c.CPU
	if n == nil {
		return out, nil
	}
	err := c.rd.keyed(filepath.Join(n.Dir, "cpu.stat"), func(k string, v uint64) {
		switch k {
		case "nr_periods":
			out.Periods = v
		case "nr_throttled":
			out.ThrottledPeriods = v
		case "throttled_time": // v1, nanoseconds
			out.ThrottledTime = time.Duration(v)
		case "throttled_usec": // v2
			out.ThrottledTime = time.Duration(v) * time.Microsecond
		case "usage_usec": // v2
			out.Usage = time.Duration(v) * time.Microsecond
		}
	})
	if err != nil {
		return out, err
	}
	if n.Version == 1 && c.CPUAcct != nil && c.CPUAcct.Version == 1 {
		v, _, err := c.rd.uint(filepath.Join(c.CPUAcct.Dir, "cpuacct.usage"))
		if err != nil {
			return out, err
		}
		out.Usage = time.Duration(v)
	}
	out.PSI, err = c.readPSI(n, "cpu.pressure")
	return out, err
}

// MemoryStats reads usage, working set, events and pressure.
func (c *Cgroups) MemoryStats() (MemoryStats, error) {
	var out MemoryStats
	n := c.Memory
	if n == nil {
		return out, nil
	}
	for _, f := range memoryFiles(n.Version, &out) {
		p := filepath.Join(n.Dir, f.name)
		var err error
		if len(f.values) == 1 && f.values[0].key == "" {
			*f.values[0].to, _, err = c.rd.uint(p)
		} else {
			err = c.rd.keyed(p, func(k string, v uint64) {
				for _, kv := range f.values {
					if kv.key == k {
						*kv.to = v
					}
				}
			})
		}
		if err != nil {
			return out, err
		}
	}
	if out.InactiveFile < out.Usage {
		out.WorkingSet = out.Usage - out.InactiveFile
	}
	var err error
	out.PSI, err = c.readPSI(n, "memory.pressure")
	return out, err
}

// memoryFile is a file MemoryStats reads and the fields of its MemoryStats
// that the file's values fill: one value with key "" for a file of one
// number, else a value per key of a flat keyed file.
type memoryFile struct {
	name   string
	values []memoryValue
}

type memoryValue struct {
	key string
	to  *uint64
}

// memoryFiles lists, in the order they are read, the files of a memory
// cgroup of the given version and where their values go in s.
func memoryFiles(version int, s *MemoryStats) []memoryFile {
	one := func(to *uint64) []memoryValue { return []memoryValue{{"", to}} }
	if version == 2 {
		return []memoryFile{
			{"memory.current", one(&s.Usage)},
			{"memory.peak", one(&s.Peak)},
			{"memory.stat", []memoryValue{
				{"anon", &s.Anon}, {"file", &s.File}, {"inactive_file", &s.InactiveFile}, {"kernel", &s.Kernel},
				{"pgmajfault", &s.MajorFaults}, {"workingset_refault_file", &s.FileRefaults}, {"workingset_refault", &s.FileRefaults},
			}},
			{"memory.events", []memoryValue{{"oom_kill", &s.OOMKills}, {"oom", &s.OOMs}, {"max", &s.MaxHits}, {"high", &s.HighHits}}},
		}
	}
	return []memoryFile{
		{"memory.usage_in_bytes", one(&s.Usage)},
		{"memory.max_usage_in_bytes", one(&s.Peak)},
		{"memory.failcnt", one(&s.MaxHits)},
		{"memory.kmem.usage_in_bytes", one(&s.Kernel)},
		// total_* include descendants, which is what a limit applies to.
		{"memory.stat", []memoryValue{
			{"total_rss", &s.Anon}, {"total_cache", &s.File}, {"total_inactive_file", &s.InactiveFile},
			{"total_pgmajfault", &s.MajorFaults}, {"total_workingset_refault_file", &s.FileRefaults}, {"total_workingset_refault", &s.FileRefaults},
		}},
		{"memory.oom_control", []memoryValue{{"oom_kill", &s.OOMKills}, {"under_oom", &s.OOMs}}},
	}
}

package cgroup

import (
	"path/filepath"
	"time"
)

// CPULimits is what the CPU controllers allow. Zero values mean no limit.
type CPULimits struct {
	Version int
	Group   string // the process's cpu cgroup path

	// Quota is the tightest CFS bandwidth limit on the way up, in cores
	// (quota/period), and QuotaGroup the cgroup that imposed it.
	Quota      float64
	QuotaGroup string
	Period     time.Duration // period of the imposing group

	// LeafQuota is the leaf cgroup's own limit, which is all that Go's
	// runtime (≥ 1.25) reads.
	LeafQuota float64

	// CPUSet is the number of CPUs in the effective cpuset, 0 if unknown.
	CPUSet      int
	CPUSetGroup string

	// Shares (v1 cpu.shares, 2..262144) or Weight (v2 cpu.weight,
	// 1..10000) of the leaf cgroup: where a container runtime writes the
	// CPU request. 0 where the file is absent.
	Shares uint64
	Weight uint64
}

// RequestCores is the CPU request the leaf's shares or weight encode, in
// cores; 0 for none (no file, or the kubelet's 2 shares for a pod without
// a request). The kubelet writes shares = millicores × 1024 / 1000. On v2
// the runtime converts shares to a weight, with a formula that changed in
// 2025 (runc 1.3.2, crun 1.23: 1024 shares became weight 100 instead of
// 39); the weight is read back as the most shares the older, linear
// formula maps to it, the larger request of the two, so a request is
// never read as smaller than it is (a weight from a newer runtime reads up
// to 2.5 times larger).
func (c CPULimits) RequestCores() float64 {
	shares := c.Shares
	if c.Version == 2 || shares == 0 {
		if c.Weight <= 1 {
			return 0 // none, or the 2 shares of a pod without a request
		}
		// The most shares the linear formula, weight = 1 + (shares-2) ×
		// 9999 / 262142 rounded down, maps to this weight.
		shares = min(2+(min(c.Weight, 10000)*262142-1)/9999, 262144)
	}
	if shares <= 2 {
		return 0
	}
	return float64(shares) / 1024
}

// MemoryLimits is what the memory controller allows. Zero values mean no limit.
type MemoryLimits struct {
	Version int
	Group   string

	Max       int64  // bytes: v2 memory.max, v1 memory.limit_in_bytes
	MaxGroup  string // cgroup that imposed Max
	High      int64  // bytes: v2 memory.high (throttling, not killing)
	HighGroup string
}

// Effective is the smaller of Max and High, or 0 when neither is set: the
// point past which the process is reclaimed hard, throttled or killed.
func (m MemoryLimits) Effective() int64 {
	switch {
	case m.Max == 0:
		return m.High
	case m.High == 0 || m.Max < m.High:
		return m.Max
	}
	return m.High
}

// Limits holds both.
type Limits struct {
	CPU    CPULimits
	Memory MemoryLimits
}

// Limits reads the current limits. The tightest visible ancestor wins.
func (c *Cgroups) Limits() (Limits, error) {
	var l Limits
	var err error
	if l.CPU, err = c.CPULimits(); err != nil {
		return l, err
	}
	l.Memory, err = c.MemoryLimits()
	return l, err
}

// CPULimits reads the CPU quota up the hierarchy and the effective cpuset.
func (c *Cgroups) CPULimits() (CPULimits, error) {
	var out CPULimits
	if n := c.CPU; n != nil {
		out.Version, out.Group = n.Version, n.Path
		var ferr error
		leaf := true
		n.ancestors(func(dir, cgPath string) bool {
			quota, period, err := readQuota(c.rd, n.Version, dir)
			if err != nil {
				ferr = err
				return false
			}
			if quota > 0 {
				cores := float64(quota) / float64(period)
				if leaf {
					out.LeafQuota = cores
				}
				if out.Quota == 0 || cores < out.Quota {
					out.Quota, out.QuotaGroup, out.Period = cores, cgPath, period
				}
			}
			leaf = false
			return true
		})
		if ferr != nil {
			return out, ferr
		}
	}
	if n := c.CPU; n != nil {
		name, lo, hi, dst := "cpu.weight", uint64(1), uint64(10000), &out.Weight
		if n.Version == 1 {
			name, lo, hi, dst = "cpu.shares", 2, 262144, &out.Shares
		}
		file := filepath.Join(n.Dir, name)
		text, ok, err := c.rd.read(file)
		if err != nil {
			return out, err
		}
		if ok {
			if *dst, err = parseBounded(text, lo, hi); err != nil {
				return out, withFile(err, file)
			}
		}
	}
	if n := c.CPUSet; n != nil {
		names := []string{"cpuset.cpus.effective", "cpuset.cpus"}
		if n.Version == 1 {
			names = []string{"cpuset.effective_cpus", "cpuset.cpus"}
		}
		for _, name := range names {
			file := filepath.Join(n.Dir, name)
			s, ok, err := c.rd.read(file)
			if err != nil {
				return out, err
			}
			if !ok {
				continue
			}
			cpus, err := parseCPUSet(s)
			if err != nil {
				return out, withFile(err, file)
			}
			if cpus > 0 {
				out.CPUSet, out.CPUSetGroup = cpus, n.Path
				break
			}
		}
	}
	return out, nil
}

func readQuota(r *reader, version int, dir string) (quota, period time.Duration, err error) {
	if version == 2 {
		file := filepath.Join(dir, "cpu.max")
		s, ok, err := r.read(file)
		if !ok || err != nil {
			return 0, 0, err
		}
		q, p, err := parseCPUMax(s)
		return q, p, withFile(err, file)
	}
	qFile := filepath.Join(dir, "cpu.cfs_quota_us")
	s, ok, err := r.read(qFile)
	if !ok || err != nil {
		return 0, 0, err
	}
	if quota, err = parseV1Micros(s); err != nil || quota == 0 {
		return 0, 0, withFile(err, qFile)
	}
	pFile := filepath.Join(dir, "cpu.cfs_period_us")
	s, ok, err = r.read(pFile)
	if err != nil {
		return 0, 0, err
	}
	period = 100 * time.Millisecond // the kernel default, if the file is hidden
	if ok {
		if period, err = parseV1Micros(s); err != nil {
			return 0, 0, withFile(err, pFile)
		}
		if period == 0 {
			return 0, 0, withFile(lineErr(1, s, errNonPositivePeriod), pFile)
		}
	}
	return quota, period, nil
}

// MemoryLimits reads memory.max/high (v2) or memory.limit_in_bytes (v1) up
// the hierarchy. On v1 it also reads hierarchical_memory_limit from the
// leaf's memory.stat, which includes ancestors the mount hides.
func (c *Cgroups) MemoryLimits() (MemoryLimits, error) {
	var out MemoryLimits
	n := c.Memory
	if n == nil {
		return out, nil
	}
	out.Version, out.Group = n.Version, n.Path
	var ferr error
	tighter := func(file string, cur *int64, src *string, cgPath string) bool {
		s, ok, err := c.rd.read(file)
		if err != nil {
			ferr = err
			return false
		}
		if !ok {
			return true
		}
		v, err := parseBytesLimit(s)
		if err != nil {
			ferr = withFile(err, file)
			return false
		}
		if v > 0 && (*cur == 0 || v < *cur) {
			*cur, *src = v, cgPath
		}
		return true
	}
	n.ancestors(func(dir, cgPath string) bool {
		if n.Version == 2 {
			return tighter(filepath.Join(dir, "memory.max"), &out.Max, &out.MaxGroup, cgPath) &&
				tighter(filepath.Join(dir, "memory.high"), &out.High, &out.HighGroup, cgPath)
		}
		return tighter(filepath.Join(dir, "memory.limit_in_bytes"), &out.Max, &out.MaxGroup, cgPath)
	})
	if ferr != nil {
		return out, ferr
	}
	if n.Version == 1 {
		file := filepath.Join(n.Dir, "memory.stat")
		s, ok, err := c.rd.read(file)
		if err != nil {
			return out, err
		}
		if ok {
			var hier uint64
			if err := parseFlatKeyed(s, func(k string, v uint64) {
				if k == "hierarchical_memory_limit" {
					hier = v
				}
			}); err != nil {
				return out, withFile(err, file)
			}
			if hier > 0 && hier < uint64(unlimitedV1) && (out.Max == 0 || int64(hier) < out.Max) {
				out.Max, out.MaxGroup = int64(hier), "(ancestor above "+topPath(n)+")"
			}
		}
	}
	return out, nil
}

// topPath is the cgroup path of the highest visible ancestor.
func topPath(n *Node) string {
	p := n.Path
	n.ancestors(func(_, cgPath string) bool { p = cgPath; return true })
	return p
}

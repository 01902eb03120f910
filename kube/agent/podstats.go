package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cgroup"
)

// PodCgroup is what the agent reads of one pod's cgroup for `gofit lab
// --kube`: the limits the kubelet wrote and the cumulative counters a
// trial's window is measured by, read on the node, where the lab (which
// may run anywhere with API access) cannot.
type PodCgroup struct {
	UID     string `json:"uid"`
	Path    string `json:"path"` // the pod's cgroup path under the memory mount
	QoS     string `json:"qos"`
	Version int    `json:"cgroup_version"`
	// CPUQuotaCores is the pod cgroup's quota (0: none); MemoryLimitBytes
	// its memory limit (0: none).
	CPUQuotaCores    float64 `json:"cpu_quota_cores"`
	MemoryLimitBytes int64   `json:"memory_limit_bytes"`
	CPU              struct {
		UsageSeconds     float64 `json:"usage_seconds"`
		Periods          uint64  `json:"periods"`
		ThrottledPeriods uint64  `json:"throttled_periods"`
		ThrottledSeconds float64 `json:"throttled_seconds"`
	} `json:"cpu"`
	Memory struct {
		Usage       uint64 `json:"usage_bytes"`
		WorkingSet  uint64 `json:"working_set_bytes"`
		Peak        uint64 `json:"peak_bytes"`
		File        uint64 `json:"file_bytes"`
		Kernel      uint64 `json:"kernel_bytes"`
		MajorFaults uint64 `json:"major_faults"`
		OOMKills    uint64 `json:"oom_kills"`
		MaxHits     uint64 `json:"max_hits"`
	} `json:"memory"`
}

// NodeInfo is what the lab's report says of a node its trials ran on.
type NodeInfo struct {
	Kernel   string `json:"kernel"`
	CPUModel string `json:"cpu_model"`
	CPUs     int    `json:"cpus"`
	Cgroup   int    `json:"cgroup_version"`
}

// PodStats reads pod uid's cgroup: fs.ErrNotExist when the node has none
// (not here, or gone).
func (l *Layout) PodStats(uid types.UID) (PodCgroup, error) {
	out := PodCgroup{UID: string(uid), Version: l.Version}
	dirs, err := l.podDirs()
	if err != nil {
		return out, err
	}
	d, ok := dirs[uid]
	if !ok {
		return out, fmt.Errorf("pod %s: no cgroup on this node: %w", uid, fs.ErrNotExist)
	}
	out.Path, out.QoS = d.path, string(d.qos)
	mem := &cgroup.Node{Version: l.Version, Path: d.path, Dir: l.dir(d.path), Top: l.Mount}
	cpu, acct := mem, mem
	if l.Version == 1 {
		// v1 keeps cpu and cpuacct in their own hierarchies beside memory
		// (often one mount, "cpu,cpuacct", with both names linked to it).
		base := filepath.Dir(l.Mount)
		cpu = &cgroup.Node{Version: 1, Path: d.path, Dir: filepath.Join(base, "cpu", filepath.FromSlash(d.path)), Top: filepath.Join(base, "cpu")}
		acct = &cgroup.Node{Version: 1, Path: d.path, Dir: filepath.Join(base, "cpuacct", filepath.FromSlash(d.path)), Top: filepath.Join(base, "cpuacct")}
	}
	cg := cgroup.NewFS("/").Bind(cgroup.Cgroups{CPU: cpu, CPUAcct: acct, Memory: mem})
	defer cg.Close()
	st, err := cg.Stats()
	if err != nil {
		return out, fmt.Errorf("pod %s: %w", uid, err)
	}
	out.CPU.UsageSeconds = st.CPU.Usage.Seconds()
	out.CPU.Periods, out.CPU.ThrottledPeriods = st.CPU.Periods, st.CPU.ThrottledPeriods
	out.CPU.ThrottledSeconds = st.CPU.ThrottledTime.Seconds()
	m := st.Memory
	out.Memory.Usage, out.Memory.WorkingSet, out.Memory.Peak, out.Memory.File, out.Memory.Kernel = m.Usage, m.WorkingSet, m.Peak, m.File, m.Kernel
	out.Memory.MajorFaults, out.Memory.OOMKills, out.Memory.MaxHits = m.MajorFaults, m.OOMKills, m.MaxHits
	if out.CPUQuotaCores, err = quotaCores(l.Version, cpu.Dir); err != nil {
		return out, fmt.Errorf("pod %s: %w", uid, err)
	}
	if out.MemoryLimitBytes, err = memoryLimit(l.Version, mem.Dir); err != nil {
		return out, fmt.Errorf("pod %s: %w", uid, err)
	}
	return out, nil
}

// unlimitedV1 is where v1's memory.limit_in_bytes says "no limit" (the
// largest page-aligned int64 and above).
const unlimitedV1 = 1 << 62

func quotaCores(version int, dir string) (float64, error) {
	if version == 2 {
		s, err := readTrim(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return 0, err
		}
		q, p, _ := strings.Cut(s, " ")
		if q == "max" {
			return 0, nil
		}
		return ratio(q, p, filepath.Join(dir, "cpu.max"))
	}
	q, err := readTrim(filepath.Join(dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, err
	}
	if strings.HasPrefix(q, "-") {
		return 0, nil
	}
	p, err := readTrim(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, err
	}
	return ratio(q, p, filepath.Join(dir, "cpu.cfs_quota_us"))
}

func ratio(q, p, file string) (float64, error) {
	qn, err1 := strconv.ParseFloat(q, 64)
	pn, err2 := strconv.ParseFloat(p, 64)
	if err1 != nil || err2 != nil || pn <= 0 {
		return 0, fmt.Errorf("%s: cannot read quota %q over period %q", file, q, p)
	}
	return qn / pn, nil
}

func memoryLimit(version int, dir string) (int64, error) {
	file := filepath.Join(dir, "memory.max")
	if version == 1 {
		file = filepath.Join(dir, "memory.limit_in_bytes")
	}
	s, err := readTrim(file)
	if err != nil || s == "max" {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a byte count", file, s)
	}
	if n >= unlimitedV1 {
		return 0, nil
	}
	return n, nil
}

func readTrim(file string) (string, error) {
	b, err := os.ReadFile(file)
	return strings.TrimSpace(string(b)), err
}

// ReadNodeInfo describes the node the agent runs on (its /proc is the
// node's for these files).
func ReadNodeInfo(version int) NodeInfo {
	n := NodeInfo{CPUs: runtime.NumCPU(), Cgroup: version}
	n.Kernel, _ = KernelRelease()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				n.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return n
}

// PodStatsPath is where StatsHandler serves PodStats: PodStatsPath + UID.
const PodStatsPath = "/v1/pods/"

// NodeInfoPath is where StatsHandler serves ReadNodeInfo.
const NodeInfoPath = "/v1/node"

// StatsHandler serves the lab's reads (read-only, JSON): a pod's cgroup
// at PodStatsPath+UID and the node at NodeInfoPath. Registered on the
// agent's metrics mux; `gofit lab --kube` reaches it through the API
// server's pod proxy.
func (l *Layout) StatsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PodStatsPath+"{uid}", func(w http.ResponseWriter, r *http.Request) {
		uid := r.PathValue("uid")
		if uid == "" || strings.ContainsAny(uid, "/.\x00") || len(uid) > 64 {
			http.Error(w, "bad pod UID", http.StatusBadRequest)
			return
		}
		t0 := time.Now()
		st, err := l.PodStats(types.UID(uid))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Read-Seconds", strconv.FormatFloat(time.Since(t0).Seconds(), 'f', 6, 64))
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET "+NodeInfoPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(ReadNodeInfo(l.Version))
	})
	return mux
}

package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// writeFiles writes name→content under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const statsUID = "7777abcd-0000-4000-8000-000000000007"

func TestPodStatsV2(t *testing.T) {
	root := t.TempDir()
	pod := "sys/fs/cgroup/kubepods/burstable/pod" + statsUID + "/"
	writeFiles(t, root, map[string]string{
		"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
		pod + "cpu.max":                    "25000 100000\n",
		pod + "cpu.stat":                   "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 40\nnr_throttled 12\nthrottled_usec 300000\n",
		pod + "memory.max":                 "67108864\n",
		pod + "memory.current":             "33554432\n",
		pod + "memory.peak":                "50331648\n",
		pod + "memory.stat":                "anon 20971520\nfile 8388608\ninactive_file 4194304\nkernel 1048576\npgmajfault 9\n",
		pod + "memory.events":              "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
	})
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(l.StatsHandler())
	defer srv.Close()
	var got PodCgroup
	getJSON(t, srv.URL+PodStatsPath+statsUID, http.StatusOK, &got)
	if got.QoS != "Burstable" || got.Version != 2 || got.CPUQuotaCores != 0.25 || got.MemoryLimitBytes != 64<<20 {
		t.Errorf("limits: %+v", got)
	}
	if got.CPU.UsageSeconds != 2.5 || got.CPU.Periods != 40 || got.CPU.ThrottledPeriods != 12 || got.CPU.ThrottledSeconds != 0.3 {
		t.Errorf("cpu: %+v", got.CPU)
	}
	m := got.Memory
	if m.Usage != 32<<20 || m.Peak != 48<<20 || m.File != 8<<20 || m.MajorFaults != 9 || m.OOMKills != 1 || m.MaxHits != 3 || m.WorkingSet != 28<<20 {
		t.Errorf("memory: %+v", m)
	}
	// A pod this node has no cgroup for, and a UID that would leave the
	// tree, are refused without reading anything.
	getJSON(t, srv.URL+PodStatsPath+"1234", http.StatusNotFound, nil)
	getJSON(t, srv.URL+PodStatsPath+"..%2F..%2Fetc", http.StatusBadRequest, nil)
	var n NodeInfo
	getJSON(t, srv.URL+NodeInfoPath, http.StatusOK, &n)
	if n.Kernel == "" || n.CPUs < 1 || n.Cgroup != 2 {
		t.Errorf("node: %+v", n)
	}
}

func TestPodStatsV1(t *testing.T) {
	root := t.TempDir()
	p := "kubepods/pod" + statsUID + "/"
	writeFiles(t, root, map[string]string{
		"sys/fs/cgroup/memory/" + p + "memory.limit_in_bytes":     "9223372036854771712\n",
		"sys/fs/cgroup/memory/" + p + "memory.usage_in_bytes":     "1048576\n",
		"sys/fs/cgroup/memory/" + p + "memory.max_usage_in_bytes": "2097152\n",
		"sys/fs/cgroup/memory/" + p + "memory.failcnt":            "0\n",
		"sys/fs/cgroup/memory/" + p + "memory.stat":               "total_cache 4096\ntotal_rss 8192\ntotal_inactive_file 0\ntotal_pgmajfault 2\n",
		"sys/fs/cgroup/memory/" + p + "memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
		"sys/fs/cgroup/cpu/" + p + "cpu.cfs_quota_us":             "150000\n",
		"sys/fs/cgroup/cpu/" + p + "cpu.cfs_period_us":            "100000\n",
		"sys/fs/cgroup/cpu/" + p + "cpu.stat":                     "nr_periods 5\nnr_throttled 1\nthrottled_time 1000000\n",
		"sys/fs/cgroup/cpuacct/" + p + "cpuacct.usage":            "1500000000\n",
	})
	l, err := Detect(root, "/")
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.PodStats(statsUID)
	if err != nil {
		t.Fatal(err)
	}
	if got.QoS != "Guaranteed" || got.CPUQuotaCores != 1.5 || got.MemoryLimitBytes != 0 || got.CPU.UsageSeconds != 1.5 || got.CPU.ThrottledPeriods != 1 || got.Memory.Peak != 2<<20 {
		t.Errorf("v1: %+v", got)
	}
}

func getJSON(t *testing.T, url string, code int, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != code {
		t.Fatalf("GET %s: %s, want %d", url, resp.Status, code)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
}

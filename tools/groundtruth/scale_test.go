package groundtruth

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/tools/promtest"
)

// BenchmarkFleetPrometheus is gofit fleet against a real Prometheus at
// fleet scale (issue 52, item 3): ../fleetscale writes a TSDB of
// GOFIT_FLEETSCALE_CONTAINERS Go containers (default 5,000, two pods a
// Deployment, a third of them rolled out in the window) and 3,000 others
// over 7 days scraped every minute, with Prometheus's own tsdb package;
// Debian's Prometheus serves it, and gofit fleet reads the week at its
// defaults. It reports gofit's wall time and peak RSS, and the server's
// CPU and peak RSS over the read. A benchmark: its figures belong in
// docs/results/fleet.md, never in a pass or fail.
//
//	make fleet-scale
//
// The blocks are cached under ~/.cache/gofit/fleetscale by parameters
// (about 1.5 GB at 5,000 containers); the server runs on hard links to
// them, so its compactions leave the cache as it was.
func BenchmarkFleetPrometheus(b *testing.B) {
	n := 5000
	if v := os.Getenv("GOFIT_FLEETSCALE_CONTAINERS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 || n%2 != 0 {
			b.Fatalf("GOFIT_FLEETSCALE_CONTAINERS=%q: want an even number of containers, at least 2", v)
		}
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		b.Fatal(err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		b.Fatal(err)
	}
	const end = "2026-11-08T00:00:00Z"
	cache := filepath.Join(home, ".cache", "gofit", "fleetscale", fmt.Sprintf("c%d-n3000-d7-1m0s-s1", n))
	if err := os.MkdirAll(filepath.Dir(cache), 0o755); err != nil {
		b.Fatal(err)
	}
	gen := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "run", ".", "-out", cache, "-containers", strconv.Itoa(n),
		"-non-go", "3000", "-days", "7", "-interval", "1m", "-end", end, "-seed", "1")
	gen.Dir = filepath.Join(repo, "tools", "fleetscale")
	gen.Env = append(os.Environ(), "GOWORK=off")
	start := time.Now()
	out, err := gen.CombinedOutput()
	if err != nil {
		b.Fatalf("fleetscale: %v\n%s", err, out)
	}
	b.Logf("%s(%v, generation included when not cached)", out, time.Since(start).Round(time.Second))
	var meta struct {
		Series  int   `json:"series"`
		Samples int64 `json:"samples"`
		Pods    int   `json:"pods"`
	}
	if raw, err := os.ReadFile(filepath.Join(cache, "fleetscale.json")); err != nil || json.Unmarshal(raw, &meta) != nil {
		b.Fatalf("fleetscale.json in %s: %v", cache, err)
	}
	du, _ := exec.Command("du", "-sh", cache).Output()

	data := filepath.Join(b.TempDir(), "data")
	if out, err := exec.Command("cp", "-al", cache, data).CombinedOutput(); err != nil {
		b.Fatalf("link the blocks: %v\n%s", err, out)
	}
	bins := promtest.Need(b)
	qlog := filepath.Join(b.TempDir(), "query.log")
	prom := promtest.Start(b, bins, promtest.Config{DataDir: data, Ready: 5 * time.Minute, QueryLog: qlog,
		Args: []string{"--storage.tsdb.retention.time=30d"}})
	gofit := promtest.Build(b, repo, "./cmd/gofit")

	for b.Loop() {
		cpu0 := procCPU(b, prom.PID())
		cmd := exec.Command(gofit, "fleet", "--prometheus", prom.URL, "--end", end, "--since", "7d", "--json")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		stdout, err := cmd.Output()
		wall := time.Since(start)
		if err != nil {
			b.Fatalf("gofit fleet: %v\n%s", err, stderr.String())
		}
		cpu := procCPU(b, prom.PID()) - cpu0
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		var r struct {
			NonGo      int               `json:"non_go_containers"`
			Sources    map[string]string `json:"sources"`
			Containers []struct {
				Pods []string `json:"pods"`
			} `json:"containers"`
		}
		if err := json.Unmarshal(stdout, &r); err != nil {
			b.Fatalf("gofit fleet --json: %v", err)
		}
		pods := 0
		for _, c := range r.Containers {
			pods += len(c.Pods)
		}
		// Every Deployment and every pod read: a run that read less is
		// not the figure asked for.
		if len(r.Containers) != n/2 || pods != meta.Pods || r.NonGo != 3000 {
			b.Fatalf("gofit fleet read %d workload containers over %d pods and %d non-Go containers: want %d, %d and 3000 (sources %v)",
				len(r.Containers), pods, r.NonGo, n/2, meta.Pods, r.Sources)
		}
		hwm := procHWM(b, prom.PID())
		b.ReportMetric(wall.Seconds(), "gofit-wall-s")
		b.ReportMetric(float64(ru.Maxrss)/1024, "gofit-maxrss-MiB")
		b.ReportMetric(float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9, "gofit-cpu-s")
		b.ReportMetric(cpu, "prometheus-cpu-s")
		b.ReportMetric(hwm/(1<<20), "prometheus-peak-rss-MiB")
		b.Logf("%d Go containers running at a time (%d pods over the week, %d series, %d samples, %s on disk), 3,000 others: "+
			"gofit fleet %.1fs wall, %.1fs CPU, %.0f MiB peak RSS; Prometheus %.1fs CPU over the read, %.0f MiB peak RSS since its start; %s",
			n, meta.Pods, meta.Series, meta.Samples, strings.Fields(string(du) + " ?")[0], wall.Seconds(),
			float64(ru.Utime.Nano()+ru.Stime.Nano())/1e9, float64(ru.Maxrss)/1024, cpu, hwm/(1<<20), r.Sources["queries"])
		b.Logf("the server's evaluation time by query, summed over its chunks:\n%s", queryCosts(b, qlog))
	}
}

// queryCosts sums the server's evaluation time by query (a range query's
// chunks together), costliest first, from its query log.
func queryCosts(b *testing.B, file string) string {
	raw, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	type cost struct {
		query   string
		seconds float64
		n       int
	}
	by := map[string]*cost{}
	total := 0.0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var e struct {
			Params struct {
				Query string `json:"query"`
			} `json:"params"`
			Stats struct {
				Timings struct {
					Eval float64 `json:"evalTotalTime"`
				} `json:"timings"`
			} `json:"stats"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		c := by[e.Params.Query]
		if c == nil {
			c = &cost{query: e.Params.Query}
			by[e.Params.Query] = c
		}
		c.seconds += e.Stats.Timings.Eval
		c.n++
		total += e.Stats.Timings.Eval
	}
	var all []*cost
	for _, c := range by {
		all = append(all, c)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].seconds > all[j].seconds })
	var out strings.Builder
	fmt.Fprintf(&out, "%.1f s in all, %d queries\n", total, len(by))
	for _, c := range all[:min(len(all), 12)] {
		q := c.query
		if len(q) > 140 {
			q = q[:140] + "…"
		}
		fmt.Fprintf(&out, "%7.1f s  %2d× %s\n", c.seconds, c.n, q)
	}
	return out.String()
}

// procCPU is a process's user and system CPU so far, in seconds.
func procCPU(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 14th and 15th of the line, the 12th and 13th after it.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// procHWM is a process's peak resident set (VmHWM), in bytes.
func procHWM(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	b.Fatalf("/proc/%d/status: no VmHWM", pid)
	return 0
}

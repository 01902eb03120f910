package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/lab"
)

// canLab skips unless this machine lets the lab create cgroups.
func canLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab needs root to create cgroups")
	}
	sb, err := lab.NewSandbox()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	sb.Close()
}

// leftovers lists lab cgroups and sample processes that outlived a run.
func leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	self, err := cgroup.NewFS("/").Self()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*cgroup.Node{self.CPU, self.CPUAcct, self.Memory, self.Unified} {
		if n == nil {
			continue
		}
		m, _ := filepath.Glob(filepath.Join(n.Dir, "gofit-lab-*"))
		out = append(out, m...)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(lab.SampleCommand)) {
			out = append(out, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

type labResults struct {
	Machine struct {
		CPUs          int    `json:"cpus"`
		CgroupVersion int    `json:"cgroup_version"`
		GoVersion     string `json:"go_version"`
	} `json:"machine"`
	CPU []struct {
		Quota      float64 `json:"quota_cores"`
		Setting    string  `json:"setting"`
		Mode       string  `json:"mode"`
		GOMAXPROCS int     `json:"gomaxprocs"`
		RPS        float64 `json:"rps"`
		P99        float64 `json:"p99_ms"`
		CPUms      float64 `json:"cpu_ms_per_request"`
		Errors     int     `json:"errors"`
	} `json:"cpu"`
	Memory []struct {
		Setting string `json:"setting"`
		Floor   *int64 `json:"floor_bytes"`
		Trials  []struct {
			Limit   int64  `json:"limit_bytes"`
			Outcome string `json:"outcome"`
		} `json:"trials"`
	} `json:"memory"`
	Recommendation struct {
		MemoryLimit int64             `json:"memory_limit_bytes"`
		CPULimit    float64           `json:"cpu_limit_cores"`
		Env         map[string]string `json:"env"`
		YAML        string            `json:"yaml"`
	} `json:"recommendation"`
}

func TestLabQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the lab's real study in -short mode")
	}
	canLab(t)
	out := t.TempDir()
	cmd := gofitCmd("lab", "--quick", "--json", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("gofit lab --quick: %v\n%s", err, stderr.String())
	}
	t.Logf("gofit lab --quick took %v", time.Since(start).Round(time.Second))
	if !strings.Contains(stderr.String(), "ETA") {
		t.Errorf("no progress with an ETA on stderr:\n%s", stderr.String())
	}
	var r labResults
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	onDisk, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil || !bytes.Equal(bytes.TrimSpace(onDisk), bytes.TrimSpace(stdout.Bytes())) {
		t.Errorf("results.json differs from --json output (%v)", err)
	}
	if r.Machine.CPUs < 1 || r.Machine.CgroupVersion == 0 || r.Machine.GoVersion == "" {
		t.Errorf("machine %+v", r.Machine)
	}

	// CPU: the quick grid, and physics: a cgroup cannot use more CPU than
	// its quota, so rps × CPU per request ÷ quota stays at or below 1
	// (plus slack for the period boundary), and above 0.
	seen := map[string]bool{}
	for _, c := range r.CPU {
		seen[c.Setting+"/"+c.Mode] = true
		if c.Quota != 0.25 {
			t.Errorf("quick CPU study ran quota %v", c.Quota)
		}
		eff := c.RPS * c.CPUms / 1000 / c.Quota
		if eff <= 0.05 || eff > 1.1 {
			t.Errorf("%s %s: rps %.0f × %.2f CPU ms/request ÷ %.2f cores = %.2f, outside (0.05, 1.1]", c.Setting, c.Mode, c.RPS, c.CPUms, c.Quota, eff)
		}
		if c.Errors > 0 {
			t.Errorf("%s %s: %d errors", c.Setting, c.Mode, c.Errors)
		}
		if c.Setting == lab.SetGofit && c.GOMAXPROCS != 1 {
			t.Errorf("gofit's plan ran with GOMAXPROCS %d at 0.25 cores, want 1", c.GOMAXPROCS)
		}
		if c.Setting == lab.SetGoDefault && r.Machine.CPUs >= 2 && c.GOMAXPROCS != 2 {
			t.Errorf("Go's default ran with GOMAXPROCS %d at 0.25 cores, want 2 (Go ≥ 1.25 never goes below 2)", c.GOMAXPROCS)
		}
	}
	for _, want := range []string{lab.SetProcs1, lab.SetGoDefault, lab.SetGofit} {
		for _, mode := range []string{"closed", "open"} {
			if !seen[want+"/"+mode] {
				t.Errorf("no %s %s-loop cell", want, mode)
			}
		}
	}

	// Memory: both floors found; gofit's plan survives at or below the no-knob floor.
	floors := map[string]int64{}
	for _, m := range r.Memory {
		if m.Floor == nil {
			t.Errorf("%s: no floor found in %d trials", m.Setting, len(m.Trials))
			continue
		}
		floors[m.Setting] = *m.Floor
		if *m.Floor%(1<<20) != 0 {
			t.Errorf("%s floor %d is not whole MiB", m.Setting, *m.Floor)
		}
	}
	if floors[lab.SetNone] == 0 || floors[lab.SetGofit] == 0 || floors[lab.SetGofit] > floors[lab.SetNone] {
		t.Errorf("floors %v: want gofit's at or below the no-knob one", floors)
	}
	t.Logf("floors: none %dMiB, gofit %dMiB", floors[lab.SetNone]>>20, floors[lab.SetGofit]>>20)
	if r.Recommendation.MemoryLimit < floors[lab.SetGofit] || r.Recommendation.CPULimit <= 0 || r.Recommendation.Env["GOMEMLIMIT"] == "" ||
		!strings.Contains(r.Recommendation.YAML, "memory: ") {
		t.Errorf("recommendation %+v", r.Recommendation)
	}

	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, title := range []string{"Throughput (closed loop)", "p99 latency (open loop)", "Throttled time (open loop)", "Survival against memory limit", "Throughput against memory limit"} {
		if !bytes.Contains(html, []byte(`aria-label="`+title+`"`)) {
			t.Errorf("report.html has no plot %q", title)
		}
	}
	if n := bytes.Count(html, []byte(`<polyline class="series"`)); n < 7 {
		t.Errorf("report.html draws %d data series, want at least 7", n)
	}
	for _, ref := range []string{"<script", "src=", "href=", "@import", "url("} {
		if bytes.Contains(html, []byte(ref)) {
			t.Errorf("report.html is not self-contained: it has %q", ref)
		}
	}
	if left := leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestLabInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	canLab(t)
	out := t.TempDir()
	cmd := gofitCmd("lab", "--quick", "--out", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt mid-trial, as Ctrl-C would.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "lab [  2/") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("an interrupted lab exited 0")
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the lab did not stop within 30s of SIGINT")
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "results.json")); err != nil {
		t.Errorf("no partial results: %v", err)
	}
	if left := leftovers(t); len(left) > 0 {
		t.Errorf("left behind after SIGINT: %v", left)
	}
}

func TestLabErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "--cmd", "x"}, "--cmd and --url go together"},
		{[]string{"lab", "--quotas", "0.5,fast"}, "--quotas"},
		{[]string{"lab", "--open-fraction", "2"}, "--open-fraction"},
		{[]string{"lab", "--repeats", "-1"}, "--repeats"},
		{[]string{"lab", "--cmd", "/nonexistent/svc {port}", "--url", "http://127.0.0.1:{port}/"}, "/nonexistent/svc"},
	} {
		if code, _, errOut := run(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("gofit %v: exit %d, stderr %q; want an error naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
)

// hasPrefix reports whether any of notes starts with prefix.
func hasPrefix(notes []string, prefix string) bool {
	for _, n := range notes {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// syncBuffer is a bytes.Buffer that os/exec's copying goroutine may
// write while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// canLab skips unless this machine lets the lab create cgroups.
func canLab(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: the lab needs root to create cgroups")
	}
	sb, err := sandbox.New()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	sb.Close()
}

// leftovers lists what the lab with this PID left behind: its cgroups,
// its temporary directory and sample processes started from it. Only
// that lab's: other labs may run on the machine at the same time.
func leftovers(t *testing.T, pid int) []string {
	t.Helper()
	var out []string
	self, err := cgroup.NewFS("/").Self()
	if err != nil {
		t.Fatal(err)
	}
	name := "gofit-lab-" + strconv.Itoa(pid)
	for _, n := range []*cgroup.Node{self.CPU, self.CPUAcct, self.Memory, self.Unified} {
		if n = manage.ParentFor(n); n == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(n.Dir, name)); err == nil {
			out = append(out, filepath.Join(n.Dir, name))
		}
	}
	tmp, _ := filepath.Glob(filepath.Join(os.TempDir(), name+"-*"))
	out = append(out, tmp...)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(lab.SampleCommand)) && bytes.Contains(b, []byte(name+"-")) {
			out = append(out, p+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

type labMetric struct {
	Value  float64 `json:"value"`
	Median float64 `json:"median"`
	CILow  float64 `json:"ci_low"`
	CIHigh float64 `json:"ci_high"`
}

type labResults struct {
	Machine struct {
		LoadAvg       string `json:"loadavg_at_start"`
		CPUs          int    `json:"cpus"`
		CgroupVersion int    `json:"cgroup_version"`
		GoVersion     string `json:"go_version"`
	} `json:"machine"`
	Placement struct {
		Isolated  bool   `json:"isolated"`
		Generator []int  `json:"generator_cpus"`
		Target    []int  `json:"target_cpus"`
		Note      string `json:"note"`
	} `json:"placement"`
	CPU []struct {
		Quota      float64  `json:"quota_cores"`
		Setting    string   `json:"setting"`
		SameAs     []string `json:"same_as"`
		Mode       string   `json:"mode"`
		GOMAXPROCS int      `json:"gomaxprocs"`
		Offered    float64  `json:"offered_rps"`
		Isolated   *bool    `json:"isolated"`
		RPS        float64  `json:"rps"`
		P99        float64  `json:"p99_ms"`
		Periods    int      `json:"periods"`
		Efficiency float64  `json:"cpu_efficiency"`
		Errors     int      `json:"errors"`
	} `json:"cpu"`
	Summary []struct {
		Quota      float64   `json:"quota_cores"`
		Setting    string    `json:"setting"`
		SameAs     []string  `json:"same_as"`
		Mode       string    `json:"mode"`
		Offered    float64   `json:"offered_rps"`
		RPS        labMetric `json:"rps"`
		P99        labMetric `json:"p99_ms"`
		Efficiency labMetric `json:"cpu_efficiency"`
		Samples    int       `json:"samples"`
		Repeats    int       `json:"repeats"`
		Verdict    *string   `json:"verdict"`
		Decided    bool      `json:"decided"`
		Failed     bool      `json:"failed"`
		Notes      []string  `json:"notes"`
	} `json:"cpu_summary"`
	Memory []struct {
		Setting string `json:"setting"`
		Floor   *int64 `json:"floor_bytes"`
		Healthy *int64 `json:"healthy_floor_bytes"`
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
		Check       *struct {
			Outcome string  `json:"outcome"`
			RPS     float64 `json:"rps"`
		} `json:"check"`
	} `json:"recommendation"`
	Lab struct {
		Wall          float64  `json:"wall_seconds"`
		Budget        float64  `json:"budget_seconds"`
		Warnings      []string `json:"warnings"`
		Failed        string   `json:"failed"`
		BudgetLimited bool     `json:"budget_limited"`
		BudgetNotes   []string `json:"budget_notes"`
	} `json:"lab"`
}

func TestLabQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the lab's real study in -short mode")
	}
	canLab(t)
	out := t.TempDir()
	cmd := gofitCmd("lab", "--quick", "--json", "--out", out)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("gofit lab --quick: %v\n%s", err, stderr.String())
	}
	took := time.Since(start)
	t.Logf("gofit lab --quick took %v", took.Round(time.Second))
	if !strings.Contains(stderr.String(), "ETA") {
		t.Errorf("no progress with an ETA on stderr:\n%s", stderr.String())
	}
	var r labResults
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	onDisk, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil || !bytes.Equal(bytes.TrimSpace(onDisk), bytes.TrimSpace([]byte(stdout.String()))) {
		t.Errorf("results.json differs from --json output (%v)", err)
	}
	if r.Machine.CPUs < 1 || r.Machine.CgroupVersion == 0 || r.Machine.GoVersion == "" {
		t.Errorf("machine %+v", r.Machine)
	}
	if r.Lab.Failed != "" {
		t.Errorf("the sample's study failed: %s", r.Lab.Failed)
	}
	// The budget is kept: the study ends within it plus one trial (the
	// longest a quick trial takes is well under 30 s).
	if r.Lab.Budget != 240 || r.Lab.Wall > r.Lab.Budget+30 {
		t.Errorf("lab took %.0fs of a %.0fs budget (want the 240 s of --quick, kept to within one trial)", r.Lab.Wall, r.Lab.Budget)
	}
	// Isolation: the generator is pinned; on 2 CPUs it must share one
	// with the target, which keeps both (its GOMAXPROCS depends on them).
	if r.Machine.CPUs >= 2 && (len(r.Placement.Generator) == 0 || r.Placement.Note == "") {
		t.Errorf("placement %+v: the generator was not pinned", r.Placement)
	}
	if r.Machine.CPUs == 2 && (r.Placement.Isolated || len(r.Placement.Target) != 2) {
		t.Errorf("placement %+v: on 2 CPUs the target keeps both and nothing is isolated", r.Placement)
	}

	// CPU: the quick grid, one rate per quota, same_as for identical
	// environments, and Go's default really at 2.
	offered := map[float64]float64{}
	for _, c := range r.CPU {
		if c.Quota != 0.25 {
			t.Errorf("quick CPU study ran quota %v", c.Quota)
		}
		if c.Isolated == nil || *c.Isolated != r.Placement.Isolated {
			t.Errorf("%s %s: isolated %v, placement says %v", c.Setting, c.Mode, c.Isolated, r.Placement.Isolated)
		}
		if c.Errors > 0 {
			t.Errorf("%s %s: %d errors", c.Setting, c.Mode, c.Errors)
		}
		if c.Mode == "open" {
			if o, ok := offered[c.Quota]; ok && o != c.Offered {
				t.Errorf("open-loop rates at %v differ: %v and %v", c.Quota, o, c.Offered)
			}
			offered[c.Quota] = c.Offered
		}
		if c.Mode == "closed" && c.Periods < 50 {
			t.Errorf("%s closed-loop window spans %d CFS periods, want at least 50", c.Setting, c.Periods)
		}
		if c.Setting == result.SetGofit && c.GOMAXPROCS != 1 {
			t.Errorf("gofit's plan ran with GOMAXPROCS %d at 0.25 cores, want 1", c.GOMAXPROCS)
		}
		if c.Setting == result.SetGoDefault && r.Machine.CPUs >= 2 && c.GOMAXPROCS != 2 {
			t.Errorf("Go's default ran with GOMAXPROCS %d at 0.25 cores, want 2 (Go ≥ 1.25 never goes below 2)", c.GOMAXPROCS)
		}
		if c.Setting == result.SetProcs1 {
			t.Errorf("gomaxprocs=1 measured on its own; at 0.25 cores it is gofit's environment")
		}
	}
	seen := map[string]bool{}
	for _, s := range r.Summary {
		seen[s.Setting+"/"+s.Mode] = true
		if s.Failed {
			t.Errorf("%s %s failed", s.Setting, s.Mode)
		}
		for name, m := range map[string]labMetric{"rps": s.RPS, "p99": s.P99} {
			if !(m.CILow > 0 && m.CILow <= m.Value && m.Value <= m.CIHigh) {
				t.Errorf("%s %s %s: %v outside its interval [%v, %v]", s.Setting, s.Mode, name, m.Value, m.CILow, m.CIHigh)
			}
		}
		if (s.Verdict == nil) != (s.Setting == result.SetGoDefault) {
			t.Errorf("%s %s: verdict %v; want one for every setting but go-default", s.Setting, s.Mode, s.Verdict)
		}
		// The lab aims for 5000 latencies per open-loop cell, but the
		// offered rate follows the machine's measured capacity, so a
		// slower or busier machine gets fewer: what it promises is to
		// say so, in the cell and in the budget notes. The figures
		// themselves are docs/results' business, not this test's.
		if s.Mode == "open" && s.Samples < 5000 {
			t.Logf("%s open-loop p99 from %d latencies (under the 5000 aimed for)", s.Setting, s.Samples)
			if !hasPrefix(s.Notes, fmt.Sprintf("p99 from %d latencies", s.Samples)) || !r.Lab.BudgetLimited || len(r.Lab.BudgetNotes) == 0 {
				t.Errorf("%s open loop: %d latencies, under the 5000 aimed for, and no cut reported (notes %q, budget notes %q)", s.Setting, s.Samples, s.Notes, r.Lab.BudgetNotes)
			}
		}
		// A verdict that is decided rests on stats.MinRuns runs a side.
		if s.Verdict != nil && s.Decided && s.Repeats < stats.MinRuns {
			t.Errorf("%s %s: verdict %q decided on %d runs, under the %d a verdict needs", s.Setting, s.Mode, *s.Verdict, s.Repeats, stats.MinRuns)
		}
		// Physics: over 50 periods a cgroup uses no more than its quota;
		// a reading above it is a measuring fault. How close to the quota
		// a saturated cell gets depends on what else the machine runs
		// (issue 44: a build beside it takes its share), so a low
		// reading is logged, not failed on.
		if s.Mode == "closed" && s.Efficiency.Median > 1.05 {
			t.Errorf("%s closed loop at 250m: CPU used ÷ quota %.3f, above the quota (load average at start: %s)", s.Setting, s.Efficiency.Median, r.Machine.LoadAvg)
		}
		if s.Mode == "closed" && s.Efficiency.Median < 0.9 {
			t.Logf("%s closed loop at 250m: CPU used ÷ quota %.3f (load average at start: %s): the machine was busy", s.Setting, s.Efficiency.Median, r.Machine.LoadAvg)
		}
		if s.Setting == result.SetGofit && (len(s.SameAs) != 1 || s.SameAs[0] != result.SetProcs1) {
			t.Errorf("gofit at 250m: same_as %v, want [%s]", s.SameAs, result.SetProcs1)
		}
	}
	for _, want := range []string{result.SetGoDefault, result.SetGofit} {
		for _, mode := range []string{"closed", "open"} {
			if !seen[want+"/"+mode] {
				t.Errorf("no %s %s-loop summary", want, mode)
			}
		}
	}

	// Memory: floors for every setting, healthy at or above surviving;
	// automemlimit side by side.
	floors := map[string]int64{}
	for _, m := range r.Memory {
		if m.Floor == nil || m.Healthy == nil {
			t.Errorf("%s: floor %v, healthy floor %v in %d trials", m.Setting, m.Floor, m.Healthy, len(m.Trials))
			continue
		}
		floors[m.Setting] = *m.Floor
		if *m.Healthy < *m.Floor {
			t.Errorf("%s: healthy floor %d under the survival floor %d", m.Setting, *m.Healthy, *m.Floor)
		}
	}
	if floors[result.SetGofit] == 0 || floors[result.SetAutoMemLimit] == 0 {
		t.Errorf("floors %v: want gofit's and automemlimit's", floors)
	}
	t.Logf("floors: gofit %dMiB, automemlimit %dMiB", floors[result.SetGofit]>>20, floors[result.SetAutoMemLimit]>>20)
	rec := r.Recommendation
	// The recommendation rests on gofit's floor or the ratio's, whichever
	// is lower.
	if rec.MemoryLimit < min(floors[result.SetGofit], floors[result.SetAutoMemLimit]) || rec.CPULimit <= 0 || rec.Env["GOMEMLIMIT"] == "" || !strings.Contains(rec.YAML, "memory: ") {
		t.Errorf("recommendation %+v", rec)
	}
	if rec.Check == nil || rec.Check.Outcome != "ok" {
		t.Errorf("check trial of the recommended pair: %+v", rec.Check)
	}

	html, err := os.ReadFile(filepath.Join(out, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, title := range []string{"p99 latency, open loop at equal offered load", "Throughput, closed loop", "Latency by percentile at 250m, open loop", "Survival against memory limit"} {
		if !bytes.Contains(html, []byte(`aria-label="`+title+`"`)) {
			t.Errorf("report.html has no plot %q", title)
		}
	}
	// The verdicts and the recommendation come before any plot.
	v, rc, p := bytes.Index(html, []byte("Verdicts against go-default")), bytes.Index(html, []byte("container spec fragment")), bytes.Index(html, []byte("<svg"))
	if v < 0 || rc < 0 || p < 0 || v > p || rc > p {
		t.Errorf("verdicts at %d, recommendation at %d, first plot at %d: want both before the plots", v, rc, p)
	}
	for _, ref := range []string{"<script", "src=", "href=", "@import", "url("} {
		if bytes.Contains(html, []byte(ref)) {
			t.Errorf("report.html is not self-contained: it has %q", ref)
		}
	}
	if left := leftovers(t, cmd.Process.Pid); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestLabInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	canLab(t)
	interruptLab(t, "")
}

// interruptLab runs gofit lab --quick with args in dir ("" is here),
// interrupts it mid-trial as Ctrl-C would, and checks that it stops with
// 130, says so once, keeps its partial results and leaves nothing behind
// (cgroups, processes, its temporary directory: an image's unpacked root
// filesystem is in it).
func interruptLab(t *testing.T, dir string, args ...string) {
	t.Helper()
	out := t.TempDir()
	cmd := gofitCmd(append([]string{"lab", "--quick", "--out", out}, args...)...)
	cmd.Dir = dir
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), "lab [  2/") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "lab [  2/") {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		t.Fatalf("no second trial within 60 s, so no interrupt mid-trial to test:\n%s", stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Errorf("an interrupted lab exited %d (%v), want 130\n%s", code, err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the lab did not stop within 30s of SIGINT")
	}
	var tail []string
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "lab [") && !strings.HasPrefix(line, "gofit lab: warning:") {
			tail = append(tail, line)
		}
	}
	if len(tail) != 1 || !strings.Contains(tail[0], "interrupted") {
		t.Errorf("after the progress lines, want one line saying it was interrupted; got %q", tail)
	}
	if _, err := os.Stat(filepath.Join(out, "results.json")); err != nil {
		t.Errorf("no partial results: %v", err)
	}
	if left := leftovers(t, cmd.Process.Pid); len(left) > 0 {
		t.Errorf("left behind after SIGINT: %v", left)
	}
}

func TestLabErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lab", "--cmd", "x"}, "--cmd goes with --url or --targets"},
		{[]string{"lab", "--cmd", " ", "--url", "http://127.0.0.1:{port}/"}, "--cmd \" \": no command"},
		{[]string{"lab", "--quotas", "0.5,fast"}, "--quotas"},
		{[]string{"lab", "--open-fraction", "2"}, "--open-fraction"},
		{[]string{"lab", "--open-fraction", "0"}, "--open-fraction"},
		{[]string{"lab", "--repeats", "-1"}, "--repeats"},
		{[]string{"lab", "--requests", "0"}, "--requests 0"},
		{[]string{"lab", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"lab", "--mem-requests", "0"}, "--mem-requests 0"},
		{[]string{"lab", "--max-repeats", "0"}, "--max-repeats 0"},
		{[]string{"lab", "--open-duration", "0s"}, "--open-duration"},
		{[]string{"lab", "--budget", "-1m"}, "--budget"},
		{[]string{"lab", "--target-rps", "-5"}, "--target-rps"},
		{[]string{"lab", "--slo-p99", "50ms"}, "--slo-p99 needs --target-rps"},
		{[]string{"lab", "--out", file}, "not a directory"},
		{[]string{"lab", "--cmd", "/nonexistent/svc {port}", "--url", "http://127.0.0.1:{port}/"}, "/nonexistent/svc"},
	} {
		if code, _, errOut := run(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "panic") {
			t.Errorf("gofit %v: exit %d, stderr %q; want an error naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

// An --out the lab cannot write fails before any trial runs: a usage error
// (exit 2) from the check before the sandbox, not a failed write (exit 1)
// after the study. The exit code says which, with no clock involved.
func TestLabOutReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes through permission bits; a read-only mount is the
		// real case: /proc is one everywhere.
		code, _, errOut := run("lab", "--out", "/proc/gofit-lab-out")
		if code != 2 || !strings.Contains(errOut, "--out") || strings.Contains(errOut, "write results") {
			t.Errorf("--out on a read-only filesystem: exit %d, stderr %q; want exit 2 naming --out before any trial", code, errOut)
		}
		return
	}
	t.Skip("skipping: needs root for the lab's flags to get this far")
}

// A target that crashes, or answers every request with an error, never
// yields a recommendation, and the exit status says so.
func TestLabFailingTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	canLab(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cmd, url, want string
	}{
		// The test binary serves the sample (GOFIT_TEST_AS_GOFIT passes
		// through the lab's environment) and is killed after 2 s.
		{"crashes after 2s", "timeout -s KILL 2 " + self + " lab-sample 127.0.0.1:{port}", "http://127.0.0.1:{port}/work", "the target failed"},
		{"answers 404", self + " lab-sample 127.0.0.1:{port}", "http://127.0.0.1:{port}/nope", "HTTP 404 Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			cmd := gofitCmd("lab", "--quick", "--out", out, "--cmd", tc.cmd, "--url", tc.url)
			var stdout, stderr syncBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Errorf("exit %d (%v), want 1\n%s", code, err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, stderr.String())
			}
			if strings.Contains(stdout.String(), "cpu: ") {
				t.Errorf("a failing target got a CPU recommendation:\n%s", stdout.String())
			}
			if left := leftovers(t, cmd.Process.Pid); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// TestLabHangupAndBrokenPipe: a lab whose terminal closes (SIGHUP), and
// one interrupted while its stderr is a pipe nobody reads any more (Ctrl-C
// on `gofit lab 2>&1 | tee lab.log` ends tee too), still remove what they
// made: before, the first died at once and the second died of SIGPIPE at
// its next progress line, and both left their cgroups and temporary
// directory behind.
func TestLabHangupAndBrokenPipe(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode")
	}
	canLab(t)
	for _, c := range []struct {
		name   string
		sig    syscall.Signal
		closed bool
	}{{"SIGHUP", syscall.SIGHUP, false}, {"SIGINT with stderr's reader gone", syscall.SIGINT, true}} {
		t.Run(c.name, func(t *testing.T) {
			cmd := gofitCmd("lab", "--quick", "--out", t.TempDir())
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			// Read the progress until the second trial runs.
			seen := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(r)
				for sc.Scan() {
					if strings.Contains(sc.Text(), "lab [  2/") {
						seen <- true
						if c.closed {
							return // and the reader goes
						}
					}
				}
			}()
			select {
			case <-seen:
			case <-time.After(60 * time.Second):
				cmd.Process.Signal(syscall.SIGINT)
				cmd.Wait()
				r.Close()
				t.Fatal("no second trial within 60 s, so no interrupt mid-trial to test")
			}
			if c.closed {
				r.Close()
			}
			time.Sleep(300 * time.Millisecond)
			cmd.Process.Signal(c.sig)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if code := cmd.ProcessState.ExitCode(); code != 130 {
					t.Errorf("the lab exited %d (%v, %v) after %s, want 130", code, err, cmd.ProcessState, c.name)
				}
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("the lab did not stop within 30s of %s", c.name)
			}
			if !c.closed {
				r.Close()
			}
			if left := leftovers(t, cmd.Process.Pid); len(left) > 0 {
				t.Errorf("left behind after %s: %v", c.name, left)
			}
		})
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/fit"
)

// The test binary doubles as gofit, so integration tests can run it as a
// real process inside a cgroup without a separate build.
func TestMain(m *testing.M) {
	sandbox.MaybeExec()
	if os.Getenv("GOFIT_TEST_AS_GOFIT") == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	if addr := os.Getenv("GOFIT_TEST_AS_OFFHEAP"); addr != "" {
		os.Exit(serveOffHeap(addr))
	}
	// This binary links envtest (the webhook's tests), whose port
	// manager makes $XDG_CACHE_HOME/kubebuilder-envtest at init, or
	// /tmp/kubebuilder-envtest where there is no cache directory: in
	// every image target the lab starts through this binary
	// (sandbox.MaybeExec), whose environment is the image's, with no
	// HOME. gofit itself does not link it. Remove the empty directory
	// those left, if it was not there before.
	ports := filepath.Join(os.TempDir(), "kubebuilder-envtest")
	_, err := os.Stat(ports)
	had := err == nil
	code := m.Run()
	if !had {
		_ = os.Remove(ports) // only if empty: another process may hold ports there
	}
	os.Exit(code)
}

// gofitCmd returns a command that runs this test binary as gofit.
func gofitCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GOFIT_TEST_AS_GOFIT=1")
	return cmd
}

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return code, o.String(), e.String()
}

type inspectJSON struct {
	CgroupVersion int `json:"cgroup_version"`
	CPU           struct {
		LimitCores  *float64 `json:"limit_cores"`
		LimitSource *string  `json:"limit_source"`
		CPUSetCPUs  *int     `json:"cpuset_cpus"`
	} `json:"cpu"`
	Memory struct {
		MaxBytes       *int64  `json:"max_bytes"`
		HighBytes      *int64  `json:"high_bytes"`
		EffectiveBytes *int64  `json:"effective_bytes"`
		MaxSource      *string `json:"max_source"`
	} `json:"memory"`
	Plan struct {
		GOMAXPROCS      int        `json:"gomaxprocs"`
		GOMEMLIMITBytes *int64     `json:"gomemlimit_bytes"`
		Reasons         []fit.Note `json:"reasons"`
		Warnings        []fit.Note `json:"warnings"`
	} `json:"plan"`
}

func TestInspectRealCgroup(t *testing.T) {
	g := cgtest.NewGroup(t)
	if err := g.SetCPU(0.5, 0); err != nil { // cfs_quota_us 50000 of 100000
		t.Fatal(err)
	}
	if err := g.SetMemoryMax(100 << 20); err != nil {
		t.Fatal(err)
	}
	inner := gofitCmd("inspect", "--json")
	cmd := g.Command(inner.Path, inner.Args[1:]...)
	cmd.Env = inner.Env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gofit inspect --json in a cgroup: %v", err)
	}
	var r inspectJSON
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.CPU.LimitCores == nil || *r.CPU.LimitCores != 0.5 || r.CPU.LimitSource == nil || *r.CPU.LimitSource != g.CPU.Path {
		t.Errorf("cpu = %+v, want limit_cores 0.5 from %s", r.CPU, g.CPU.Path)
	}
	if r.Memory.MaxBytes == nil || *r.Memory.MaxBytes != 104857600 || *r.Memory.MaxSource != g.Memory.Path {
		t.Errorf("memory = %+v, want max_bytes 104857600", r.Memory)
	}
	if r.Plan.GOMAXPROCS != 1 {
		t.Errorf("plan gomaxprocs = %d, want 1", r.Plan.GOMAXPROCS)
	}
	if r.Plan.GOMEMLIMITBytes == nil || *r.Plan.GOMEMLIMITBytes >= 104857600 || *r.Plan.GOMEMLIMITBytes < 80<<20 {
		t.Errorf("plan gomemlimit = %v, want below 100MiB", r.Plan.GOMEMLIMITBytes)
	}
}

// GOMAXPROCS from the CPU request on a real cgroup without a CPU limit:
// the request is what the kubelet writes for 500m (512 shares on v1, the
// weight runc's linear formula gives on v2).
func TestInspectCPURequestRealCgroup(t *testing.T) {
	g := cgtest.NewGroup(t)
	file, value := "cpu.shares", "512"
	if g.CPU.Version == 2 {
		file, value = "cpu.weight", "20"
	}
	if err := os.WriteFile(filepath.Join(g.CPU.Dir, file), []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
	inner := gofitCmd("inspect", "--json", "--cpus", "64", "--cpu-request-factor", "1", "--cpu-request-min", "1")
	cmd := g.Command(inner.Path, inner.Args[1:]...)
	cmd.Env = inner.Env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gofit inspect in a cgroup: %v", err)
	}
	var r struct {
		CPU struct {
			RequestCores *float64 `json:"request_cores"`
		} `json:"cpu"`
		Plan struct {
			GOMAXPROCS       int    `json:"gomaxprocs"`
			GOMAXPROCSReason string `json:"gomaxprocs_reason"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.CPU.RequestCores == nil || *r.CPU.RequestCores < 0.5 || *r.CPU.RequestCores > 0.52 || r.Plan.GOMAXPROCS != 1 || r.Plan.GOMAXPROCSReason != "cpu_request" {
		t.Errorf("request %v, GOMAXPROCS %d (%s); want about 0.5 cores, 1 (cpu_request)\n%s", r.CPU.RequestCores, r.Plan.GOMAXPROCS, r.Plan.GOMAXPROCSReason, out)
	}
}

func TestInspectFixtures(t *testing.T) {
	code, out, errOut := run("inspect", "--json", "--cpus", "8", "--root", "../../cgroup/testdata/v2-kubepods-systemd")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r inspectJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.CgroupVersion != 2 || *r.CPU.LimitCores != 0.5 || r.Memory.MaxBytes == nil || *r.Memory.MaxBytes != 512<<20 || r.Memory.HighBytes != nil ||
		*r.Memory.EffectiveBytes != 512<<20 || r.Plan.GOMAXPROCS != 1 || *r.CPU.CPUSetCPUs != 16 {
		t.Errorf("got %s", out)
	}

	code, out, _ = run("inspect", "--root", "../../cgroup/testdata/v2-cgroupns", "--cpus", "8")
	if code != 0 || !strings.Contains(out, "GOMAXPROCS=1") || !strings.Contains(out, "limit 1.5 cores") || !strings.Contains(out, "high 192MiB") {
		t.Errorf("text output (exit %d):\n%s", code, out)
	}
}

func TestInspectErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect", "--root", "../../cgroup/testdata/malformed-cpu-max"}, 1, "cgroup/testdata/malformed-cpu-max/sys/fs/cgroup/svc/cpu.max:1: malformed \"fifty 100000\""},
		{[]string{"inspect", "--root", "../../cgroup/testdata/malformed-mountinfo"}, 1, "proc/self/mountinfo"},
		{[]string{"inspect", "--root", "/nonexistent-gofit"}, 1, "no cgroup found"},
		{[]string{"inspect", "--memory-ratio", "2"}, 2, "--memory-ratio"},
		{[]string{"inspect", "--memory-ratio", "NaN"}, 2, "--memory-ratio"},
		{[]string{"run", "--memory-ratio", "NaN", "--", "sh"}, 2, "--memory-ratio"},
		{[]string{"run", "--memory-ratio", "+Inf", "--", "sh"}, 2, "--memory-ratio"},
		{[]string{"run", "--cpu-request-factor", "NaN", "--", "sh"}, 2, "--cpu-request-factor: bad option: CPU request factor NaN"},
		{[]string{"inspect", "--cpu-request-min", "0"}, 2, "--cpu-request-min: bad option: CPU request minimum 0: want 1 or 2"},
		{[]string{"run", "--json", "--", "sh"}, 2, "--json needs --dry-run"},
		{[]string{"inspect", "--gogc", "lots"}, 2, "--gogc"},
		{[]string{"inspect", "extra"}, 2, "unexpected argument"},
		{[]string{"frobnicate"}, 2, "unknown command"},
	} {
		code, _, errOut := run(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("gofit %v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, errOut, tc.code, tc.want)
		}
		if tc.code == 1 && strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("gofit %v: error is not one line: %q", tc.args, errOut)
		}
	}
}

func TestRunRealCgroup(t *testing.T) {
	g := cgtest.NewGroup(t)
	if err := g.SetCPU(0.25, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMemoryMax(64 << 20); err != nil {
		t.Fatal(err)
	}
	inner := gofitCmd("run", "--", "sh", "-c", `echo "$$ $GOMAXPROCS $GOMEMLIMIT"; exit 7`)
	cmd := g.Command(inner.Path, inner.Args[1:]...)
	cmd.Env = inner.Env
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("exit = %v, want the child's status 7", err)
	}
	var pid, procs int
	var memlimit int64
	if _, err := fmt.Sscan(out.String(), &pid, &procs, &memlimit); err != nil {
		t.Fatalf("child printed %q: %v", out.String(), err)
	}
	if pid != cmd.Process.Pid {
		t.Errorf("child PID %d, want gofit's own %d (exec in place)", pid, cmd.Process.Pid)
	}
	if procs != 1 {
		t.Errorf("child GOMAXPROCS=%d, want 1", procs)
	}
	if memlimit <= 32<<20 || memlimit >= 64<<20 {
		t.Errorf("child GOMEMLIMIT=%d, want below 64MiB (and above half of it)", memlimit)
	}
}

func TestRunKeepsExplicitEnvAndPassesSignals(t *testing.T) {
	cmd := gofitCmd("run", "--", "sh", "-c", `echo "$GOMAXPROCS $GOMEMLIMIT"; exec sleep 30`)
	cmd.Env = append(cmd.Env, "GOMAXPROCS=3", "GOMEMLIMIT=1GiB")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 64)
	n, _ := stdout.Read(line)
	if got := strings.TrimSpace(string(line[:n])); got != "3 1GiB" {
		t.Errorf("child saw %q, want the user's own GOMAXPROCS=3 GOMEMLIMIT=1GiB", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("wait = %v, want the child killed by SIGTERM", err)
	}
}

// The child sees each variable once: gofit replaces an invalid GOMAXPROCS
// (Go ignores it) and an empty GOMEMLIMIT (Go treats it as unset) rather
// than appending after them, since Go reads the first of duplicates.
func TestRunReplacesInvalidAndEmptyValues(t *testing.T) {
	g := cgtest.NewGroup(t)
	if err := g.SetCPU(1, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMemoryMax(64 << 20); err != nil {
		t.Fatal(err)
	}
	inner := gofitCmd("run", "--", "env") // env itself: a shell would drop duplicates
	cmd := g.Command(inner.Path, inner.Args[1:]...)
	cmd.Env = append(inner.Env, "GOMAXPROCS=abc", "GOMEMLIMIT=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var procs, memlimit, marker []string
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "GOMAXPROCS":
			procs = append(procs, v)
		case "GOMEMLIMIT":
			memlimit = append(memlimit, v)
		case "GOFIT_RUN":
			marker = append(marker, v)
		}
	}
	if len(procs) != 1 || procs[0] != "1" || len(memlimit) != 1 || memlimit[0] == "" || len(marker) != 1 ||
		marker[0] != "GOMAXPROCS=1,GOMEMLIMIT="+memlimit[0] {
		t.Errorf("child saw GOMAXPROCS %q, GOMEMLIMIT %q, GOFIT_RUN %q; want each once, 1, a limit, and the marker naming both", procs, memlimit, marker)
	}
}

func TestRunDryRunAndErrors(t *testing.T) {
	code, out, errOut := run("run", "--dry-run", "--root", "../../cgroup/testdata/v2-kubepods-systemd", "--cpus", "4", "--", "sh")
	if code != 0 || !strings.Contains(out, "GOMAXPROCS=1\n") || !strings.Contains(out, "GOMEMLIMIT=") || !strings.Contains(out, "# GOMAXPROCS=1: CPU limit 0.5 cores") ||
		!strings.Contains(out, "GOFIT_RUN=GOMAXPROCS=1,GOMEMLIMIT=") {
		t.Errorf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run("run", "--dry-run", "--json", "--root", "../../cgroup/testdata/v2-kubepods-systemd", "--cpus", "4", "--", "sh")
	var dry struct {
		Export map[string]string `json:"export"`
		Unset  []string          `json:"unset"`
	}
	if err := json.Unmarshal([]byte(out), &dry); code != 0 || err != nil || dry.Export["GOMAXPROCS"] != "1" || dry.Unset == nil {
		t.Errorf("dry run --json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "missing CMD"},
		{[]string{"run", "--", "/nonexistent/gofit-cmd"}, "/nonexistent/gofit-cmd"},
		{[]string{"run", "--gogc", "x", "--", "sh"}, "--gogc"},
	} {
		if code, _, errOut := run(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("gofit %v: exit %d, stderr %q; want an error naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

package promtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

// Limits are a scrape target's cgroup: a CPU quota of CPU cores per
// Period, a CPU weight as for Weight cores (large, so that the quota and
// not a busy host decides what it gets), and a memory limit.
type Limits struct {
	CPU    float64
	Period time.Duration
	Weight float64
	Memory int64
}

// BuildService builds examples/service from the checkout whose root is
// repo, into the test's temporary directory.
func BuildService(t testing.TB, repo string) string {
	t.Helper()
	return Build(t, repo, "./examples/service")
}

// BuildPlainService builds plainservice: the same service without gofit,
// linking only client_golang.
func BuildPlainService(t testing.TB, repo string) string {
	t.Helper()
	return Build(t, repo, "./tools/promtest/plainservice")
}

// Build builds the command pkg (a path relative to repo) into the test's
// temporary directory.
func Build(t testing.TB, repo, pkg string) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", exe, pkg)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return exe
}

// StartService runs exe (examples/service) in a new cgroup with lim and
// exactly env (with PATH), and returns its address once /metrics
// answers. The process is killed when the test ends, before its cgroup
// is removed, pass or fail; its output is logged when the test failed.
func StartService(t testing.TB, exe, name string, lim Limits, env []string) string {
	t.Helper()
	return StartProcess(t, exe, name, lim, env).Addr
}

// Process is a service StartProcess started.
type Process struct {
	Addr string
	// Cgroups are its cgroup's paths as the kernel names them (as in
	// /proc/PID/cgroup), one per hierarchy it was created in: what
	// cAdvisor names a container. On a v1 host each controller may put
	// the group at another path.
	Cgroups []string
}

// StartProcess is StartService, and says where the process's cgroup is.
func StartProcess(t testing.TB, exe, name string, lim Limits, env []string) Process {
	t.Helper()
	return StartCommand(t, name, lim, env, func(addr string) []string { return []string{exe, "-addr", addr} })
}

// StartCommand is StartProcess for a command line other than
// "EXE -addr ADDR": argv gives it for the address to listen on.
func StartCommand(t testing.TB, name string, lim Limits, env []string, argv func(addr string) []string) Process {
	t.Helper()
	g, paths := newGroup(t, lim)
	addr := freeLocal(t)
	logf := serviceLog(t, name)
	cmd := serviceCommand(g, argv(addr), env, logf)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		closeLog(t, name, logf)
	})
	waitMetrics(t, name, addr)
	return Process{Addr: addr, Cgroups: paths}
}

// serviceCommand is args in g with exactly env (and PATH), its output
// into logf, in a process group of its own that dies with the test.
func serviceCommand(g *manage.Group, args, env []string, logf *os.File) *exec.Cmd {
	cmd := g.Command(args[0], args[1:]...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "GOFIT_LOG=warn"}, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd
}

// serviceLog is the file a service's output goes to, in the test's
// temporary directory.
func serviceLog(t testing.TB, name string) *os.File {
	t.Helper()
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return logf
}

// closeLog closes a service's log and shows it when the test failed.
func closeLog(t testing.TB, name string, logf *os.File) {
	logf.Close()
	if t.Failed() {
		if b, err := os.ReadFile(logf.Name()); err == nil && len(b) > 0 {
			t.Logf("%s log:\n%s", name, b)
		}
	}
}

// newGroup is a test cgroup with lim, and its paths as the kernel names
// them.
func newGroup(t testing.TB, lim Limits) (*manage.Group, []string) {
	t.Helper()
	g := cgtest.NewGroup(t)
	if err := g.SetCPU(lim.CPU, lim.Period); err != nil {
		t.Fatal(err)
	}
	if err := g.SetCPURequest(lim.Weight); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMemoryMax(lim.Memory); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, n := range []*cgroup.Node{g.CPU, g.CPUAcct, g.Memory, g.Unified} {
		if n != nil && !slices.Contains(paths, n.Path) {
			paths = append(paths, n.Path)
		}
	}
	return g, paths
}

// freeLocal is a free port on the loopback address.
func freeLocal(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitMetrics waits until addr answers /metrics, for 20 s at most.
func waitMetrics(t testing.TB, name, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /metrics not answering after 20s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Load asks url again and again, one request at a time, until ctx ends:
// a closed loop that keeps a service busy. A failed request is retried
// after a short pause (the service restarting, an OOM kill).
func Load(ctx context.Context, url string) {
	c := &http.Client{Timeout: 10 * time.Second}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

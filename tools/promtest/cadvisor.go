package promtest

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	cadvisorOnce sync.Once
	cadvisorPath string
	cadvisorErr  error
)

// CAdvisor returns the cAdvisor binary kube/hack/cadvisor.sh builds from
// the Go module (once, cached by version) in the checkout whose root is
// repo; GOFIT_CADVISOR names another.
func CAdvisor(t testing.TB, repo string) string {
	t.Helper()
	if p := os.Getenv("GOFIT_CADVISOR"); p != "" {
		return p
	}
	cadvisorOnce.Do(func() {
		cmd := exec.Command("bash", filepath.Join(repo, "kube", "hack", "cadvisor.sh"))
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if cadvisorErr = cmd.Run(); cadvisorErr != nil {
			cadvisorErr = &buildError{err: cadvisorErr, out: stderr.String()}
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		cadvisorPath = lines[len(lines)-1]
	})
	if cadvisorErr != nil {
		t.Fatalf("build cadvisor: %v", cadvisorErr)
	}
	return cadvisorPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// ContainerLabels are the labels the kubelet gives a container's cAdvisor
// series (namespace, pod, container), by cgroup path.
type ContainerLabels map[string]map[string]string

// StartCAdvisor runs the cAdvisor binary bin on the cgroups of labels
// (and nothing else: each path is a raw-prefix), labelled as the kubelet
// labels them, and returns the address serving /metrics/cadvisor once a
// labelled container is there. It stops when the test ends.
func StartCAdvisor(t testing.TB, bin string, labels ContainerLabels) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "labels.json")
	b, err := json.Marshal(labels)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var prefixes []string
	for p := range labels {
		prefixes = append(prefixes, p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(dir, "cadvisor.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-listen", addr, "-raw-prefix", strings.Join(prefixes, ","), "-labels", file)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		logf.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logf.Name()); err == nil && len(out) > 0 {
				t.Logf("cadvisor log:\n%s", tail(out, 4000))
			}
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics/cadvisor")
		if err == nil {
			var body bytes.Buffer
			body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && labelledCFS(body.String()) {
				return addr
			}
		}
		select {
		case <-done:
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("cadvisor exited:\n%s", tail(out, 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cadvisor at %s: no labelled container after 30s: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// labelledCFS: some container_cpu_cfs_periods_total line carries a
// non-empty container label.
func labelledCFS(body string) bool {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "container_cpu_cfs_periods_total{") && !strings.Contains(l, `container=""`) && strings.Contains(l, `container="`) {
			return true
		}
	}
	return false
}

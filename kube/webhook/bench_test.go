package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
)

// benchServerEnv, when set to a directory holding tls.crt and tls.key, makes
// the test binary run the webhook server instead of the tests, on the
// address in benchAddrEnv: the benchmarks measure the server in a process
// of its own, apart from the load generator.
const (
	benchServerEnv = "GOFIT_WEBHOOK_BENCH_SERVER"
	benchAddrEnv   = "GOFIT_WEBHOOK_BENCH_ADDR"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(benchServerEnv); dir != "" {
		os.Exit(benchServer(dir, os.Getenv(benchAddrEnv)))
	}
	os.Exit(m.Run())
}

func benchServer(dir, addr string) int {
	s, err := NewServer(Config{Addr: addr, CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// benchProcess starts the webhook as a process of its own, with env added
// to this one's: this test binary's server, or `bin webhook` when bin names
// a gofit binary. It returns the process, the base URL and an HTTP/2 client
// that trusts it (the API server talks HTTP/2 to webhooks: one connection,
// many streams, no handshake per burst), once /readyz answers. The process
// is stopped when the benchmark ends.
func benchProcess(b *testing.B, bin string, env ...string) (*exec.Cmd, string, *http.Client) {
	dir := b.TempDir()
	ca, crt, key := newCert(b)
	writeAtomic(b, filepath.Join(dir, "tls.crt"), crt)
	writeAtomic(b, filepath.Join(dir, "tls.key"), key)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var cmd *exec.Cmd
	if bin != "" {
		cmd = exec.Command(bin, "webhook", "--addr", addr, "--cert-file", filepath.Join(dir, "tls.crt"), "--key-file", filepath.Join(dir, "tls.key"), "--shutdown-delay", "0")
		cmd.Env = os.Environ()
	} else {
		cmd = exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), benchServerEnv+"="+dir, benchAddrEnv+"="+addr)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "localhost"},
		MaxIdleConnsPerHost: 64,
		ForceAttemptHTTP2:   true,
	}}
	base := "https://" + addr
	eventually(b, "the webhook process", 20*time.Second, func() bool {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return cmd, base, client
}

// cpuTime is a process's user+system CPU time from /proc/PID/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) close with ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %q", pid, b)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks, nil
}

// BenchmarkAdmission sends AdmissionReviews over loopback TLS at 200
// requests/s, open loop: each request leaves at its scheduled time whether
// or not earlier ones have returned, and its latency counts from that time,
// so a slow server cannot hide its queue. It reports p50, p99 and the
// server's CPU per admission, and the generator's own lateness (lag), which
// the latencies include. Run with a fixed count, e.g.
//
//	go test -run '^$' -bench Admission -benchtime 2000x ./webhook
func BenchmarkAdmission(b *testing.B) {
	const rate = 200
	cmd, base, client := benchProcess(b, "", "GOMAXPROCS=1")
	always := corev1.ContainerRestartPolicyAlways
	pod := podOf("bench", ctr("app", "1500m", "1Gi", env("LOG_LEVEL", "info"), env("GOGC", "200")), ctr("worker", "250m", "256Mi"))
	pod.Spec.InitContainers = []corev1.Container{ctr("proxy", "500m", "128Mi")}
	pod.Spec.InitContainers[0].RestartPolicy = &always
	body := review(b, pod, admissionv1.Create, "")
	url := base + "/mutate"
	send := func() error {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for range rate { // warm up connections and the server
		if err := send(); err != nil {
			b.Fatal(err)
		}
	}

	lat := make([]time.Duration, b.N)
	lag := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var failed sync.Once
	var firstErr error
	cpu0, err := cpuTime(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		at := start.Add(time.Duration(i) * time.Second / rate)
		// Go's timers wake up to ~1 ms late (the poller waits in whole
		// milliseconds): sleep most of the way, then spin, so the
		// generator's lateness does not pass for the server's latency.
		if d := time.Until(at) - 1500*time.Microsecond; d > 0 {
			time.Sleep(d)
		}
		for time.Now().Before(at) {
			runtime.Gosched()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lag[i] = time.Since(at)
			if err := send(); err != nil {
				failed.Do(func() { firstErr = err })
			}
			lat[i] = time.Since(at)
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu1, err := cpuTime(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	slices.Sort(lag)
	b.ReportMetric(float64(lag[len(lag)/2].Microseconds())/1000, "lag-p50-ms")
	b.ReportMetric(float64(lag[len(lag)*99/100].Microseconds())/1000, "lag-p99-ms")
	b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "server-cpu-µs/op")
}

// BenchmarkHandler is the work of one admission without the network:
// decode, plan, patch, encode.
func BenchmarkHandler(b *testing.B) {
	h := admission.NewHandler(admission.NewMutator(fit.Policy{}), admission.HandlerOptions{Observer: NewMetrics()})
	always := corev1.ContainerRestartPolicyAlways
	pod := podOf("bench", ctr("app", "1500m", "1Gi", env("LOG_LEVEL", "info"), env("GOGC", "200")), ctr("worker", "250m", "256Mi"))
	pod.Spec.InitContainers = []corev1.Container{ctr("proxy", "500m", "128Mi")}
	pod.Spec.InitContainers[0].RestartPolicy = &always
	body := review(b, pod, admissionv1.Create, "")
	b.ReportAllocs()
	for b.Loop() {
		if code, _ := post(b, h, body); code != 200 {
			b.Fatal(code)
		}
	}
}

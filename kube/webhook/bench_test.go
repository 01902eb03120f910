package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
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
// the test binary run the webhook server instead of the tests, writing its
// address to addr in that directory: the benchmark measures the server's
// CPU in a process of its own, apart from the load generator's.
const benchServerEnv = "GOFIT_WEBHOOK_BENCH_SERVER"

// benchAddrEnv, with benchServerEnv, is the address to serve on (default
// a free loopback port).
const benchAddrEnv = "GOFIT_WEBHOOK_BENCH_ADDR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(benchServerEnv); dir != "" {
		os.Exit(benchServer(dir))
	}
	os.Exit(m.Run())
}

func benchServer(dir string) int {
	addr := os.Getenv(benchAddrEnv)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	s, err := NewServer(Config{Addr: addr, CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, "addr.tmp"), []byte(s.Addr()), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = os.Rename(filepath.Join(dir, "addr.tmp"), filepath.Join(dir, "addr"))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
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
	dir := b.TempDir()
	ca, crt, key := newCert(b)
	writeAtomic(b, filepath.Join(dir, "tls.crt"), crt)
	writeAtomic(b, filepath.Join(dir, "tls.key"), key)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchServerEnv+"="+dir, "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	var addr []byte
	eventually(b, "the benchmark server", 10*time.Second, func() bool {
		addr, _ = os.ReadFile(filepath.Join(dir, "addr"))
		return len(addr) > 0
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "localhost"},
		MaxIdleConnsPerHost: 64,
		// The API server talks HTTP/2 to webhooks: one connection, many
		// streams, no handshake per burst.
		ForceAttemptHTTP2: true,
	}}
	always := corev1.ContainerRestartPolicyAlways
	pod := podOf("bench", ctr("app", "1500m", "1Gi", env("LOG_LEVEL", "info"), env("GOGC", "200")), ctr("worker", "250m", "256Mi"))
	pod.Spec.InitContainers = []corev1.Container{ctr("proxy", "500m", "128Mi")}
	pod.Spec.InitContainers[0].RestartPolicy = &always
	body := review(b, pod, admissionv1.Create, "")
	url := "https://" + string(addr) + "/mutate"
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

package webhook

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// memBinEnv names a gofit binary for BenchmarkReviewMemory to run as
// `gofit webhook` instead of this test binary's own server, so that one
// build can be measured against another under the same load.
const memBinEnv = "GOFIT_WEBHOOK_BIN"

// bigReview is an AdmissionReview of about size bytes: a pod whose
// container has many env entries (many small objects: the most memory per
// byte of JSON). With resize it is an UPDATE on pods/resize carrying the
// pod twice, as object and oldObject, each about size/2.
func bigReview(t testing.TB, size int, resize bool) []byte {
	per := size
	if resize {
		per = size / 2
	}
	c := ctr("app", "1", "1Gi")
	val := strings.Repeat("v", 40)
	for i := 0; i*len(`{"name":"VAR_000000","value":""},`)+i*len(val) < per-1024; i++ {
		c.Env = append(c.Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%06d", i), Value: val})
	}
	pod := podOf("big", c)
	if resize {
		return review(t, pod, admissionv1.Update, "resize")
	}
	return review(t, pod, admissionv1.Create, "")
}

// procStatus reads a field of /proc/PID/status given in kB (VmHWM, the
// peak resident set; RssAnon, the anonymous part now), in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}

// BenchmarkReviewMemory runs the webhook as its own process, with the
// shipped Deployment's GOMAXPROCS=1 and GOMEMLIMIT=115MiB, and sends it 16
// clients' worth of ~7 MB reviews at once (half CREATEs of one 7 MB pod,
// half pods/resize UPDATEs carrying a 3.5 MB pod twice), b.N rounds. It
// reports the server's peak RSS (VmHWM), which must stay under the 128Mi
// limit the Deployment ships with, and how many reviews were answered
// 200 and how many refused (503, busy). Run with
//
//	go test -run '^$' -bench ReviewMemory -benchtime 3x ./webhook
//
// and set GOFIT_WEBHOOK_BIN to a gofit binary to measure that build.
func BenchmarkReviewMemory(b *testing.B) {
	const clients = 16
	cmd, base, client := benchProcess(b, os.Getenv(memBinEnv), "GOMAXPROCS=1", "GOMEMLIMIT=115MiB")
	idle, err := procStatus(cmd.Process.Pid, "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	// The anonymous memory is what the kernel cannot reclaim under the
	// limit (file pages of the binary it can): sample its peak.
	var anonPeak atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v, err := procStatus(cmd.Process.Pid, "RssAnon"); err == nil && v > anonPeak.Load() {
				anonPeak.Store(v)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	bodies := [][]byte{bigReview(b, 7<<20-64<<10, false), bigReview(b, 7<<20-64<<10, true)}
	var mu sync.Mutex
	status := map[int]int{}
	var firstErr error
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(base+"/mutate?timeout=10s", "application/json", bytes.NewReader(bodies[i%2]))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status[resp.StatusCode]++
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	close(stopSampling)
	<-sampled
	peak, err := procStatus(cmd.Process.Pid, "VmHWM")
	if err != nil {
		b.Fatalf("%v (the server exited?)", err)
	}
	if firstErr != nil {
		b.Logf("a request failed: %v", firstErr)
	}
	b.ReportMetric(float64(idle)/(1<<20), "idle-rss-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(anonPeak.Load())/(1<<20), "peak-anon-MiB")
	b.ReportMetric(float64(status[200]), "answered")
	b.ReportMetric(float64(status[503]), "busy")
	b.Logf("bodies %d and %d bytes; statuses %v", len(bodies[0]), len(bodies[1]), status)
}

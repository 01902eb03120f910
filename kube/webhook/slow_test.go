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
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/admission/admissiontest"
)

// TestSlowClientsCannotStarve: ten clients that reconnect forever, each
// announcing a 7 MiB body and sending it slowly, took the whole in-work
// budget by their announced sizes, and the budget's FIFO queue kept every
// real review behind them until it gave up (503, the pod unfitted). Real
// reviews are served now, against the real server over TLS. The latency
// figures go to the log (and docs/results/webhook-latency.md), not into
// an assertion: GOFIT_SLOW_CLIENTS_FOR=30s measures longer.
func TestSlowClientsCannotStarve(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	caPEM, crt, key := newCert(t)
	writeAtomic(t, certFile, crt)
	writeAtomic(t, keyFile, key)
	s := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tlsCfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	var slowMu sync.Mutex
	slowCodes := map[string]int{} // what the slow clients were answered
	for i := range 10 {
		// Half trickle (16 KiB every 20 ms), half send faster (32 KiB
		// every 2 ms) but never finish: both kinds reconnect forever.
		chunk, pause := 16<<10, 20*time.Millisecond
		if i%2 == 1 {
			chunk, pause = 32<<10, 2*time.Millisecond
		}
		wg.Go(func() {
			junk := bytes.Repeat([]byte(" "), chunk)
			for ctx.Err() == nil {
				c, err := tls.Dial("tcp", s.Addr(), tlsCfg)
				if err != nil {
					continue
				}
				// The longest wait a client may ask for: the body's read
				// deadline is then its longest (1 s).
				fmt.Fprintf(c, "POST /mutate?timeout=30s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", admission.DefaultMaxBody)
				go func() { // the answer, if any, ends the connection
					b := make([]byte, 64)
					n, _ := io.ReadAtLeast(c, b, 12)
					if n >= 12 {
						slowMu.Lock()
						slowCodes[string(b[9:12])]++
						slowMu.Unlock()
					}
					c.Close()
				}()
				for ctx.Err() == nil {
					if _, err := c.Write(junk); err != nil {
						break
					}
					time.Sleep(pause)
				}
				c.Close()
			}
		})
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	defer client.CloseIdleConnections()
	body := admissiontest.Review(t, admissiontest.Pod("p", admissiontest.Container("app", "1", "1Gi")), admissionv1.Create, "")
	run := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("GOFIT_SLOW_CLIENTS_FOR")); err == nil {
		run = d
	}
	time.Sleep(300 * time.Millisecond) // the slow clients are in
	var lat []time.Duration
	failed := 0
	for end := time.Now().Add(run); time.Now().Before(end); {
		start := time.Now()
		// As the API server calls it: timeoutSeconds 2, as shipped.
		resp, err := client.Post("https://"+s.Addr()+"/mutate?timeout=2s", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("a real review: %v", err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"patch"`)) {
			failed++
			if failed <= 3 {
				t.Errorf("a real review among ten slow clients: %d %s after %v", resp.StatusCode, bytes.TrimSpace(out), lat[len(lat)-1].Round(time.Millisecond))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(100 * time.Microsecond)
	}
	slowMu.Lock()
	t.Logf("%d real reviews among 10 slow clients over %v: %d failed; p50 %v p90 %v p99 %v max %v; slow clients answered %v",
		len(lat), run, failed, q(0.5), q(0.9), q(0.99), lat[len(lat)-1].Round(100*time.Microsecond), slowCodes)
	slowMu.Unlock()
	if failed > 0 {
		t.Errorf("%d of %d real reviews not served", failed, len(lat))
	}
}

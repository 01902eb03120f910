package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

func tlsClient(caPEM []byte) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServerEndpoints(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca, crt, key := newCert(t)
	writeAtomic(t, certFile, crt)
	writeAtomic(t, keyFile, key)
	s := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile})
	c := tlsClient(ca)
	base := "https://" + s.Addr()

	if code, body := get(t, c, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz %d %q", code, body)
	}
	if code, _ := get(t, c, base+"/readyz"); code != 200 {
		t.Errorf("/readyz %d", code)
	}
	resp, err := c.Post(base+"/mutate", "application/json", bytes.NewReader(review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/mutate: %v %v", resp, err)
	}
	resp.Body.Close()
	code, body := get(t, c, base+"/metrics")
	for _, want := range []string{
		`gofit_webhook_admissions_total{code="200",operation="CREATE",outcome="patched"} 1`,
		`gofit_webhook_admission_duration_seconds_count{operation="CREATE"} 1`,
		"gofit_webhook_certificate_expiry_timestamp_seconds ",
		"go_goroutines ",
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestServerTLS13: the webhook served TLS 1.2 clients; TLS 1.3 is the
// minimum unless asked otherwise.
func TestServerTLS13(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca, crt, key := newCert(t)
	writeAtomic(t, certFile, crt)
	writeAtomic(t, keyFile, key)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	dial := func(addr string, maxV uint16) error {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MaxVersion: maxV})
		if err == nil {
			c.Close()
		}
		return err
	}
	s := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile})
	if err := dial(s.Addr(), tls.VersionTLS12); err == nil {
		t.Error("a TLS 1.2 client was served")
	}
	if err := dial(s.Addr(), tls.VersionTLS13); err != nil {
		t.Errorf("TLS 1.3: %v", err)
	}
	old := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, MinTLSVersion: tls.VersionTLS12})
	if err := dial(old.Addr(), tls.VersionTLS12); err != nil {
		t.Errorf("MinTLSVersion 1.2: %v", err)
	}
}

func TestServerWaitsForCert(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	s := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, WaitForCert: true})
	ca, crt, key := newCert(t)
	if _, err := tlsClient(ca).Get("https://" + s.Addr() + "/readyz"); err == nil || s.Ready() {
		t.Fatal("served without a certificate")
	}
	writeAtomic(t, keyFile, key)
	writeAtomic(t, certFile, crt)
	eventually(t, "ready", 10*time.Second, s.Ready)
	if code, _ := get(t, tlsClient(ca), "https://"+s.Addr()+"/readyz"); code != 200 {
		t.Errorf("/readyz %d", code)
	}
}

func TestServerBadConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Addr: "127.0.0.1:0"}, "--cert-file"},
		{Config{Addr: "127.0.0.1:0", CertFile: filepath.Join(dir, "none"), KeyFile: bad}, "none: no such file"},
		{Config{Addr: "127.0.0.1:0", CertFile: bad, KeyFile: bad}, "serving certificate " + bad},
		{Config{Addr: "nowhere:-1", CertFile: bad, KeyFile: bad, WaitForCert: true}, "listen on nowhere:-1"},
	} {
		if _, err := NewServer(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

// After the context ends the server stays up, not ready, for the delay.
func TestServerDrains(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca, crt, key := newCert(t)
	writeAtomic(t, certFile, crt)
	writeAtomic(t, keyFile, key)
	s, err := NewServer(Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, ShutdownDelay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	c := tlsClient(ca)
	base := "https://" + s.Addr()
	eventually(t, "ready", 5*time.Second, s.Ready)
	cancel()
	eventually(t, "not ready", 5*time.Second, func() bool { return !s.Ready() })
	if code, _ := get(t, c, base+"/readyz"); code != 503 {
		t.Errorf("/readyz while draining: %d", code)
	}
	resp, err := c.Post(base+"/mutate", "application/json", bytes.NewReader(review(t, podOf("p", ctr("app", "1", "1Gi")), admissionv1.Create, "")))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/mutate while draining: %v %v", resp, err)
	}
	resp.Body.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(base + "/healthz"); err == nil {
		t.Error("still serving after the drain")
	}
}

package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
)

func TestWebhookFlags(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "c"), filepath.Join(dir, "k")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"webhook"}, 2, "--cert-file and --key-file are required"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--memory-ratio", "1.5"}, 2, "--memory-ratio 1.5"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--self-managed-secret", "nons"}, 2, "want NAMESPACE/NAME"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--self-managed-secret", "a/b"}, 2, "needs --webhook-config and --service-dns"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--webhook-config", "x"}, 2, "go with --self-managed-secret"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key}, 1, "stat " + crt},
	} {
		code, _, stderr := run(c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// gofit webhook as a process: serves from the files alone, fits a pod,
// stops cleanly on SIGTERM.
func TestWebhookServes(t *testing.T) {
	dir := t.TempDir()
	cr := &rotator.CertRotator{CAName: "ca", CAOrganization: "gofit", DNSName: "localhost",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	ca, err := cr.CreateCACert(time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, keyPEM, err := cr.CreateCertPEM(ca, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if os.WriteFile(crt, crtPEM, 0o600) != nil || os.WriteFile(key, keyPEM, 0o600) != nil {
		t.Fatal("write certificate")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	cmd := gofitCmd("webhook", "--addr", addr, "--cert-file", crt, "--key-file", key, "--shutdown-delay", "0", "--ceil")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(cmd.Env, "KUBECONFIG=/nonexistent") // serving must not need one
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	base := "https://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(base + "/readyz")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v\n%s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",
	  "kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"CREATE",
	  "object":{"metadata":{"name":"p"},"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"1.5","memory":"1Gi"}}}]}}}}`
	resp, err := c.Post(base+"/mutate", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Response struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Patch   []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	// --ceil: 1.5 cores → GOMAXPROCS=2.
	if out.Response.UID != "u1" || !out.Response.Allowed || !strings.Contains(string(out.Response.Patch), `{"name":"GOMAXPROCS","value":"2"}`) {
		t.Errorf("response %s (patch %s)", body, out.Response.Patch)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after SIGTERM")
	}
}

package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gofit-dev/gofit/kube/admission/admissiontest"
)

// TestClientAuthentication: anyone who reached the port could send
// reviews (and, with experiments, have Leases written). With a client CA
// or a token, /mutate serves only a caller with a certificate from that
// CA or with the token, as kube-apiserver's AdmissionConfiguration
// (kubeConfigFile) sends them; the probes stay open.
func TestClientAuthentication(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	caPEM, crt, key := newCert(t)
	writeAtomic(t, certFile, crt)
	writeAtomic(t, keyFile, key)
	// The API server's client certificate, from a CA of its own; and one
	// from another CA.
	clientCert := func(name string) (ca []byte, cert tls.Certificate) {
		cr := &rotator.CertRotator{CAName: name, CAOrganization: "gofit", DNSName: "kube-apiserver",
			ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		now := time.Now()
		a, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		c, k, err := cr.CreateCertPEM(a, now.Add(-time.Hour), now.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		cert, err = tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return a.CertPEM, cert
	}
	apiCA, apiCert := clientCert("apiserver-client-ca")
	_, otherCert := clientCert("someone-else")
	caFile, tokenFile := filepath.Join(dir, "client-ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, apiCA, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, ClientTokenFile: tokenFile})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	body := admissiontest.Review(t, admissiontest.Pod("p", admissiontest.Container("app", "1", "1Gi")), admissionv1.Create, "")
	post := func(cert *tls.Certificate, token string) int {
		t.Helper()
		tc := &tls.Config{RootCAs: pool, ServerName: "localhost"}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		defer c.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodPost, "https://"+s.Addr()+"/mutate", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name  string
		cert  *tls.Certificate
		token string
		want  int
	}{
		{"no credentials", nil, "", http.StatusUnauthorized},
		{"a certificate from another CA", &otherCert, "", 0}, // refused at the handshake
		{"a wrong token", nil, "guess", http.StatusUnauthorized},
		{"the API server's certificate", &apiCert, "", http.StatusOK},
		{"the token", nil, "s3cret-token", http.StatusOK},
	} {
		if tc.want == 0 {
			tcfg := &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{*tc.cert}}
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tcfg}}
			if resp, err := c.Post("https://"+s.Addr()+"/mutate", "application/json", bytes.NewReader(body)); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Errorf("%s: served", tc.name)
				}
			}
			c.CloseIdleConnections()
			continue
		}
		if got := post(tc.cert, tc.token); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if code, _ := get(t, tlsClient(caPEM), "https://"+s.Addr()+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz without credentials: %d", code)
	}
	for _, bad := range []Config{{ClientCAFile: filepath.Join(dir, "missing")}, {ClientTokenFile: certFile + "x"}, {ClientCAFile: tokenFile}} {
		bad.Addr, bad.CertFile, bad.KeyFile = "127.0.0.1:0", certFile, keyFile
		if _, err := NewServer(bad); err == nil {
			t.Errorf("config %+v: no error", bad)
		}
	}
}

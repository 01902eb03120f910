//go:build !nokube

package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
)

// TestWebhookProbe: gofit webhook probe (the chart's helm test) passes
// against the real admission handler over TLS, and fails against a
// webhook that allows without fitting, one whose certificate the CA does
// not sign, and one that is not there.
func TestWebhookProbe(t *testing.T) {
	real := httptest.NewTLSServer(admission.NewHandler(admission.NewMutator(fit.Policy{}), admission.HandlerOptions{Namespace: "gofit-system"}))
	defer real.Close()
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: real.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := func(url, ca string) (string, error) {
		var out, errOut bytes.Buffer
		err := runWebhook([]string{"probe", "--url", url, "--ca-file", ca, "--timeout", "5s"}, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	out, err := probe(real.URL+"/mutate", caFile)
	if err != nil || !strings.Contains(out, "answered a dry-run admission") {
		t.Fatalf("probe of the real handler: %v\n%s", err, out)
	}

	// Allowed, but not fitted.
	lazy := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		b.ReadFrom(r.Body)
		uid := strings.SplitN(strings.SplitN(b.String(), `"uid":"`, 2)[1], `"`, 2)[0]
		w.Write([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"` + uid + `","allowed":true}}`))
	}))
	defer lazy.Close()
	lazyCA := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(lazyCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: lazy.Certificate().Raw}), 0o644)
	if _, err := probe(lazy.URL+"/mutate", lazyCA); err == nil || !strings.Contains(err.Error(), "did not fit") {
		t.Errorf("probe of a webhook that does not fit: %v", err)
	}
	// The real handler, but a CA that did not sign its certificate.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(otherCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	if _, err := probe(real.URL+"/mutate", otherCA); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("probe with the wrong CA: %v", err)
	}
	real.Close()
	if _, err := probe(real.URL+"/mutate", caFile); err == nil {
		t.Error("probe of a closed webhook succeeded")
	}
	for _, args := range [][]string{{"--url", "http://x/mutate", "--ca-file", caFile}, {"--url", "https://x/mutate"}} {
		if err := runWebhook(append([]string{"probe"}, args...), &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
			t.Errorf("probe %v: no error", args)
		}
	}
}

package promclient

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

func TestClientSendsAuth(t *testing.T) {
	var got http.Header
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Config{URL: srv.URL, CAFile: ca, BearerTokenFile: tok, Headers: map[string]string{"X-Scope-OrgID": "team-a"}}.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := v1.NewAPI(c).Query(context.Background(), "up", srv.Certificate().NotBefore); err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "Bearer s3cret" || got.Get("X-Scope-OrgID") != "team-a" {
		t.Errorf("headers %v", got)
	}
	// The token is read again for each request: a rotated one is used.
	if err := os.WriteFile(tok, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v1.NewAPI(c).Query(context.Background(), "up", srv.Certificate().NotBefore); err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "Bearer rotated" {
		t.Errorf("after rotation: %v", got.Get("Authorization"))
	}
	// Without the CA the server's certificate is refused.
	c, err = Config{URL: srv.URL}.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := v1.NewAPI(c).Query(context.Background(), "up", srv.Certificate().NotBefore); err == nil {
		t.Error("an unknown CA was accepted")
	}
}

func TestClientErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	notPEM := filepath.Join(dir, "ca")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{URL: "localhost:9090"}, `prometheus URL "localhost:9090"`},
		{Config{URL: "http://p", BearerTokenFile: filepath.Join(dir, "none")}, "prometheus bearer token file: open"},
		{Config{URL: "http://p", BearerTokenFile: empty}, "want one non-empty line"},
		{Config{URL: "https://p", CAFile: notPEM}, "no PEM certificate"},
		{Config{URL: "http://p", Headers: map[string]string{"X Bad": "1"}}, `prometheus header "X Bad"`},
	} {
		_, err := tc.c.Client()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.want)
		}
	}
}

// TestTokenOnlyToItsOrigin (issue 53): the token and the headers go to
// the configured scheme, host and port only. A redirect to another host
// (or from https to http on the same host) gets neither; one on the
// same origin keeps them.
func TestTokenOnlyToItsOrigin(t *testing.T) {
	seen := map[string]http.Header{}
	ok := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			seen[name] = r.Header.Clone()
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
		}
	}
	other := httptest.NewServer(ok("other"))
	defer other.Close()
	var target string
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/query", func(w http.ResponseWriter, r *http.Request) {
		seen["first"] = r.Header.Clone()
		http.Redirect(w, r, target+"/final", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/final", ok("same"))
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Config{URL: srv.URL, CAFile: ca, BearerTokenFile: tok, Headers: map[string]string{"X-Scope-OrgID": "team-a"}}.Client()
	if err != nil {
		t.Fatal(err)
	}
	query := func() {
		t.Helper()
		if _, _, err := v1.NewAPI(c).Query(context.Background(), "up", srv.Certificate().NotBefore); err != nil {
			t.Fatal(err)
		}
	}
	// To another host (httptest's 127.0.0.1, another port; and by name).
	for _, to := range []string{other.URL, strings.Replace(other.URL, "127.0.0.1", "localhost", 1)} {
		target, seen = to, map[string]http.Header{}
		query()
		if seen["first"].Get("Authorization") != "Bearer s3cret" {
			t.Errorf("the configured host got %q", seen["first"].Get("Authorization"))
		}
		if h := seen["other"]; h == nil || h.Get("Authorization") != "" || h.Get("X-Scope-OrgID") != "" {
			t.Errorf("a redirect to %s got Authorization %q, X-Scope-OrgID %q", to, h.Get("Authorization"), h.Get("X-Scope-OrgID"))
		}
	}
	// On the same origin, it keeps them.
	target, seen = srv.URL, map[string]http.Header{}
	query()
	if seen["same"].Get("Authorization") != "Bearer s3cret" {
		t.Errorf("a redirect on the same origin got %q", seen["same"].Get("Authorization"))
	}
}

// TestTokenNotOverHTTP (issue 53): a token (or an Authorization header)
// for an http:// URL is refused with an error naming
// --prometheus-insecure-http, which sends it; http:// without a
// credential works as before (the e2e guard's Prometheus).
func TestTokenNotOverHTTP(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{URL: srv.URL, BearerTokenFile: tok},
		{URL: srv.URL, Headers: map[string]string{"authorization": "Basic eDp5"}},
	} {
		if _, err := c.Client(); !errors.Is(err, ErrCredentialOverHTTP) || !strings.Contains(err.Error(), "--prometheus-insecure-http") {
			t.Errorf("%+v: %v, want ErrCredentialOverHTTP naming --prometheus-insecure-http", c, err)
		}
	}
	query := func(c Config) {
		t.Helper()
		cl, err := c.Client()
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		if _, _, err := v1.NewAPI(cl).Query(context.Background(), "up", time.Unix(0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	query(Config{URL: srv.URL})
	if got.Get("Authorization") != "" {
		t.Errorf("no token configured, sent %q", got.Get("Authorization"))
	}
	query(Config{URL: srv.URL, BearerTokenFile: tok, InsecureHTTP: true})
	if got.Get("Authorization") != "Bearer s3cret" {
		t.Errorf("with InsecureHTTP: sent %q", got.Get("Authorization"))
	}
}

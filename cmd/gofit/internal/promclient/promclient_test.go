package promclient

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

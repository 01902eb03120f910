// Package promclient builds the Prometheus API client the commands that
// read Prometheus share (`gofit fleet`, `gofit experiment report`): one
// place for the address, a bearer token file, a TLS CA and extra headers
// (X-Scope-OrgID for Mimir, Cortex and Thanos tenants), so Prometheus,
// Thanos and Mimir answer every command alike; the one range reader
// (ReadRange), which reads a range query in chunks and hands each
// chunk's answer on as it comes, so a long range is never one giant
// query nor held whole; and the one rule by which each of them finds a
// pod's workload from kube-state-metrics' owners (Workload).
package promclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
)

// Config says how to reach Prometheus.
type Config struct {
	// URL is the API's base address (http or https).
	URL string
	// BearerTokenFile holds a token sent as "Authorization: Bearer …". It
	// is read for each request, so a rotated token (a projected service
	// account token) is picked up.
	BearerTokenFile string
	// CAFile is a PEM bundle that verifies the server's certificate, in
	// place of the system's roots.
	CAFile string
	// Headers are sent with every request (X-Scope-OrgID: tenant).
	Headers map[string]string
	// Timeout bounds each request (default 2 minutes).
	Timeout time.Duration
	// InsecureHTTP lets a credential (the bearer token, an Authorization
	// header) go to an http:// URL, in the clear; the commands set it
	// from --prometheus-insecure-http.
	InsecureHTTP bool
}

// ErrCredentialOverHTTP is a credential set for an http:// URL without
// InsecureHTTP.
var ErrCredentialOverHTTP = errors.New("a credential over http:// is sent in the clear: use https://, or --prometheus-insecure-http to send it anyway")

// maxToken bounds the token file read.
const maxToken = 64 << 10

// Client checks c and returns the client. Errors name the setting.
func (c Config) Client() (api.Client, error) {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prometheus URL %q: want http:// or https:// and a host", c.URL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("prometheus CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("prometheus CA file %s: no PEM certificate in it", c.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if c.BearerTokenFile != "" {
		if _, err := readToken(c.BearerTokenFile); err != nil {
			return nil, err
		}
	}
	for k := range c.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") {
			return nil, fmt.Errorf("prometheus header %q: not a header name", k)
		}
		if strings.EqualFold(k, "Authorization") && c.BearerTokenFile != "" {
			return nil, fmt.Errorf("prometheus header %s: set both as a header and by the bearer token file", k)
		}
	}
	credential := c.BearerTokenFile != ""
	for k := range c.Headers {
		credential = credential || strings.EqualFold(k, "Authorization")
	}
	if credential && u.Scheme == "http" && !c.InsecureHTTP {
		return nil, fmt.Errorf("prometheus URL %q: %w", c.URL, ErrCredentialOverHTTP)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	rt := &roundTripper{next: tr, origin: origin(u), token: c.BearerTokenFile, headers: c.Headers}
	return api.NewClient(api.Config{Address: c.URL, Client: &http.Client{Timeout: timeout, Transport: rt}})
}

func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("prometheus bearer token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", fmt.Errorf("prometheus bearer token file %s: %w", path, err)
	}
	if len(b) > maxToken {
		return "", fmt.Errorf("prometheus bearer token file %s: more than %d bytes", path, maxToken)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("prometheus bearer token file %s: want one non-empty line", path)
	}
	return tok, nil
}

// origin is u's scheme, host and port (the scheme's default when
// absent): where the token and headers may go.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

type roundTripper struct {
	next    http.RoundTripper
	origin  string
	token   string
	headers map[string]string
}

// RoundTrip adds the token and headers to requests for the configured
// origin only: a redirect to another host, port or scheme (https to
// http) goes without them.
func (r *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if origin(req.URL) != r.origin {
		return r.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	for k, v := range r.headers {
		req.Header.Set(k, v)
	}
	if r.token != "" {
		tok, err := readToken(r.token)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return r.next.RoundTrip(req)
}

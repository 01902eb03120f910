package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/promclient"
)

// promFlags are the Prometheus connection flags every command that
// reads Prometheus shares (fleet, experiment report and guard, rightsize).
type promFlags struct {
	url, token, ca string
	insecureHTTP   bool
	header         headerFlag
}

func addPromFlags(fs *flag.FlagSet) *promFlags {
	p := &promFlags{header: headerFlag{}}
	fs.StringVar(&p.url, "prometheus", "", "Prometheus, Thanos or Mimir query `URL` (required)")
	fs.StringVar(&p.token, "bearer-token-file", "", "send the token in `FILE` as Authorization: Bearer (re-read each request)")
	fs.StringVar(&p.ca, "ca-file", "", "verify Prometheus's certificate with the PEM bundle in `FILE`")
	fs.BoolVar(&p.insecureHTTP, "prometheus-insecure-http", false, "send the bearer token (or an Authorization header) to an http:// --prometheus, in the clear")
	fs.Var(p.header, "header", "send `NAME=VALUE` with every request (repeatable; X-Scope-OrgID=tenant)")
	return p
}

// client is the HTTP client experiment.Fetch takes: a minute a request.
func (p *promFlags) client() (api.Client, error) { return p.raw(time.Minute) }

// raw is the HTTP client fleet.Fetch takes; timeout bounds each request
// (0: promclient's default).
func (p *promFlags) raw(timeout time.Duration) (api.Client, error) {
	c, err := promclient.Config{URL: p.url, BearerTokenFile: p.token, CAFile: p.ca, Headers: p.header, Timeout: timeout, InsecureHTTP: p.insecureHTTP}.Client()
	if errors.Is(err, promclient.ErrCredentialOverHTTP) {
		return nil, fmt.Errorf("%w: --prometheus with --bearer-token-file or an Authorization --header: %v", errUsage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: --prometheus, --bearer-token-file, --ca-file or --header: %v", errUsage, err)
	}
	return c, nil
}

// headerFlag is a repeatable NAME=VALUE.
type headerFlag map[string]string

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		k, v, ok = strings.Cut(s, ":")
	}
	if k = strings.TrimSpace(k); !ok || k == "" {
		return errors.New("want NAME=VALUE, such as X-Scope-OrgID=team-a")
	}
	h[k] = strings.TrimSpace(v)
	return nil
}

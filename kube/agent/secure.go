package agent

import (
	"crypto/tls"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// Guarded wraps h so that every path but those in open (the kubelet's
// probes) needs a caller the API server vouches for: a bearer token it
// accepts (TokenReview) and the right to get the path
// (SubjectAccessReview on the non-resource URL, e.g. /metrics or
// /v1/pods/*), as kube-rbac-proxy does, by controller-runtime's metrics
// filter. The agent's account needs create on tokenreviews and
// subjectaccessreviews; a caller, get on the nonResourceURLs.
func Guarded(cfg *rest.Config, h http.Handler, log logr.Logger, open ...string) (http.Handler, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	filter, err := filters.WithAuthenticationAndAuthorization(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	guarded, err := filter(log, h)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication: %w", err)
	}
	free := map[string]bool{}
	for _, p := range open {
		free[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if free[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		if tok := r.Header.Get(TokenHeader); tok != "" {
			// Through the API server's pod proxy: the caller's own token,
			// reviewed exactly as an Authorization header is.
			r.Header.Del(TokenHeader)
			if r.Header.Get("Authorization") == "" {
				r.Header.Set("Authorization", "Bearer "+tok)
			}
		}
		guarded.ServeHTTP(w, r)
	}), nil
}

// TokenHeader carries a caller's bearer token to a Guarded handler
// through the API server's pod proxy (pods/proxy), which keeps the
// Authorization header for its own authentication and never passes it
// on: `gofit lab --kube` reads the agent that way. The token is reviewed
// as one in an Authorization header would be.
const TokenHeader = "X-Gofit-Token"

// SelfSignedTLS is a TLS config with a certificate made for host at start
// (as controller-runtime's secure metrics server does without a
// certificate directory): the traffic is encrypted, and callers that
// pin nothing (Prometheus with insecureSkipVerify, the kubelet's probes)
// still connect. A bearer token is then never sent in the clear.
func SelfSignedTLS(host string) (*tls.Config, error) {
	crt, key, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics TLS: %w", err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("metrics TLS: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

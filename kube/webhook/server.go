package webhook

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
)

// Config configures a Server.
type Config struct {
	Addr     string // host:port; port 0 picks a free one
	CertFile string // PEM certificate chain, re-read when it changes
	KeyFile  string // PEM private key

	// WaitForCert starts without the files and stays not ready until they
	// appear, for when something else writes them after the start (the
	// self-managed rotator through a kubelet Secret volume). Without it a
	// missing or unreadable file is an error at start.
	WaitForCert bool
	// CertPoll is how often the files are re-read besides inotify events
	// (kubelet swaps a Secret volume's symlinks, which inotify can miss).
	CertPoll time.Duration

	// ShutdownDelay keeps serving, not ready, this long after the context
	// ends, while the Service's endpoints drop the pod: the API server
	// would otherwise still send it requests that fail (and the pods they
	// were for would start unfitted).
	ShutdownDelay time.Duration

	// Mutator fits the pods; nil means admission.NewMutator with fit's
	// default policy.
	Mutator *admission.Mutator
	// MaxBody and MaxInFlight bound a request body and the reviews
	// decoded at once (admission.HandlerOptions); 0 means the defaults.
	MaxBody     int64
	MaxInFlight int
	// MinTLSVersion is the oldest TLS version served (tls.VersionTLS12 or
	// tls.VersionTLS13); 0 means TLS 1.3, which every supported
	// kube-apiserver and Prometheus speak.
	MinTLSVersion uint16
	// Namespace is the webhook's own namespace, never fitted (as
	// kube-system is not); admission.HandlerOptions.Namespace.
	Namespace string

	// ClientCAFile and ClientTokenFile authenticate the API server's
	// calls to /mutate, as kube-apiserver's AdmissionConfiguration
	// (kubeConfigFile) lets it present a client certificate or a bearer
	// token: with either set, a review must come with a certificate that
	// chains to the CA (PEM) or with the token (the file's content, space
	// trimmed), else 401. Probes and /metrics stay open. Both are read
	// at the start.
	ClientCAFile    string
	ClientTokenFile string
	Log             *slog.Logger

	// SelfManaged, for Run, also keeps the certificate (its CertFile and
	// KeyFile are Config's), reaching the API server through Kubeconfig
	// ("" means $KUBECONFIG, ~/.kube/config or in-cluster).
	SelfManaged *SelfManaged
	Kubeconfig  string

	// Collectors are served on /metrics beside the webhook's own (the
	// process's gofit_build_info, say).
	Collectors []prometheus.Collector
}

// Server serves /mutate, /healthz, /readyz and /metrics over HTTPS on one
// port.
type Server struct {
	cfg     Config
	log     *slog.Logger
	ln      net.Listener
	srv     *http.Server
	Metrics *Metrics

	watcher  atomic.Pointer[certwatcher.CertWatcher]
	stopping atomic.Bool
}

// NewServer checks cfg and binds the port.
func NewServer(cfg Config) (*Server, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("a certificate and key file are required (--cert-file, --key-file)")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.CertPoll <= 0 {
		cfg.CertPoll = 10 * time.Second
	}
	s := &Server{cfg: cfg, log: cfg.Log, Metrics: NewMetrics()}
	for _, c := range cfg.Collectors {
		if err := s.Metrics.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("register a metrics collector: %w", err)
		}
	}
	if !cfg.WaitForCert {
		if err := s.loadCert(); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	s.ln = ln

	auth, clientCAs, err := clientAuth(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	if cfg.Mutator == nil {
		cfg.Mutator = admission.NewMutator(fit.Policy{})
	}
	var mutate http.Handler = admission.NewHandler(cfg.Mutator, admission.HandlerOptions{
		Log: cfg.Log, Observer: s.Metrics, MaxBody: cfg.MaxBody, MaxInFlight: cfg.MaxInFlight, Namespace: cfg.Namespace,
	})
	if auth != nil {
		mutate = s.authenticated(auth, mutate)
	}
	mux.Handle("/mutate", mutate)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case s.stopping.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case s.watcher.Load() == nil:
			http.Error(w, "no certificate loaded yet", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ok\n"))
		}
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{Registry: s.Metrics.Registry}))
	minTLS := cfg.MinTLSVersion
	if minTLS == 0 {
		minTLS = tls.VersionTLS13
	}
	s.srv = &http.Server{
		Handler: mux,
		TLSConfig: &tls.Config{
			MinVersion:     minTLS,
			GetCertificate: s.getCertificate,
		},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug),
	}
	if clientCAs != nil {
		// Asked for, never required at the handshake: the kubelet's
		// probes and Prometheus present none. /mutate checks it.
		s.srv.TLSConfig.ClientCAs = clientCAs
		s.srv.TLSConfig.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Ready reports whether a certificate is loaded.
func (s *Server) Ready() bool { return s.watcher.Load() != nil && !s.stopping.Load() }

func (s *Server) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	w := s.watcher.Load()
	if w == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return w.GetCertificate(hello)
}

// loadCert reads the files once and installs a watcher over them.
func (s *Server) loadCert() error {
	for _, f := range []string{s.cfg.CertFile, s.cfg.KeyFile} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("serving certificate: %w", err)
		}
	}
	w, err := certwatcher.New(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("serving certificate %s, key %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	w = w.WithWatchInterval(s.cfg.CertPoll)
	// Called at once with the certificate just read, then on each change.
	w.RegisterCallback(func(c tls.Certificate) {
		s.Metrics.certLoaded(c)
		s.log.Info("serving certificate loaded", "cert", s.cfg.CertFile, "not_after", notAfter(c))
	})
	s.watcher.Store(w)
	return nil
}

func notAfter(c tls.Certificate) time.Time {
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	return time.Time{}
}

// Run serves until ctx ends, then drains for up to 10 s.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 2)

	wg.Add(1)
	go func() { // the certificate: wait for it if asked, then follow it
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for s.watcher.Load() == nil {
			err := s.loadCert()
			if err == nil {
				break
			}
			s.log.Debug("waiting for the serving certificate", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		if err := s.watcher.Load().Start(ctx); err != nil && ctx.Err() == nil {
			errc <- fmt.Errorf("watch serving certificate: %w", err)
		}
	}()

	wg.Add(1)
	go func() {
		defer wg.Done()
		s.log.Info("serving", "addr", s.Addr())
		if err := s.srv.ServeTLS(s.ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("serve on %s: %w", s.Addr(), err)
		}
	}()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.stopping.Store(true)
	if err == nil && s.cfg.ShutdownDelay > 0 {
		s.log.Info("draining before shutdown", "delay", s.cfg.ShutdownDelay)
		select {
		case <-time.After(s.cfg.ShutdownDelay):
		case err = <-errc:
		}
	}
	shut, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	if serr := s.srv.Shutdown(shut); serr != nil && err == nil {
		err = fmt.Errorf("shut down: %w", serr)
	}
	cancel()
	return err
}

// clientAuthN is how /mutate's callers prove they are the API server.
type clientAuthN struct {
	certs bool   // a verified client certificate will do
	token []byte // this bearer token will do, when not nil
}

// clientAuth reads cfg's client CA and token files; nil without either.
func clientAuth(cfg Config) (*clientAuthN, *x509.CertPool, error) {
	if cfg.ClientCAFile == "" && cfg.ClientTokenFile == "" {
		return nil, nil, nil
	}
	a := &clientAuthN{}
	var pool *x509.CertPool
	if cfg.ClientCAFile != "" {
		b, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("client CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, fmt.Errorf("client CA %s: no PEM certificate in it", cfg.ClientCAFile)
		}
		a.certs = true
	}
	if cfg.ClientTokenFile != "" {
		b, err := os.ReadFile(cfg.ClientTokenFile)
		if err != nil {
			return nil, nil, fmt.Errorf("client token: %w", err)
		}
		if a.token = bytes.TrimSpace(b); len(a.token) == 0 {
			return nil, nil, fmt.Errorf("client token %s: empty", cfg.ClientTokenFile)
		}
	}
	return a, pool, nil
}

// authenticated serves next only to a caller a accepts, 401 otherwise
// (counted as an error of an unknown operation).
func (s *Server) authenticated(a *clientAuthN, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.certs && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		if a.token != nil {
			if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && subtle.ConstantTimeCompare([]byte(tok), a.token) == 1 {
				next.ServeHTTP(w, r)
				return
			}
		}
		start := time.Now()
		s.log.Warn("admission request refused: the caller did not authenticate as the API server", "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="gofit-webhook"`)
		http.Error(w, "authenticate as the API server: a client certificate from the configured CA or the bearer token", http.StatusUnauthorized)
		s.Metrics.ObserveAdmission(admission.OperationUnknown, admission.OutcomeError, http.StatusUnauthorized, time.Since(start))
	})
}

//go:build !nokube

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	goversion "go/version"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/buildinfo"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/webhook"
)

func runWebhook(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "probe" {
		return runWebhookProbe(args[1:], stdout, stderr)
	}
	fs := newFlags("webhook", stderr)
	addr := fs.String("addr", ":8443", "serve HTTPS on `HOST:PORT` (/mutate, /healthz, /readyz, /metrics)")
	certFile := fs.String("cert-file", "", "serving certificate `FILE` (PEM), re-read when it changes")
	keyFile := fs.String("key-file", "", "private key `FILE` (PEM), re-read when it changes")
	policyFlags := fit.BindFlags(fs, "memory-ratio", "ceil", "cpu-request-factor", "cpu-request-min")
	fs.Lookup("cpu-request-factor").Usage += "; pods can choose with the gofit.dev/cpu-request-factor annotation"
	goVersion := fs.String("go-version", admission.DefaultGoVersion, "the Go `RELEASE` assumed for images (it decides the warnings about what Go's runtime does alone); empty: unknown")
	maxBody := fs.Int64("max-body", admission.DefaultMaxBody, "largest request body in `BYTES`")
	maxInFlight := fs.Int("max-in-flight", admission.DefaultMaxInFlight, "reviews decoded and fitted at once; more wait, then get 503 (memory is bounded by about 2 × max-body per review)")
	tlsMin := fs.String("tls-min-version", "1.3", "oldest TLS version served: 1.3, or 1.2 where an API server or scraper cannot speak 1.3")
	certPoll := fs.Duration("cert-poll", 10*time.Second, "re-read the certificate files this often, besides file events")
	shutdownDelay := fs.Duration("shutdown-delay", 5*time.Second, "on SIGTERM, keep serving (not ready) this long while the Service drops the pod")
	debug := fs.Bool("debug", false, "log every admission")
	logJSON := fs.Bool("log-json", false, "log JSON lines instead of text")
	secret := fs.String("self-managed-secret", "", "self-managed certificates: keep a CA and serving certificate in Secret `NAMESPACE/NAME` (needs API access)")
	whName := fs.String("webhook-config", "", "self-managed certificates: the MutatingWebhookConfiguration `NAME` to write the CA into")
	dns := fs.String("service-dns", "", "self-managed certificates: the Service's DNS `NAME` the certificate is for (e.g. gofit-webhook.gofit-system.svc)")
	kubeconfig := fs.String("kubeconfig", "", "self-managed certificates and experiments: kubeconfig `FILE` (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
	experiments := fs.Bool("experiments", false, "give pods that carry the gofit.dev/experiment annotation their experiment arm (needs API access: watches pods' metadata, keeps a Lease per experiment; see docs/experiment.md)")
	expNamespaces := fs.String("experiment-namespaces", "", "experiments: the comma-separated `NAMESPACES` they may run in (where the webhook's account has its Role); empty: any")
	guardStale := fs.Duration("experiment-guard-stale", 15*time.Minute, "experiments: once the experiment guard has not judged an experiment for `DURATION`, new pods get its control alone (fail closed; 0: arms need no guard)")
	clientCA := fs.String("client-ca-file", "", "serve /mutate only to callers with a client certificate from this CA `FILE` (PEM): the API server's, from its AdmissionConfiguration kubeConfigFile")
	clientToken := fs.String("client-token-file", "", "serve /mutate only to callers with this bearer token (the `FILE`'s content), or a certificate from --client-ca-file")
	leaderElect := fs.Bool("leader-elect", true, "self-managed certificates: elect one replica to write the certificate")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit webhook --cert-file F --key-file F [flags]\n\nServes the admission webhook that adds GOMAXPROCS and GOMEMLIMIT to pods at creation, from\ntheir limits. Serving needs only the certificate files; --self-managed-secret also keeps the\ncertificate (needs API access). Manifests: deploy/webhook.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	var minTLS uint16
	switch *tlsMin {
	case "1.3":
		minTLS = tls.VersionTLS13
	case "1.2":
		minTLS = tls.VersionTLS12
	default:
		return fmt.Errorf("%w: --tls-min-version %q: want 1.3 or 1.2", errUsage, *tlsMin)
	}
	opt, err := policyFlags.Options()
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	pol, err := fit.New(opt)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case *goVersion != "" && !goversion.IsValid(*goVersion):
		return fmt.Errorf("%w: --go-version %q: want a Go release such as go1.25", errUsage, *goVersion)
	case *certFile == "" || *keyFile == "":
		return fmt.Errorf("%w: --cert-file and --key-file are required", errUsage)
	case *maxBody < 1<<10:
		return fmt.Errorf("%w: --max-body %d: want at least 1024", errUsage, *maxBody)
	case *maxInFlight < 1:
		return fmt.Errorf("%w: --max-in-flight %d: want at least 1", errUsage, *maxInFlight)
	case *shutdownDelay < 0:
		return fmt.Errorf("%w: --shutdown-delay %v: want 0 or more", errUsage, *shutdownDelay)
	case *certPoll < 100*time.Millisecond:
		return fmt.Errorf("%w: --cert-poll %v: want at least 100ms", errUsage, *certPoll)
	case *guardStale < 0:
		return fmt.Errorf("%w: --experiment-guard-stale %v: want 0 or more", errUsage, *guardStale)
	case *expNamespaces != "" && !*experiments:
		return fmt.Errorf("%w: --experiment-namespaces goes with --experiments", errUsage)
	case *secret == "" && (*whName != "" || *dns != ""):
		return fmt.Errorf("%w: --webhook-config and --service-dns go with --self-managed-secret", errUsage)
	}
	var sm *webhook.SelfManaged
	if *secret != "" {
		ns, name, ok := strings.Cut(*secret, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("%w: --self-managed-secret %q: want NAMESPACE/NAME", errUsage, *secret)
		}
		if *whName == "" || *dns == "" {
			return fmt.Errorf("%w: --self-managed-secret needs --webhook-config and --service-dns", errUsage)
		}
		if filepath.Dir(*certFile) != filepath.Dir(*keyFile) {
			return fmt.Errorf("%w: with --self-managed-secret, --cert-file and --key-file must be in one directory (the Secret's volume)", errUsage)
		}
		sm = &webhook.SelfManaged{
			Secret:         types.NamespacedName{Namespace: ns, Name: name},
			WebhookConfig:  *whName,
			DNSName:        *dns,
			LeaderElection: *leaderElect,
		}
	}

	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	var h slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if *logJSON {
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(h)
	build := buildinfo.Read()
	log.Info("gofit webhook", "version", build.Version, "commit", build.Commit, "go", build.GoVersion)
	mopts := []admission.MutatorOption{admission.WithGoVersion(*goVersion)}
	var warm func(context.Context) // starts the arm assigner's caches
	if *experiments {
		nss, err := namespaceList("experiment-namespaces", *expNamespaces)
		if err != nil {
			return err
		}
		arms, err := webhook.NewArmAssigner(*kubeconfig, nss)
		if err != nil {
			return fmt.Errorf("--experiments: %w", err)
		}
		arms.GuardStale = *guardStale
		mopts = append(mopts, admission.WithArmAssigner(arms))
		warm = arms.Warm
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if warm != nil {
		warm(ctx)
	}
	return webhook.Run(ctx, webhook.Config{
		Addr:            *addr,
		CertFile:        *certFile,
		KeyFile:         *keyFile,
		CertPoll:        *certPoll,
		ShutdownDelay:   *shutdownDelay,
		Mutator:         admission.NewMutator(pol, mopts...),
		MaxBody:         *maxBody,
		MaxInFlight:     *maxInFlight,
		MinTLSVersion:   minTLS,
		Namespace:       os.Getenv("POD_NAMESPACE"),
		ClientCAFile:    *clientCA,
		ClientTokenFile: *clientToken,
		Log:             log,
		SelfManaged:     sm,
		Kubeconfig:      *kubeconfig,
		Collectors:      []prometheus.Collector{build.Collector()},
	})
}

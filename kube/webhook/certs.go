package webhook

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// SelfManaged configures the self-managed certificates: a CA and a serving
// certificate kept in a Secret by open-policy-agent/cert-controller, which
// also writes the CA into the MutatingWebhookConfiguration's caBundle and
// renews both before they expire. The server reads the certificate from
// the Secret's volume, so a renewal reaches it without a restart.
type SelfManaged struct {
	Secret        types.NamespacedName // must exist (the manifests create it empty)
	WebhookConfig string               // MutatingWebhookConfiguration name
	DNSName       string               // the Service's DNS name, e.g. gofit-webhook.gofit-system.svc

	// CertFile and KeyFile are where the Secret's volume shows the
	// certificate; their directory is where cert-controller looks for it.
	CertFile, KeyFile string

	// LeaderElection makes one replica of several do the writing.
	LeaderElection bool

	// Validity of the CA and the serving certificate, how long before
	// expiry to renew, and how often to check; 0 means cert-controller's
	// defaults (CA 10 years, serving certificate 1 year, renewed 90 days
	// ahead, checked every 12 hours).
	CAValidity, CertValidity, RenewBefore, CheckEvery time.Duration

	Log *logr.Logger

	// Metrics, if set, counts the rotator's restarts.
	Metrics *Metrics
}

// RotatorLeaseName is the Lease the replicas elect a rotator with.
const RotatorLeaseName = "gofit-webhook-cert-rotator"

// leaseTimings are the rotator's leader election timings. The rotator
// checks every 12 hours, so nothing is lost by a slow hand-over; long
// timings keep a slow API server (an emulated node, a loaded control
// plane) from costing the lease. Tests shorten them.
type leaseTimings struct {
	Duration, RenewDeadline, RetryPeriod time.Duration
	// RestartMin and RestartMax bound the wait before a new rotator after
	// one ended; it doubles from RestartMin per consecutive restart.
	RestartMin, RestartMax time.Duration
}

var rotatorLease = leaseTimings{
	Duration: 60 * time.Second, RenewDeadline: 40 * time.Second, RetryPeriod: 10 * time.Second,
	RestartMin: time.Second, RestartMax: time.Minute,
}

// RunSelfManaged runs the rotator until ctx ends. It needs API access: get,
// list, watch and update on the Secret (in its namespace) and on the
// MutatingWebhookConfiguration, each by resourceNames (its lists and
// watches carry a metadata.name field selector), and Leases for leader
// election.
//
// A rotator that ends with an error once running (a lost leader lease, an
// API server that stopped answering) is logged and replaced by a fresh one
// after a capped backoff: the server keeps serving from the Secret's
// volume meanwhile. Only errors building a rotator (bad options, a
// config the manager rejects) end RunSelfManaged.
func RunSelfManaged(ctx context.Context, cfg *rest.Config, sm SelfManaged) error {
	return runSelfManaged(ctx, cfg, sm, rotatorLease)
}

func runSelfManaged(ctx context.Context, cfg *rest.Config, sm SelfManaged, lt leaseTimings) error {
	if err := sm.check(); err != nil {
		return err
	}
	log := logr.Discard()
	if sm.Log != nil {
		log = *sm.Log
	}
	wait := lt.RestartMin
	for {
		mgr, err := newRotator(cfg, sm, lt, log, rotators.Add(1))
		if err != nil {
			return err
		}
		began := time.Now()
		err = mgr.Start(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("stopped without an error")
		}
		if time.Since(began) > 10*lt.Duration {
			wait = lt.RestartMin // it ran well for a while: start over
		}
		log.Error(err, "certificate rotator ended; the server keeps serving and a new rotator starts", "after", wait)
		sm.Metrics.rotatorRestarted()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, lt.RestartMax)
	}
}

// rotators numbers the rotators built in this process. Each registers its
// controller under its own name: controller-runtime refuses a second
// controller with one name in a process, even once the first has stopped.
var rotators atomic.Int64

// newRotator builds a manager with the rotator.
func newRotator(cfg *rest.Config, sm SelfManaged, lt leaseTimings, log logr.Logger, run int64) (manager.Manager, error) {
	ns := sm.Secret.Namespace
	// Lists and watches see only the Secret and the webhook
	// configuration the rotator keeps, so RBAC can grant those by name.
	cfg = scopedByName(cfg, map[string]string{
		"/api/v1/namespaces/" + ns + "/secrets":                               sm.Secret.Name,
		"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations": sm.WebhookConfig,
	})
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Logger:                        log,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // the webhook serves its own
		HealthProbeBindAddress:        "0",
		LeaderElection:                sm.LeaderElection,
		LeaderElectionID:              RotatorLeaseName,
		LeaderElectionNamespace:       ns,
		LeaseDuration:                 &lt.Duration,
		RenewDeadline:                 &lt.RenewDeadline,
		RetryPeriod:                   &lt.RetryPeriod,
		LeaderElectionReleaseOnCancel: true, // a rollout hands the lease over at once
		// Whatever the manager's own cache reads stays in our namespace.
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	})
	if err != nil {
		return nil, fmt.Errorf("self-managed certificates: %w", err)
	}
	cr := &rotator.CertRotator{
		ControllerName:         fmt.Sprintf("cert-rotator-%d", run),
		SecretKey:              sm.Secret,
		CertDir:                filepath.Dir(sm.CertFile),
		CertName:               filepath.Base(sm.CertFile),
		KeyName:                filepath.Base(sm.KeyFile),
		CAName:                 "gofit-webhook-ca",
		CAOrganization:         "gofit",
		DNSName:                sm.DNSName,
		IsReady:                make(chan struct{}),
		Webhooks:               []rotator.WebhookInfo{{Name: sm.WebhookConfig, Type: rotator.Mutating}},
		FieldOwner:             "gofit-webhook",
		RequireLeaderElection:  sm.LeaderElection,
		CaCertDuration:         sm.CAValidity,
		ServerCertDuration:     sm.CertValidity,
		LookaheadInterval:      sm.RenewBefore,
		RotationCheckFrequency: sm.CheckEvery,
		// The server follows the files; restarting would drop in-flight
		// admissions for nothing.
		RestartOnSecretRefresh: false,
	}
	if err := rotator.AddRotator(mgr, cr); err != nil {
		return nil, fmt.Errorf("self-managed certificates: %w", err)
	}
	return mgr, nil
}

// check names the first missing or inconsistent field.
func (sm SelfManaged) check() error {
	switch {
	case sm.Secret.Namespace == "" || sm.Secret.Name == "":
		return errors.New("self-managed certificates: the Secret needs a namespace and a name (NAMESPACE/NAME)")
	case sm.WebhookConfig == "":
		return errors.New("self-managed certificates: the MutatingWebhookConfiguration name is required")
	case sm.DNSName == "":
		return errors.New("self-managed certificates: the Service DNS name is required")
	case sm.CertFile == "" || sm.KeyFile == "":
		return errors.New("self-managed certificates: the certificate and key files are required")
	case filepath.Dir(sm.CertFile) != filepath.Dir(sm.KeyFile):
		return fmt.Errorf("self-managed certificates: %s and %s must be in one directory (the Secret's volume)", sm.CertFile, sm.KeyFile)
	}
	return nil
}

package webhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Run is the whole webhook process (`gofit webhook`): it serves cfg until
// ctx ends and, with cfg.SelfManaged, keeps the certificate too. It sends
// the package-level loggers of controller-runtime and client-go to
// cfg.Log, which is why it belongs to a process's main and not a library.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log != nil {
		lr := logr.FromSlogHandler(cfg.Log.Handler())
		ctrllog.SetLogger(lr)
		klog.SetLogger(lr)
	}
	sm := cfg.SelfManaged
	if sm != nil {
		// The rotator writes the files after the start.
		cfg.WaitForCert = true
		sm.CertFile, sm.KeyFile = cfg.CertFile, cfg.KeyFile
		if err := sm.check(); err != nil {
			return err
		}
	}
	srv, err := NewServer(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rotErr := make(chan error, 1)
	if sm == nil {
		rotErr <- nil
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = cfg.Kubeconfig
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return fmt.Errorf("self-managed certificates need API access: %w", err)
		}
		if sm.Metrics == nil {
			sm.Metrics = srv.Metrics
		}
		if cfg.Log != nil && sm.Log == nil {
			lr := logr.FromSlogHandler(cfg.Log.Handler())
			sm.Log = &lr
		}
		go func() {
			err := RunSelfManaged(ctx, rc, *sm)
			if err != nil {
				// Only a rotator that cannot be built at all ends here
				// (a lost lease starts a new one): stop, the
				// Deployment restarts us and the error says why.
				cancel()
			}
			rotErr <- err
		}()
	}
	err = srv.Run(ctx)
	cancel()
	if rerr := <-rotErr; rerr != nil && !errors.Is(rerr, context.Canceled) {
		return rerr
	}
	return err
}

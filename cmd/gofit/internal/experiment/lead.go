package experiment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Election is how the guard's replicas choose the one that acts: a Lease
// NAMESPACE/NAME held by Identity.
type Election struct {
	Namespace, Name, Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's
	// (zero: 30 s, 20 s and 5 s): a dead leader is replaced within
	// LeaseDuration, a stepping-down one within RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// ErrLostLead is Lead's error when another replica took the Lease: the
// caller exits, and the Deployment starts it again as a follower, so two
// replicas never act on one look.
var ErrLostLead = errors.New("lost the leader Lease")

// Lead runs run while this replica holds the Lease, until ctx ends (nil)
// or the Lease is lost (ErrLostLead, after run's context has ended). On
// ctx's end it gives the Lease up, so a follower leads at its next try.
func Lead(ctx context.Context, cs kubernetes.Interface, e Election, log *slog.Logger, run func(context.Context)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Name: e.Name, Namespace: e.Namespace},
		Client: cs.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity}}
	// client-go starts OnStartedLeading on a goroutine of its own: it
	// may begin after le.Run has returned. returned, under mu, keeps a
	// late start from running at all, and running is waited for, so
	// nothing acts after Lead returns.
	var mu sync.Mutex
	var running sync.WaitGroup
	returned := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: e.Name, ReleaseOnCancel: true,
		LeaseDuration: d(e.LeaseDuration, 30*time.Second), RenewDeadline: d(e.RenewDeadline, 20*time.Second), RetryPeriod: d(e.RetryPeriod, 5*time.Second),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				mu.Lock()
				if returned {
					mu.Unlock()
					return
				}
				running.Add(1)
				mu.Unlock()
				defer running.Done()
				log.Info("leading", "lease", e.Namespace+"/"+e.Name, "identity", e.Identity)
				run(ctx)
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election (lease %s/%s): %w", e.Namespace, e.Name, err)
	}
	le.Run(ctx)
	mu.Lock()
	returned = true
	mu.Unlock()
	running.Wait()
	if ctx.Err() != nil {
		return nil
	}
	log.Warn("stopped leading", "lease", e.Namespace+"/"+e.Name, "identity", e.Identity)
	return fmt.Errorf("%w %s/%s (identity %s)", ErrLostLead, e.Namespace, e.Name, e.Identity)
}

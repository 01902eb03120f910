package experiment

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLeadOneAtATime: two guard replicas on a real kube-apiserver. One
// acts at a time; when the leader stops, the other takes over within a
// retry (the Lease is given up, not left to expire); a leader whose Lease
// is taken stops acting and Lead says so, so that it exits rather than
// act beside the new leader.
func TestLeadOneAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a kube-apiserver")
	}
	cs, _ := startAPIServer(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gofit-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var acting, overlap atomic.Int32
	var mu sync.Mutex
	leader := ""
	replica := func(id string) (stop func(), result <-chan error) {
		rctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		go func() {
			res <- Lead(rctx, cs, Election{Namespace: "gofit-system", Name: "gofit-experiment-guard", Identity: id,
				LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}, nil,
				func(ctx context.Context) {
					if acting.Add(1) > 1 {
						overlap.Add(1)
					}
					mu.Lock()
					leader = id
					mu.Unlock()
					<-ctx.Done()
					acting.Add(-1)
				})
		}()
		return cancel, res
	}
	waitLeader := func(not string) string {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			l := leader
			mu.Unlock()
			if l != "" && l != not && acting.Load() == 1 {
				return l
			}
		}
		t.Fatalf("no replica but %q leads within 20 s", not)
		return ""
	}
	stopA, resA := replica("a")
	stopB, resB := replica("b")
	defer stopA()
	defer stopB()
	first := waitLeader("")
	time.Sleep(2 * time.Second) // a follower retries 4 times meanwhile
	if overlap.Load() != 0 {
		t.Fatal("both replicas acted at once")
	}

	// The leader stops (a rollout): the other leads within a few retries.
	stop, res, next := stopA, resA, "b"
	if first == "b" {
		stop, res, next = stopB, resB, "a"
	}
	start := time.Now()
	stop()
	if err := <-res; err != nil {
		t.Errorf("leader stopped by its context: %v, want nil", err)
	}
	waitLeader(first)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("%s led %v after %s stopped: want within 3 s (the Lease given up, not left to expire after 4 s)", next, took, first)
	}

	// Someone else takes the Lease (a replica that thinks the leader is
	// dead): the leader stops acting and Lead says why.
	res = resB
	if next == "a" {
		res = resA
	}
	for {
		l, err := cs.CoordinationV1().Leases("gofit-system").Get(ctx, "gofit-experiment-guard", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		other, dur := "c", int32(60)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = &other, &dur
		if _, err = cs.CoordinationV1().Leases("gofit-system").Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			break
		}
	}
	select {
	case err := <-res:
		if !errors.Is(err, ErrLostLead) {
			t.Errorf("Lead after its Lease was taken: %v, want ErrLostLead", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the leader kept leading 15 s after its Lease was taken")
	}
	if n := acting.Load(); n != 0 || overlap.Load() != 0 {
		t.Errorf("%d replicas acting after the Lease went to another (overlaps: %d)", n, overlap.Load())
	}
}

package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gofit-dev/gofit/kube/kubetest"
)

// TestRotatorLosesLease: a rotator that loses its leader lease (a slow API
// server, another holder) is replaced by a new one that campaigns again,
// and the server keeps answering admissions all along.
func TestRotatorLosesLease(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range render(t, "self-managed") {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	srv := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, WaitForCert: true, CertPoll: 200 * time.Millisecond})

	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	secret := types.NamespacedName{Namespace: "gofit-system", Name: "gofit-webhook-tls"}
	ended := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		syncSecret(rctx, cs, secret, certFile, keyFile)
	}()
	go func() {
		defer wg.Done()
		short := leaseTimings{Duration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond,
			RestartMin: 100 * time.Millisecond, RestartMax: time.Second}
		ended <- runSelfManaged(rctx, asServiceAccount(cfg), SelfManaged{Secret: secret, WebhookConfig: "gofit-webhook", DNSName: "localhost",
			CertFile: certFile, KeyFile: keyFile, LeaderElection: true, Metrics: srv.Metrics}, short)
	}()
	running := func() {
		select {
		case err := <-ended:
			t.Fatalf("the rotator gave up: %v", err)
		default:
		}
	}
	eventually(t, "a certificate in the Secret and the server ready", 60*time.Second, func() bool { running(); return srv.Ready() })
	ours := holder(t, cs)
	if ours == "" {
		t.Fatal("ready without a lease holder")
	}
	ca := caBundle(t, cl)

	// Another holder takes the lease for an hour: our renewals fail.
	foreign := "someone-else"
	if err := retryConflict(func() error {
		l, err := cs.CoordinationV1().Leases(secret.Namespace).Get(ctx, RotatorLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		hour := int32(3600)
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.AcquireTime, l.Spec.RenewTime = &foreign, &hour, &now, &now
		_, err = cs.CoordinationV1().Leases(secret.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rotator to notice the lost lease and start again", 60*time.Second, func() bool {
		running()
		return gaugeValue(t, srv.Metrics, "gofit_webhook_rotator_restarts_total") > 0
	})
	admits(t, srv.Addr(), ca)

	// The foreign holder goes away: the new rotator takes the lease and
	// keeps the certificates again.
	if err := cs.CoordinationV1().Leases(secret.Namespace).Delete(ctx, RotatorLeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lease taken back", 60*time.Second, func() bool {
		running()
		h := holder(t, cs)
		return h != "" && h != foreign
	})
	// The new rotator keeps the certificates: it renews an emptied Secret.
	after := rotate(t, cs, cl, secret, srv.Addr(), ca)
	admits(t, srv.Addr(), after)
	running()
}

// holder is the rotator Lease's holder, "" if none.
func holder(t testing.TB, cs kubernetes.Interface) string {
	t.Helper()
	var l *coordinationv1.Lease
	l, err := cs.CoordinationV1().Leases("gofit-system").Get(context.Background(), RotatorLeaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// admits posts an admission review over TLS, trusting caPEM, and wants an
// answer.
func admits(t testing.TB, addr string, caPEM []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	defer hc.CloseIdleConnections()
	body := review(t, podOf("p", ctr("app", "500m", "128Mi")), admissionv1.Create, "")
	resp, err := hc.Post("https://"+addr+"/mutate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("admission over TLS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admission over TLS: %s", resp.Status)
	}
}

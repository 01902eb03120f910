package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// warnings collects what kubectl would print as "Warning: ...".
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// newCert makes a CA and a serving certificate for localhost with
// cert-controller's own generator (what the self-managed mode uses).
func newCert(t testing.TB) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	cr := &rotator.CertRotator{CAName: "gofit-test-ca", CAOrganization: "gofit", DNSName: "localhost",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err = cr.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM, certPEM, keyPEM
}

// writeAtomic replaces a file in one rename, as the kubelet swaps a Secret
// volume, so a reader never sees half a certificate.
func writeAtomic(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// startServer runs a Server until the test ends.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return s
}

// servesCA reports whether the server at addr presents a certificate that
// chains to caPEM.
func servesCA(addr string, caPEM []byte) bool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func eventually(t testing.TB, what string, timeout time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEnvtest runs the webhook behind a real kube-apiserver and etcd, with
// the manifests' own webhook configuration pointed at the test server.
func TestEnvtest(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	ctx := context.Background()
	warn := &warnings{}
	wcfg := rest.CopyConfig(cfg)
	wcfg.WarningHandler = warn
	cs := kubernetes.NewForConfigOrDie(wcfg)
	ccfg := rest.CopyConfig(cfg)
	ccfg.WarningHandler = warn
	cl, err := client.New(ccfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}

	// Apply the self-managed overlay as rendered.
	for _, o := range render(t, "self-managed") {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	// The namespace enforces the restricted Pod Security Standard, and
	// the Deployment meets it: the API server warned about nothing.
	if ws := warn.take(); len(ws) != 0 {
		t.Errorf("applying the overlay: warnings %q", ws)
	}
	// The API server also validates the cert-manager overlay (a dry-run
	// server-side apply over what is there; its Issuers and Certificates
	// need cert-manager's CRDs, which are not here).
	for _, o := range render(t, "cert-manager") {
		if o.GroupVersionKind().Group == "cert-manager.io" {
			continue
		}
		if err := cl.Patch(ctx, o, client.Apply, client.DryRunAll, client.FieldOwner("gofit-test"), client.ForceOwnership); err != nil {
			t.Fatalf("cert-manager overlay: %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for name, labels := range map[string]map[string]string{
		"fitted": {"gofit.dev/inject": "enabled"},
		"plain":  nil,
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Its own namespace is labelled too, and still excluded.
	own, err := cs.CoreV1().Namespaces().Get(ctx, "gofit-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own.Labels["gofit.dev/inject"] = "enabled"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// pointAt aims the applied configuration at a server on this machine.
	pointAt := func(s *Server, caPEM []byte) {
		t.Helper()
		err := retryConflict(func() error {
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			if err := cl.Get(ctx, types.NamespacedName{Name: "gofit-webhook"}, &mwc); err != nil {
				return err
			}
			url := "https://localhost:" + portOf(s.Addr()) + "/mutate"
			mwc.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
			return cl.Update(ctx, &mwc)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	createPod := func(t *testing.T, ns string, pod *corev1.Pod) *corev1.Pod {
		t.Helper()
		n++
		pod = pod.DeepCopy()
		pod.Name = fmt.Sprintf("%s-%d", pod.Name, n)
		got, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		return got
	}
	fitted := func(p *corev1.Pod) bool { _, ok := p.Annotations[admission.AnnotationPlan]; return ok }
	probe := podOf("probe", ctr("app", "1", "1Gi"))
	waitFitting := func(t *testing.T, what string) {
		t.Helper()
		eventually(t, what, 60*time.Second, func() bool { return fitted(createPod(t, "fitted", probe)) })
		warn.take()
	}

	// --- Certificates from files, renewed the way cert-manager does it:
	// the Secret volume changes and cainjector rewrites caBundle.
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca1, crt, key := newCert(t)
	writeAtomic(t, certFile, crt)
	writeAtomic(t, keyFile, key)
	srv := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, CertPoll: 200 * time.Millisecond})
	pointAt(srv, ca1)
	waitFitting(t, "the API server to call the webhook")

	always := corev1.ContainerRestartPolicyAlways
	app := podOf("app",
		ctr("app", "250m", "1Gi"),
		ctr("user", "2", "512Mi", env("GOMAXPROCS", "8"), env("GOGC", "off")))
	app.Spec.InitContainers = []corev1.Container{ctr("init", "1", "64Mi"), ctr("proxy", "1500m", "128974848")}
	app.Spec.InitContainers[1].RestartPolicy = &always

	t.Run("labelled namespace", func(t *testing.T) {
		got := createPod(t, "fitted", app)
		ws := warn.take()
		stored, err := cs.CoreV1().Pods("fitted").Get(ctx, got.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checks := []struct {
			c    corev1.Container
			want map[string]string
		}{
			{stored.Spec.Containers[0], map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": "966367641", "GOFIT_RUN": "GOMAXPROCS=1,GOMEMLIMIT=966367641"}},
			{stored.Spec.Containers[1], map[string]string{"GOMAXPROCS": "8", "GOGC": "off", "GOMEMLIMIT": "483183820", "GOFIT_RUN": "GOMEMLIMIT=483183820"}},
			{stored.Spec.InitContainers[0], map[string]string{}},
			{stored.Spec.InitContainers[1], map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": "116077363", "GOFIT_RUN": "GOMAXPROCS=1,GOMEMLIMIT=116077363"}},
		}
		for _, c := range checks {
			if e := envOf(c.c); fmt.Sprint(e) != fmt.Sprint(c.want) {
				t.Errorf("stored %s env %v, want %v", c.c.Name, e, c.want)
			}
		}
		rec := record(t, stored)
		if len(rec.Containers) != 3 || rec.Containers[0].Name != "proxy" {
			t.Errorf("record %+v", rec)
		}
		if len(ws) != 1 || !strings.Contains(ws[0], `container "user": GOMAXPROCS=8 from the environment is above the CPU limit of 2 cores`) {
			t.Errorf("warnings kubectl would show: %q", ws)
		}
	})

	t.Run("reinvoked after a later webhook adds a container", func(t *testing.T) {
		var sawGofit atomic.Bool // gofit had fitted the pod before this one ran
		late := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { addLateContainer(w, r, &sawGofit) }))
		defer late.Close()
		caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: late.Certificate().Raw})
		// Configurations run in name order: this one after gofit's.
		fail := admissionregistrationv1.Fail
		none := admissionregistrationv1.SideEffectClassNone
		url := late.URL + "/"
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "zz-late"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    "late.example.com",
				AdmissionReviewVersions: []string{"v1"},
				ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}},
				ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"late": "yes"}},
				FailurePolicy:  &fail,
				SideEffects:    &none,
			}},
		}
		if err := cl.Create(ctx, mwc); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cl.Delete(ctx, mwc) }()
		p := podOf("late", ctr("app", "250m", "1Gi"))
		p.Labels = map[string]string{"late": "yes"}
		var got *corev1.Pod
		eventually(t, "the later webhook to add its container", 30*time.Second, func() bool {
			got = createPod(t, "fitted", p)
			return len(got.Spec.Containers) == 2
		})
		warn.take()
		if e := got.Spec.Containers[0].Env; len(e) != 3 || e[0].Value != "1" || e[1].Value != "966367641" || e[2].Value != "GOMAXPROCS=1,GOMEMLIMIT=966367641" {
			t.Errorf("first container after reinvocation: %v", e)
		}
		if e := envOf(got.Spec.Containers[1]); e["GOMAXPROCS"] != "2" || e["GOMEMLIMIT"] != "241591910" || len(e) != 3 {
			t.Errorf("container added after gofit's first pass: %v", e)
		}
		if r := record(t, got); len(r.Containers) != 2 || r.Containers[1].Name != "late" {
			t.Errorf("record %+v", r)
		}
		if !sawGofit.Load() {
			t.Error("the later webhook ran first: this did not test a reinvocation")
		}
	})

	t.Run("unlabelled and own namespaces", func(t *testing.T) {
		for _, ns := range []string{"plain", "gofit-system"} {
			got := createPod(t, ns, restricted(app))
			if fitted(got) || len(got.Spec.Containers[0].Env) != 0 {
				t.Errorf("%s: pod fitted: %v", ns, got.Spec.Containers[0].Env)
			}
			if ws := warn.take(); len(ws) != 0 {
				t.Errorf("%s: warnings %q", ns, ws)
			}
		}
	})

	t.Run("opt-out still warns", func(t *testing.T) {
		got := createPod(t, "fitted", optOut(podOf("out", ctr("app", "500m", "1Gi", env("GOMEMLIMIT", "2GiB")))))
		ws := warn.take()
		if fitted(got) || len(got.Spec.Containers[0].Env) != 1 {
			t.Errorf("opted-out pod changed: %v", got.Spec.Containers[0].Env)
		}
		if len(ws) != 2 || !hasWarning(ws, "below 1 core but Go's runtime default is 2") || !hasWarning(ws, "GOMEMLIMIT=2GiB from the environment is at or above") {
			t.Errorf("warnings %q", ws)
		}
	})

	t.Run("in-place resize", func(t *testing.T) {
		got := createPod(t, "fitted", podOf("resize", ctr("app", "1500m", "1Gi")))
		warn.take()
		// Requests follow limits so the QoS class (Guaranteed) stays.
		got.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("3")
		got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("3")
		resized, err := cs.CoreV1().Pods("fitted").UpdateResize(ctx, got.Name, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("resize: %v", err)
		}
		ws := warn.take()
		if len(ws) != 1 || !strings.Contains(ws[0], "GOMAXPROCS=1 was set for the limits at creation (cpu 1500m, memory 1Gi); gofit would now set 3") ||
			!strings.Contains(ws[0], "until the pod is recreated") {
			t.Errorf("resize warnings %q", ws)
		}
		if q := resized.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; q.String() != "3" || envOf(resized.Spec.Containers[0])["GOMAXPROCS"] != "1" {
			t.Errorf("resized pod: limits %v env %v", resized.Spec.Containers[0].Resources.Limits, resized.Spec.Containers[0].Env)
		}
	})

	t.Run("certificate renewed without restart (cert-manager style)", func(t *testing.T) {
		ca2, crt2, key2 := newCert(t)
		writeAtomic(t, keyFile, key2)
		writeAtomic(t, certFile, crt2)
		eventually(t, "the server to present the renewed certificate", 10*time.Second, func() bool { return servesCA(srv.Addr(), ca2) })
		pointAt(srv, ca2) // what cainjector does; the old CA is no longer trusted
		waitFitting(t, "admission with the renewed certificate")
		if servesCA(srv.Addr(), ca1) {
			t.Error("still serving the old certificate")
		}
		// The first certificate and the renewal (the callback that counts
		// them runs on its own goroutine).
		eventually(t, "two certificate loads counted", 5*time.Second, func() bool {
			return gaugeValue(t, srv.Metrics, "gofit_webhook_certificate_loads_total") == 2
		})
		if exp := gaugeValue(t, srv.Metrics, "gofit_webhook_certificate_expiry_timestamp_seconds"); exp < float64(time.Now().Add(23*time.Hour).Unix()) {
			t.Errorf("certificate expiry metric %v", exp)
		}
	})

	t.Run("self-managed certificates with rotation", func(t *testing.T) {
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		sm := startServer(t, Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, WaitForCert: true, CertPoll: 200 * time.Millisecond})
		if sm.Ready() {
			t.Fatal("ready without a certificate")
		}
		pointAt(sm, nil) // no CA until the rotator writes one

		// A webhook that cannot answer (no certificate yet) blocks nothing:
		// failurePolicy Ignore admits pods unfitted.
		eventually(t, "a pod admitted unfitted while the webhook cannot serve", 30*time.Second, func() bool {
			return !fitted(createPod(t, "fitted", probe))
		})
		warn.take()

		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		t.Cleanup(func() { stop(); wg.Wait() })
		secret := types.NamespacedName{Namespace: "gofit-system", Name: "gofit-webhook-tls"}
		wg.Add(2)
		go func() { // the kubelet: keep the Secret's volume up to date
			defer wg.Done()
			syncSecret(rctx, cs, secret, certFile, keyFile)
		}()
		go func() {
			defer wg.Done()
			// As the Deployment's service account: the overlay's RBAC
			// must be enough.
			err := RunSelfManaged(rctx, asServiceAccount(cfg), SelfManaged{Secret: secret, WebhookConfig: "gofit-webhook", DNSName: "localhost",
				CertFile: certFile, KeyFile: keyFile, LeaderElection: true})
			if err != nil && rctx.Err() == nil {
				t.Errorf("rotator: %v", err)
			}
		}()
		eventually(t, "a certificate in the Secret and the server ready", 60*time.Second, sm.Ready)
		waitFitting(t, "admission with the self-managed certificate")
		before := caBundle(t, cl)

		// Rotation: empty the Secret, as if the CA had expired. The
		// rotator makes a new CA and certificate and rewrites caBundle; the
		// server must follow without a restart.
		rotate(t, cs, cl, secret, sm.Addr(), before)
		waitFitting(t, "admission after rotation")

		// ...and no more than enough.
		sa := kubernetes.NewForConfigOrDie(asServiceAccount(cfg))
		other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "gofit-system"}}
		if _, err := cs.CoreV1().Secrets("gofit-system").Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		denied := map[string]error{}
		_, denied["update another Secret"] = sa.CoreV1().Secrets("gofit-system").Update(ctx, other, metav1.UpdateOptions{})
		_, denied["create a Secret"] = sa.CoreV1().Secrets("gofit-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
		_, denied["read Secrets elsewhere"] = sa.CoreV1().Secrets("fitted").List(ctx, metav1.ListOptions{})
		// Only its own Secret, by name (issue 51 item 4): not Helm's
		// releases, not the guard's Prometheus token.
		_, denied["get another Secret"] = sa.CoreV1().Secrets("gofit-system").Get(ctx, "other", metav1.GetOptions{})
		_, denied["list the namespace's Secrets"] = sa.CoreV1().Secrets("gofit-system").List(ctx, metav1.ListOptions{})
		_, denied["watch the namespace's Secrets"] = sa.CoreV1().Secrets("gofit-system").Watch(ctx, metav1.ListOptions{})
		_, denied["list webhook configurations"] = sa.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
		_, denied["list pods"] = sa.CoreV1().Pods("fitted").List(ctx, metav1.ListOptions{})
		denied["delete its webhook configuration"] = sa.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "gofit-webhook", metav1.DeleteOptions{})
		for what, err := range denied {
			if !apierrors.IsForbidden(err) {
				t.Errorf("the service account may %s: %v", what, err)
			}
		}
	})
}

// restricted makes a pod meet the restricted Pod Security Standard, which
// the webhook's own namespace enforces.
func restricted(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	yes, no := true, false
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			cs[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}
	}
	return p
}

// asServiceAccount is cfg acting as the webhook's service account.
func asServiceAccount(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:gofit-system:gofit-webhook",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:gofit-system", "system:authenticated"},
	}
	return c
}

func caBundle(t testing.TB, cl client.Client) []byte {
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := cl.Get(context.Background(), types.NamespacedName{Name: "gofit-webhook"}, &mwc); err != nil {
		t.Fatal(err)
	}
	return mwc.Webhooks[0].ClientConfig.CABundle
}

// syncSecret writes the Secret's tls.crt and tls.key to files whenever they
// change, as the kubelet does for a Secret volume.
func syncSecret(ctx context.Context, cs kubernetes.Interface, key types.NamespacedName, certFile, keyFile string) {
	var last []byte
	for ctx.Err() == nil {
		s, err := cs.CoreV1().Secrets(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
		if err == nil && len(s.Data["tls.crt"]) > 0 && len(s.Data["tls.key"]) > 0 && !bytes.Equal(s.Data["tls.crt"], last) {
			for _, f := range []struct {
				path string
				data []byte
			}{{keyFile, s.Data["tls.key"]}, {certFile, s.Data["tls.crt"]}} {
				if os.WriteFile(f.path+".tmp", f.data, 0o600) == nil {
					_ = os.Rename(f.path+".tmp", f.path)
				}
			}
			last = s.Data["tls.crt"]
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// rotate empties the Secret, as if the CA had expired, and waits for the
// rotator to write a new CA into caBundle (other than before) and for the
// server at addr to present a certificate from it, which it returns.
func rotate(t testing.TB, cs kubernetes.Interface, cl client.Client, secret types.NamespacedName, addr string, before []byte) []byte {
	t.Helper()
	ctx := context.Background()
	s, err := cs.CoreV1().Secrets(secret.Namespace).Get(ctx, secret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = nil
	if _, err := cs.CoreV1().Secrets(secret.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var after []byte
	eventually(t, "a new CA in caBundle", 60*time.Second, func() bool {
		after = caBundle(t, cl)
		return len(after) > 0 && !bytes.Equal(after, before)
	})
	eventually(t, "the server to present the rotated certificate", 30*time.Second, func() bool { return servesCA(addr, after) })
	return after
}

func retryConflict(f func() error) error {
	for i := 0; ; i++ {
		err := f()
		if !apierrors.IsConflict(err) || i == 10 {
			return err
		}
	}
}

func portOf(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

func gaugeValue(t testing.TB, m *Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			for _, s := range f.Metric {
				if s.Counter != nil {
					return s.Counter.GetValue()
				}
				return s.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// addLateContainer is another team's webhook: it appends a container with
// limits, once.
func addLateContainer(w http.ResponseWriter, r *http.Request, sawGofit *atomic.Bool) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	var pod corev1.Pod
	_ = json.Unmarshal(review.Request.Object.Raw, &pod)
	if _, ok := pod.Annotations[admission.AnnotationPlan]; ok {
		sawGofit.Store(true)
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "late" }) {
		c := ctr("late", "2", "256Mi")
		patch, _ := json.Marshal([]admission.PatchOp{{Op: "add", Path: "/spec/containers/-", Value: c}})
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
	}
	review.Response, review.Request = resp, nil
	_ = json.NewEncoder(w).Encode(review)
}

package webhook

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// replicas forwards each review to one of its backends in turn, as a
// Service spreads the API server's calls over the webhook's replicas.
type replicas struct {
	mu       sync.Mutex
	backends []string // https://127.0.0.1:port
	n        atomic.Int64
	client   *http.Client
}

func (r *replicas) set(addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.backends = nil
	for _, a := range addrs {
		r.backends = append(r.backends, "https://"+a)
	}
}

func (r *replicas) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	b := r.backends[int(r.n.Add(1))%len(r.backends)]
	r.mu.Unlock()
	out, err := http.NewRequestWithContext(req.Context(), req.Method, b+req.URL.RequestURI(), req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	out.ContentLength = req.ContentLength
	resp, err := r.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// TestExperimentArms runs experiments through a real kube-apiserver and two
// webhook replicas: arms stay within one pod of each other over 1 to 20
// pods created one by one, in bursts, across deletes and re-creations and
// a restart of both replicas; a malformed spec gets a warning and the
// normal fit.
// newAssigner is an ArmAssigner with its own clients, closed when the test
// ends.
func newAssigner(t testing.TB, cfg *rest.Config) *ArmAssigner {
	// Its pods name owners that need not exist: verifyOwner has its own
	// tests (TestForgedReview). Ties go in spec order, which these tests
	// of counting expect; the random pick has its own
	// (TestArmAssignerRandomizesTies).
	a := &ArmAssigner{Client: kubernetes.NewForConfigOrDie(rest.CopyConfig(cfg)), Metadata: metadata.NewForConfigOrDie(rest.CopyConfig(cfg)), trustReviews: true,
		pick: func(int) int { return 0 }}
	t.Cleanup(a.Close)
	return a
}

func TestExperimentArms(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	// No client-side rate limit: a burst must reach the webhooks at once.
	cfg.QPS, cfg.Burst = 1000, 1000
	ctx := context.Background()
	warn := &warnings{}
	wcfg := rest.CopyConfig(cfg)
	wcfg.WarningHandler = warn
	cs := kubernetes.NewForConfigOrDie(wcfg)
	for _, ns := range []string{"shop", "other"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_, crt, key := newCert(t)
	writeAtomic(t, certFile, crt)
	writeAtomic(t, keyFile, key)
	// Each replica has its own client and assigner: they share nothing
	// but the API server.
	start := func() *Server {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		m := admission.NewMutator(fit.Policy{}, admission.WithArmAssigner(newAssigner(t, cfg)))
		s, err := NewServer(Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, Mutator: m})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return s
	}
	rs := &replicas{client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}} //nolint:gosec // a test's own servers
	a, b := start(), start()
	rs.set(a.Addr(), b.Addr())
	front := httptest.NewTLSServer(rs)
	defer front.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: front.Certificate().Raw})
	fail := admissionregistrationv1.Fail // a failed call shows in the test, not as an unfitted pod
	none := admissionregistrationv1.SideEffectClassNone
	url := front.URL + "/mutate"
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "gofit-experiments"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pods.gofit.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			FailurePolicy: &fail,
			SideEffects:   &none,
		}},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	template := func(spec string) *corev1.Pod {
		p := podOf("web", ctr("app", "250m", "1Gi"))
		p.Name, p.GenerateName = "", "web-" // as a ReplicaSet names its pods
		p.Annotations = map[string]string{admission.AnnotationExperiment: spec}
		return p
	}
	create := func(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, p.DeepCopy(), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod: %v", err)
		}
		return got
	}
	eventually(t, "the API server to call the webhook", 60*time.Second, func() bool {
		p := create(t, "other", podOf("probe", ctr("app", "1", "1Gi")))
		_ = cs.CoreV1().Pods("other").Delete(ctx, p.Name, metav1.DeleteOptions{})
		_, ok := p.Annotations[admission.AnnotationPlan]
		return ok
	})
	warn.take()

	// counts lists the experiment's pods per arm, checking each carries
	// its arm's settings.
	counts := func(t *testing.T, ns, exp string, env map[string]map[string]string) map[string]int {
		t.Helper()
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: admission.LabelExperiment + "=" + exp})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, p := range pods.Items {
			arm := p.Labels[admission.LabelArm]
			out[arm]++
			if want, ok := env[arm]; ok {
				if got := envOf(p.Spec.Containers[0]); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("pod %s of arm %s: env %v, want %v", p.Name, arm, got, want)
				}
			}
		}
		return out
	}
	balanced := func(t *testing.T, c map[string]int, arms []string, total int) {
		t.Helper()
		lo, hi, sum := total, 0, 0
		for _, a := range arms {
			lo, hi, sum = min(lo, c[a]), max(hi, c[a]), sum+c[a]
		}
		if hi-lo > 1 || sum != total || len(c) != len(arms) && total >= len(arms) {
			t.Fatalf("%d pods over arms %v: %v, not within one pod per arm", total, arms, c)
		}
	}

	const three = `{"name":"gmp","arms":[{"name":"fitted","fit":"gofit"},{"name":"go-default","fit":"none"},{"name":"two","env":{"GOMAXPROCS":"2"}}]}`
	armEnv := map[string]map[string]string{
		"fitted":     {"GOMAXPROCS": "1", "GOMEMLIMIT": "966367641", "GOFIT_RUN": "GOMAXPROCS=1,GOMEMLIMIT=966367641"},
		"go-default": {"GOFIT": "off"},
		"two":        {"GOFIT": "off", "GOMAXPROCS": "2"},
	}
	arms3 := []string{"fitted", "go-default", "two"}

	t.Run("one by one, 1 to 20 pods", func(t *testing.T) {
		for n := 1; n <= 20; n++ {
			create(t, "shop", template(three))
			balanced(t, counts(t, "shop", "gmp", armEnv), arms3, n)
		}
		if ws := warn.take(); len(ws) != 0 {
			t.Errorf("warnings: %q", ws)
		}
	})

	const two = "name: burst\narms: [{name: a, fit: gofit}, {name: b, env: {GOGC: '50'}}]"
	total := 0
	burst := func(t *testing.T, n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				if _, err := cs.CoreV1().Pods("shop").Create(ctx, template(two), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("create in a burst: %v", err)
		}
		total += n
		balanced(t, counts(t, "shop", "burst", nil), []string{"a", "b"}, total)
	}
	t.Run("bursts over two replicas", func(t *testing.T) {
		for _, n := range []int{1, 2, 4, 8, 5} { // a ReplicaSet's slow start, then a scale-up
			burst(t, n)
		}
	})

	t.Run("deletes and re-creations", func(t *testing.T) {
		pods, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: admission.LabelArm + "=a," + admission.LabelExperiment + "=burst"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items[:4] { // four of one arm: the worst case
			if err := cs.CoreV1().Pods("shop").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		total -= 4
		burst(t, 4) // the ReplicaSet replaces them at once
	})

	t.Run("after both replicas restart", func(t *testing.T) {
		c, d := start(), start()
		rs.set(c.Addr(), d.Addr())
		burst(t, 7)
	})

	t.Run("malformed spec: warning naming the field, normal fit", func(t *testing.T) {
		warn.take()
		got := create(t, "shop", template("name: bad\narms: [{name: a, fit: gofit}, {name: b, env: {GOMAXPROCS: zero}}]"))
		ws := warn.take()
		if len(ws) != 1 || !strings.Contains(ws[0], "gofit.dev/experiment") || !strings.Contains(ws[0], "arms[1].env.GOMAXPROCS") {
			t.Errorf("warnings %q", ws)
		}
		if _, ok := got.Labels[admission.LabelArm]; ok {
			t.Errorf("labels %v", got.Labels)
		}
		if e := envOf(got.Spec.Containers[0]); e["GOMAXPROCS"] != "1" || e["GOFIT_RUN"] == "" {
			t.Errorf("not the normal fit: %v", e)
		}
	})
}

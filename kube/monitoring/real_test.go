package monitoring

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/kube/agent"
	"github.com/gofit-dev/gofit/kube/memqos"
	"github.com/gofit-dev/gofit/kube/webhook"
	"github.com/gofit-dev/gofit/tools/promtest"
)

// The real test's for: windows: Fast(realFor) instead of the shipped
// 5-15 minutes, so an alert fires within seconds of its condition. The
// thresholds and the 5m rate windows are the shipped ones.
const realFor = 3 * time.Second

const (
	testNS     = "gofit-test"
	memLimit   = 256 << 20
	cpuLimit   = 0.25
	cfsPeriod  = 100 * time.Millisecond
	realBudget = 3 * time.Minute
	// weightCores is the CPU request (cpu.shares) of the test's groups.
	// On a machine shared with other work the host, not the 250m quota,
	// would otherwise decide how much CPU the services get, and a starved
	// service is never throttled; a large weight lets each use its quota.
	// The quota caps each at 250m whatever its weight. gofit's plan
	// ignores the request unless GOFIT_CPU_REQUEST_FACTOR opts in.
	weightCores = 64
)

// TestRealPrometheus: a real Prometheus (promtest) evaluates the generated
// rules, with for: shortened to realFor, while scraping real processes in
// real cgroups under a 250m CFS quota and a 256 MiB limit:
//   - examples/service with GOMAXPROCS=2 under load fires
//     GofitGOMAXPROCSAboveCPULimit;
//   - the same service fitted by gofit (GOMAXPROCS 1), throttled as much
//     under the same load, stays silent;
//   - the service with GOMEMLIMIT equal to its limit fires
//     GofitGOMEMLIMITAtMemoryLimit.
//
// Beside them it scrapes a real webhook server (answering real admission
// reviews) and a real node agent (dry-run passes over a fixture node), and
// then runs every query of every dashboard panel, variables resolved: each
// returns at least one series.
func TestRealPrometheus(t *testing.T) {
	bins := promtest.Need(t)
	exe := promtest.BuildService(t, "../..")
	lim := promtest.Limits{CPU: cpuLimit, Period: cfsPeriod, Weight: weightCores, Memory: memLimit}
	ctx, cancel := context.WithTimeout(context.Background(), realBudget)
	defer cancel()

	unfit := promtest.StartService(t, exe, "service-unfitted", lim, []string{"GOMAXPROCS=2"})
	fitted := promtest.StartService(t, exe, "service-fitted", lim, nil)
	memlimit := promtest.StartService(t, exe, "memlimit", lim, []string{fmt.Sprintf("GOMEMLIMIT=%d", memLimit)})
	hook := startWebhook(ctx, t)
	node := startAgent(ctx, t)

	dir := t.TempDir()
	if err := Write(dir, Default().Fast(realFor)); err != nil {
		t.Fatal(err)
	}
	target := func(addr, workload, pod, container string) promtest.Target {
		return promtest.Target{Job: pod, Addr: addr, Labels: map[string]string{"namespace": testNS, "workload": workload, "pod": pod, "container": container, "node": "node-1"}}
	}
	hookTarget := target(hook, "gofit-webhook", "gofit-webhook-0", "webhook")
	hookTarget.HTTPS = true
	prom := promtest.Start(t, bins, promtest.Config{
		Interval:  time.Second,
		RuleFiles: []string{filepath.Join(dir, "rules.yaml")},
		Targets: []promtest.Target{
			target(unfit, "service", "service-unfitted", "app"),
			target(fitted, "service", "service-fitted", "app"),
			target(memlimit, "memlimit", "memlimit", "app"),
			hookTarget,
			target(node, "gofit-node", "gofit-node-0", "agent"),
		},
	})

	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer func() { stopLoad(); wg.Wait() }()
	for _, addr := range []string{unfit, fitted} {
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); load(loadCtx, addr) }()
		}
	}

	unfitted := map[string]string{"namespace": testNS, "pod": "service-unfitted", "container": "app"}
	atLimit := map[string]string{"namespace": testNS, "pod": "memlimit", "container": "app"}
	start := time.Now()
	var alerts []promtest.Alert
	for {
		var err error
		if alerts, err = prom.Alerts(ctx); err != nil {
			t.Fatal(err)
		}
		if promtest.Firing(alerts, "GofitGOMAXPROCSAboveCPULimit", unfitted) && promtest.Firing(alerts, "GofitGOMEMLIMITAtMemoryLimit", atLimit) {
			break
		}
		if ctx.Err() != nil {
			bg := context.Background()
			h, _ := prom.TargetHealth(bg)
			thr, _ := prom.Query(bg, recThrottled)
			used, _ := prom.Query(bg, recCPU)
			t.Fatalf("alerts not firing after %v: %+v\nthrottled share: %v\ncores used (5m rate): %v\ntargets: %v",
				time.Since(start).Round(time.Second), alerts, thr, used, h)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("GofitGOMAXPROCSAboveCPULimit and GofitGOMEMLIMITAtMemoryLimit firing %v after the load started", time.Since(start).Round(100*time.Millisecond))

	// The fitted service is throttled as much, under the same quota and
	// load, and its alert is not even pending: GOMAXPROCS 1 fits.
	one := func(expr string) float64 {
		t.Helper()
		s, err := prom.Query(ctx, expr)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != 1 {
			t.Fatalf("%s: %d series, want 1: %v", expr, len(s), s)
		}
		return s[0].Value
	}
	for _, pod := range []string{"service-unfitted", "service-fitted"} {
		share := one(fmt.Sprintf(`%s{pod=%q}`, recThrottled, pod))
		procs := one(fmt.Sprintf(`gofit_gomaxprocs{pod=%q}`, pod))
		used := one(fmt.Sprintf(`rate(gofit_cpu_usage_seconds_total{pod=%q}[10s])`, pod))
		t.Logf("%s: throttled in %.0f%% of CFS periods, GOMAXPROCS %v, %.3f cores used (last 10s)", pod, 100*share, procs, used)
		if share <= Default().ThrottledShare {
			t.Errorf("%s throttled in %.2f of its periods, not above %v: the load did not fill the quota", pod, share, Default().ThrottledShare)
		}
	}
	if p := one(`gofit_gomaxprocs{pod="service-fitted"}`); p != 1 {
		t.Errorf("fitted service runs GOMAXPROCS %v, want 1 at %v cores", p, cpuLimit)
	}
	fittedPod := map[string]string{"pod": "service-fitted"}
	for _, name := range []string{"GofitGOMAXPROCSAboveCPULimit", "GofitGOMEMLIMITAtMemoryLimit"} {
		if promtest.Active(alerts, name, fittedPod) {
			t.Errorf("%s active for the fitted service: %+v", name, alerts)
		}
	}
	if promtest.Active(alerts, "GofitGOMEMLIMITAtMemoryLimit", unfitted) {
		t.Errorf("GofitGOMEMLIMITAtMemoryLimit active for a service whose GOMEMLIMIT gofit planned")
	}

	// Every panel query of every dashboard returns a series: over the whole
	// workload, and over the fitted pod alone. Only where the kernel keeps
	// no per-cgroup PSI (no cpu.pressure for the group: a v1 host without
	// a unified hierarchy, or psi=0) is the PSI panel left out.
	self, err := cgroup.NewFS("/").Self()
	if err != nil {
		t.Fatal(err)
	}
	_, noPSI := os.Stat("/proc/pressure/memory")
	hasPSI := self.Unified != nil && noPSI == nil
	for _, vars := range []map[string]string{
		{"namespace": testNS, "workload": "service", "pod": ".*"},
		{"namespace": testNS, "workload": "service", "pod": "service-fitted"},
	} {
		for _, d := range Dashboards(Default()) {
			for _, p := range d.Panels {
				if !hasPSI && strings.Contains(p.Title, "PSI") {
					t.Logf("%s / %s: left out, no per-cgroup PSI on this host", d.Title, p.Title)
					continue
				}
				for _, tg := range p.Targets {
					expr := Resolve(tg.Expr, vars)
					s, err := prom.Query(ctx, expr)
					if err != nil {
						t.Errorf("%s / %s: %v", d.Title, p.Title, err)
					} else if len(s) == 0 {
						t.Errorf("%s / %s (pod %s): no series from\n%s", d.Title, p.Title, vars["pod"], expr)
					}
				}
			}
		}
	}
}

// Resolve fills in a panel query's dashboard variables: vars by name, the
// latency histogram's default name, and Grafana's $__rate_interval as 1m.
func Resolve(expr string, vars map[string]string) string {
	pairs := []string{"${latency_metric}", LatencyMetric, "$latency_metric", LatencyMetric, "$__rate_interval", "1m"}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		pairs = append(pairs, "${"+k+"}", vars[k], "$"+k, vars[k])
	}
	if _, ok := vars["namespace"]; !ok {
		pairs = append(pairs, "$namespace", ".*")
	}
	return strings.NewReplacer(pairs...).Replace(expr)
}

// load asks addr for /work?n=20000 (about 20 ms of CPU each) until ctx
// ends: with a few at once, the service always has work to run.
func load(ctx context.Context, addr string) {
	c := &http.Client{Timeout: 10 * time.Second}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/work?n=20000", nil)
		resp, err := c.Do(req)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// startWebhook runs the real webhook server on a self-signed certificate
// and sends it admission reviews until ctx ends; it returns the address.
func startWebhook(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	s, err := webhook.NewServer(webhook.Config{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && sctx.Err() == nil {
			t.Errorf("webhook: %v", err)
		}
	})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	review := admissionReview(t)
	go func() {
		for sctx.Err() == nil {
			req, _ := http.NewRequestWithContext(sctx, http.MethodPost, "https://"+s.Addr()+"/mutate", bytes.NewReader(review))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return s.Addr()
}

func admissionReview(t *testing.T) []byte {
	t.Helper()
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "shop"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		}}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "shop",
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object: runtimeRaw(raw)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(30 * 24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// startAgent runs real node-agent passes, dry-run, over the agent's
// fixture node every half second until ctx ends, and serves its metrics.
func startAgent(ctx context.Context, t *testing.T) string {
	t.Helper()
	l, err := agent.Detect("../agent/testdata/node-v2-cgroupfs", "/")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := agent.ReadPodList("../agent/testdata/node-pods.json")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := agent.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a := agent.New(l, agent.Options{Policy: memqos.PolicyAuto, DryRun: true, Metrics: m})
	st := agent.State{Pods: pods, Config: &memqos.Config{}, NodeAllocatable: 4 << 30}
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for actx.Err() == nil {
			a.Reconcile(st)
			select {
			case <-actx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(func() { stop(); <-done; srv.Close() })
	return strings.TrimPrefix(srv.URL, "http://")
}

func runtimeRaw(b []byte) k8sruntime.RawExtension { return k8sruntime.RawExtension{Raw: b} }

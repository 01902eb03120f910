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
	k8stypes "k8s.io/apimachinery/pkg/types"

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
// real cgroups under a 250m CFS quota and a 256 MiB limit, a real cAdvisor
// (built from its Go module by kube/hack/cadvisor.sh) watching those
// cgroups, and kube-state-metrics' series for the same pods:
//   - plainservice, which links client_golang and not gofit, with
//     GOMAXPROCS=2 under load fires GoGOMAXPROCSAboveCPULimit (from
//     go_sched_gomaxprocs_threads, cAdvisor's CFS counters and the pod's
//     CPU limit) and GoGOMEMLIMITUnset;
//   - examples/service with GOMAXPROCS=2 under load fires
//     GofitGOMAXPROCSAboveCPULimit, and not the Go rule as well;
//   - the same service fitted by gofit (GOMAXPROCS 1), throttled as much
//     under the same load, fires neither;
//   - the service with GOMEMLIMIT equal to its limit fires
//     GofitGOMEMLIMITAtMemoryLimit, once.
//
// No target carries a workload label: the workload comes from
// kube_pod_owner. Beside them it scrapes a real webhook server (answering
// real admission reviews) and a real node agent (dry-run passes over a
// fixture node), and then runs every query of every dashboard panel,
// variables resolved: each returns at least one series, for the unfitted
// workload too (all but the panels of gofit's own metrics).
//
// kube-state-metrics itself is not run: its series are written by
// kubeStateMetrics, in its names and labels, from the pod objects whose
// limits the cgroups carry (see the function for why).
func TestRealPrometheus(t *testing.T) {
	bins := promtest.Need(t)
	exe := promtest.BuildService(t, "../..")
	plainExe := promtest.BuildPlainService(t, "../..")
	cadvisorBin := promtest.CAdvisor(t, "../..")
	lim := promtest.Limits{CPU: cpuLimit, Period: cfsPeriod, Weight: weightCores, Memory: memLimit}
	ctx, cancel := context.WithTimeout(context.Background(), realBudget)
	defer cancel()

	procs := map[string]promtest.Process{
		"service-unfitted": promtest.StartProcess(t, exe, "service-unfitted", lim, []string{"GOMAXPROCS=2"}),
		"service-fitted":   promtest.StartProcess(t, exe, "service-fitted", lim, nil),
		"memlimit":         promtest.StartProcess(t, exe, "memlimit", lim, []string{fmt.Sprintf("GOMEMLIMIT=%d", memLimit)}),
		"plain-unfitted":   promtest.StartProcess(t, plainExe, "plain-unfitted", lim, []string{"GOMAXPROCS=2"}),
	}
	unfit, fitted, plain := procs["service-unfitted"].Addr, procs["service-fitted"].Addr, procs["plain-unfitted"].Addr
	labels := promtest.ContainerLabels{}
	for pod, pr := range procs {
		for _, cg := range pr.Cgroups {
			labels[cg] = map[string]string{"namespace": testNS, "pod": pod, "container": "app"}
		}
	}
	cadv := promtest.StartCAdvisor(t, cadvisorBin, labels)
	ksm := httptest.NewServer(kubeStateMetrics(t, testPods()))
	t.Cleanup(ksm.Close)
	hook := startWebhook(ctx, t)
	node := startAgent(ctx, t)

	dir := t.TempDir()
	if err := Write(dir, Default().Fast(realFor)); err != nil {
		t.Fatal(err)
	}
	// What a PodMonitor gives each target: namespace, pod, container
	// (and the agent's node, from its relabelling). No workload.
	target := func(addr, pod, container string) promtest.Target {
		return promtest.Target{Job: pod, Addr: addr, Labels: map[string]string{"namespace": testNS, "pod": pod, "container": container}}
	}
	hookTarget := target(hook, "gofit-webhook-0", "webhook")
	hookTarget.Job, hookTarget.HTTPS = "gofit-system/gofit-webhook", true
	agentTarget := target(node, "gofit-node-0", "agent")
	agentTarget.Job, agentTarget.Labels["node"] = "gofit-node/gofit-node", "node-1"
	targets := []promtest.Target{hookTarget, agentTarget,
		// kube-prometheus's jobs: the kubelet's cAdvisor endpoint and
		// kube-state-metrics (its series carry their own namespace/pod).
		{Job: "kubelet", Addr: strings.TrimPrefix(cadv, "http://"), Path: "/metrics/cadvisor", Labels: map[string]string{"metrics_path": "/metrics/cadvisor"}},
		{Job: "kube-state-metrics", Addr: strings.TrimPrefix(ksm.URL, "http://")},
	}
	for _, pod := range slices.Sorted(maps.Keys(procs)) {
		targets = append(targets, target(procs[pod].Addr, pod, "app"))
	}
	prom := promtest.Start(t, bins, promtest.Config{
		Interval:  time.Second,
		RuleFiles: []string{filepath.Join(dir, "rules.yaml")},
		Targets:   targets,
	})

	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer func() { stopLoad(); wg.Wait() }()
	for _, addr := range []string{unfit, fitted, plain} {
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); load(loadCtx, addr) }()
		}
	}

	pod := func(name string) map[string]string {
		return map[string]string{"namespace": testNS, "pod": name, "container": "app"}
	}
	want := []struct{ alert, pod string }{
		{"GoGOMAXPROCSAboveCPULimit", "plain-unfitted"},
		{"GoGOMEMLIMITUnset", "plain-unfitted"},
		{"GofitGOMAXPROCSAboveCPULimit", "service-unfitted"},
		{"GofitGOMEMLIMITAtMemoryLimit", "memlimit"},
	}
	start := time.Now()
	var alerts []promtest.Alert
	for {
		var err error
		if alerts, err = prom.Alerts(ctx); err != nil {
			t.Fatal(err)
		}
		all := true
		for _, w := range want {
			all = all && promtest.Firing(alerts, w.alert, pod(w.pod))
		}
		if all {
			break
		}
		if ctx.Err() != nil {
			bg := context.Background()
			h, _ := prom.TargetHealth(bg)
			thr, _ := prom.Query(bg, recThrottled)
			cthr, _ := prom.Query(bg, recCtrThrottled)
			used, _ := prom.Query(bg, recCPU)
			t.Fatalf("alerts not firing after %v: %+v\nthrottled share (gofit): %v\nthrottled share (cAdvisor): %v\ncores used (5m rate): %v\ntargets: %v",
				time.Since(start).Round(time.Second), alerts, thr, cthr, used, h)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%v firing %v after the load started", want, time.Since(start).Round(100*time.Millisecond))

	// The fitted service is throttled as much, under the same quota and
	// load, and its alerts are not even pending: GOMAXPROCS 1 fits. No
	// container fires both gofit's rule and the Go rule.
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
	for _, p := range []string{"service-unfitted", "service-fitted"} {
		share := one(fmt.Sprintf(`%s{pod=%q}`, recThrottled, p))
		procs := one(fmt.Sprintf(`gofit_gomaxprocs{pod=%q}`, p))
		used := one(fmt.Sprintf(`rate(gofit_cpu_usage_seconds_total{pod=%q}[10s])`, p))
		t.Logf("%s: throttled in %.0f%% of CFS periods, GOMAXPROCS %v, %.3f cores used (last 10s)", p, 100*share, procs, used)
		if share <= Default().ThrottledShare {
			t.Errorf("%s throttled in %.2f of its periods, not above %v: the load did not fill the quota", p, share, Default().ThrottledShare)
		}
	}
	for _, p := range []string{"plain-unfitted", "service-fitted"} {
		share := one(fmt.Sprintf(`%s{pod=%q}`, recCtrThrottled, p))
		t.Logf("%s: throttled in %.0f%% of CFS periods (cAdvisor), GOMAXPROCS %v (client_golang)", p, 100*share, one(fmt.Sprintf(`%s{pod=%q}`, recGoProcs, p)))
		if share <= Default().ThrottledShare {
			t.Errorf("%s throttled in %.2f of its periods (cAdvisor), not above %v", p, share, Default().ThrottledShare)
		}
	}
	if p := one(`gofit_gomaxprocs{pod="service-fitted"}`); p != 1 {
		t.Errorf("fitted service runs GOMAXPROCS %v, want 1 at %v cores", p, cpuLimit)
	}
	silent := []struct{ alert, pod string }{
		{"GofitGOMAXPROCSAboveCPULimit", "service-fitted"},
		{"GoGOMAXPROCSAboveCPULimit", "service-fitted"},
		{"GofitGOMEMLIMITAtMemoryLimit", "service-fitted"},
		{"GoGOMEMLIMITAtMemoryLimit", "service-fitted"},
		{"GoGOMEMLIMITUnset", "service-fitted"},
		{"GofitGOMEMLIMITAtMemoryLimit", "service-unfitted"},
		// Fired by gofit's rule above: the Go rule stays silent.
		{"GoGOMAXPROCSAboveCPULimit", "service-unfitted"},
		{"GoGOMEMLIMITAtMemoryLimit", "memlimit"},
	}
	for _, s := range silent {
		if promtest.Active(alerts, s.alert, map[string]string{"pod": s.pod}) {
			t.Errorf("%s active for %s: %+v", s.alert, s.pod, alerts)
		}
	}
	for _, name := range []string{"GofitWebhookAbsent", "GofitNodeAgentAbsent", "GofitWebhookTargetDown", "GofitNodeAgentTargetDown"} {
		if promtest.Active(alerts, name, nil) {
			t.Errorf("%s active with the webhook and the agent up: %+v", name, alerts)
		}
	}

	// Each Go container's fit status and workload, from kube_pod_owner.
	got := map[string]string{}
	fit, err := prom.Query(ctx, recGoFit)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range fit {
		got[s.Labels["pod"]] += s.Labels["workload"] + "/" + s.Labels["status"]
	}
	for p, w := range map[string]string{
		"plain-unfitted":   "plain/misfitted",
		"service-unfitted": "service/misfitted",
		"service-fitted":   "service/fitted_by_gofit",
		"memlimit":         "memlimit/misfitted",
	} {
		if got[p] != w {
			t.Errorf("%s: fit status %q, want %q (all: %v)", p, got[p], w, got)
		}
	}

	// Every panel query of every dashboard returns a series: over each
	// workload, fitted and not, and over the fitted pod alone. Panels of
	// gofit's own metrics are checked where gofit fits; the API server's
	// admission panel needs an API server that called the webhook. Only
	// where the kernel keeps no per-cgroup PSI (no cpu.pressure for the
	// group: a v1 host without a unified hierarchy, or psi=0) is the PSI
	// panel left out.
	self, err := cgroup.NewFS("/").Self()
	if err != nil {
		t.Fatal(err)
	}
	_, noPSI := os.Stat("/proc/pressure/memory")
	hasPSI := self.Unified != nil && noPSI == nil
	for _, c := range []struct {
		vars   map[string]string
		fitted bool
	}{
		{map[string]string{"cluster": "", "namespace": testNS, "workload": "service", "pod": "(service-unfitted|service-fitted)"}, true},
		{map[string]string{"cluster": "", "namespace": testNS, "workload": "service", "pod": "service-fitted"}, true},
		{map[string]string{"cluster": "", "namespace": testNS, "workload": "plain", "pod": "plain-unfitted"}, false},
	} {
		for _, d := range Dashboards(Default()) {
			for _, p := range d.Panels {
				switch {
				case !hasPSI && strings.Contains(p.Title, "PSI"):
					t.Logf("%s / %s: left out, no per-cgroup PSI on this host", d.Title, p.Title)
					continue
				case p.apiServer || p.gofitOnly && !c.fitted:
					continue
				}
				for _, tg := range p.Targets {
					expr := Resolve(tg.Expr, c.vars)
					s, err := prom.Query(ctx, expr)
					if err != nil {
						t.Errorf("%s / %s: %v", d.Title, p.Title, err)
					} else if len(s) == 0 {
						t.Errorf("%s / %s (workload %s, pod %s): no series from\n%s", d.Title, p.Title, c.vars["workload"], c.vars["pod"], expr)
					}
				}
			}
			// Annotations mark events: no series is fine, an error is not.
			for _, a := range d.Annotations.List {
				if _, err := prom.Query(ctx, Resolve(a.Expr, c.vars)); err != nil {
					t.Errorf("%s: annotation %s: %v", d.Title, a.Name, err)
				}
			}
		}
	}
}

// testPods are the pods behind the test's targets, as the API server
// would hold them: examples/service and plainservice in Deployments (pods
// owned by a ReplicaSet), memlimit in a StatefulSet, the webhook in a
// Deployment and the agent in a DaemonSet, with the limits their cgroups
// carry.
func testPods() []corev1.Pod {
	limits := corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(cpuLimit*1000), resource.DecimalSI), corev1.ResourceMemory: *resource.NewQuantity(memLimit, resource.BinarySI)}
	pod := func(name, container, kind, owner string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: k8stypes.UID("uid-" + name),
				OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: owner, Controller: ptr(true)}}},
			Spec:   corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: container, Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: container}}},
		}
	}
	return []corev1.Pod{
		pod("service-unfitted", "app", "ReplicaSet", "service-5d8c9"),
		pod("service-fitted", "app", "ReplicaSet", "service-5d8c9"),
		pod("plain-unfitted", "app", "ReplicaSet", "plain-7f6b4"),
		pod("memlimit", "app", "StatefulSet", "memlimit"),
		pod("gofit-webhook-0", "webhook", "ReplicaSet", "gofit-webhook-6c4d8"),
		pod("gofit-node-0", "agent", "DaemonSet", "gofit-node"),
	}
}

func ptr[T any](v T) *T { return &v }

// kubeStateMetrics serves what kube-state-metrics v2 exports for pods
// (kube_pod_owner, kube_pod_container_resource_limits and _requests,
// kube_pod_container_status_restarts_total and _last_terminated_reason),
// their ReplicaSets (kube_replicaset_owner: each "NAME-HASH" owned by the
// Deployment NAME), the node (kube_node_info) and the Deployments'
// observed generations, with its metric names, labels and units.
//
// It stands in for the real kube-state-metrics, which would watch these
// objects in envtest's kube-apiserver: the module proxy serves
// k8s.io/kube-state-metrics/v2 v2.16.0, but the checksum database has no
// entry for it here (go install fails verifying it), and its build pulls
// its own client-go generation, a second multi-minute compile on a cold
// make test. The rules read only the series written here.
func kubeStateMetrics(t *testing.T, pods []corev1.Pod) http.Handler {
	t.Helper()
	var b strings.Builder
	typ := func(name, kind string) {
		fmt.Fprintf(&b, "# HELP %s kube-state-metrics (test)\n# TYPE %s %s\n", name, name, kind)
	}
	typ("kube_node_info", "gauge")
	fmt.Fprintf(&b, "kube_node_info{node=%q,kernel_version=\"\",os_image=\"\",container_runtime_version=\"\",kubelet_version=\"\",kubeproxy_version=\"\",provider_id=\"\",pod_cidr=\"\",system_uuid=\"\",internal_ip=\"\"} 1\n", "node-1")
	typ("kube_pod_owner", "gauge")
	replicaSets := map[string]bool{}
	for _, p := range pods {
		for _, o := range p.OwnerReferences {
			fmt.Fprintf(&b, "kube_pod_owner{namespace=%q,pod=%q,uid=%q,owner_kind=%q,owner_name=%q,owner_is_controller=%q} 1\n", p.Namespace, p.Name, p.UID, o.Kind, o.Name, fmt.Sprint(o.Controller != nil && *o.Controller))
			if o.Kind == "ReplicaSet" {
				replicaSets[o.Name] = true
			}
		}
	}
	typ("kube_replicaset_owner", "gauge")
	typ("kube_deployment_status_observed_generation", "gauge")
	for _, rs := range slices.Sorted(maps.Keys(replicaSets)) {
		deploy := rs[:strings.LastIndex(rs, "-")]
		fmt.Fprintf(&b, "kube_replicaset_owner{namespace=%q,replicaset=%q,owner_kind=\"Deployment\",owner_name=%q,owner_is_controller=\"true\"} 1\n", testNS, rs, deploy)
		fmt.Fprintf(&b, "kube_deployment_status_observed_generation{namespace=%q,deployment=%q} 1\n", testNS, deploy)
	}
	for _, m := range []struct {
		name string
		list func(corev1.Container) corev1.ResourceList
	}{{"kube_pod_container_resource_limits", func(c corev1.Container) corev1.ResourceList { return c.Resources.Limits }},
		{"kube_pod_container_resource_requests", func(c corev1.Container) corev1.ResourceList { return c.Resources.Requests }}} {
		typ(m.name, "gauge")
		for _, p := range pods {
			for _, c := range p.Spec.Containers {
				l := m.list(c)
				fmt.Fprintf(&b, "%s{namespace=%q,pod=%q,uid=%q,container=%q,node=%q,resource=\"cpu\",unit=\"core\"} %v\n", m.name, p.Namespace, p.Name, p.UID, c.Name, p.Spec.NodeName, l.Cpu().AsApproximateFloat64())
				fmt.Fprintf(&b, "%s{namespace=%q,pod=%q,uid=%q,container=%q,node=%q,resource=\"memory\",unit=\"byte\"} %v\n", m.name, p.Namespace, p.Name, p.UID, c.Name, p.Spec.NodeName, l.Memory().Value())
			}
		}
	}
	typ("kube_pod_container_status_restarts_total", "counter")
	for _, p := range pods {
		for _, s := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "kube_pod_container_status_restarts_total{namespace=%q,pod=%q,uid=%q,container=%q} %d\n", p.Namespace, p.Name, p.UID, s.Name, s.RestartCount)
		}
	}
	typ("kube_pod_container_status_last_terminated_reason", "gauge")
	for _, p := range pods {
		for _, s := range p.Status.ContainerStatuses {
			if s.LastTerminationState.Terminated != nil {
				fmt.Fprintf(&b, "kube_pod_container_status_last_terminated_reason{namespace=%q,pod=%q,uid=%q,container=%q,reason=%q} 1\n", p.Namespace, p.Name, p.UID, s.Name, s.LastTerminationState.Terminated.Reason)
			}
		}
	}
	body := b.String()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, body)
	})
}

// Resolve fills in a panel query's dashboard variables: vars by name, the
// latency histogram's default name, and Grafana's $__rate_interval as 1m.
func Resolve(expr string, vars map[string]string) string {
	pairs := []string{"${latency_metric}", LatencyMetric, "$latency_metric", LatencyMetric, "$__rate_interval", "1m"}
	if _, ok := vars["cluster"]; !ok {
		pairs = append(pairs, "$cluster", "")
	}
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
func load(ctx context.Context, addr string) { promtest.Load(ctx, "http://"+addr+"/work?n=20000") }

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

package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gofit-dev/gofit/kube/memqos"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// Fault steps (issue 27, item 9): the agent and the webhook on the real node
// when something goes wrong. They run after static and before webhook-down,
// with gofit installed from deploy/, and each leaves the node as it found it.

const faultsNS = "faults"

// faultNamespace makes the namespace the fault steps put their pods in: no
// gofit.dev/inject label (the webhook leaves it alone) and the API server's
// default pod security (privileged).
func (g *guestRun) faultNamespace(t *testing.T) {
	t.Helper()
	_, err := g.c.cs.CoreV1().Namespaces().Create(g.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: faultsNS}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// plainPod is a Burstable examples/service pod in the faults namespace.
func plainPod(name, memRequest string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: faultsNS, Annotations: ann}, Spec: corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr(int64(1)),
		Containers: []corev1.Container{{Name: "service", Image: serviceImage, Args: []string{"-addr=:8080"},
			Resources: corev1.ResourceRequirements{Requests: resources("20m", memRequest), Limits: corev1.ResourceList{corev1.ResourceCPU: mustQuantity("500m")}}}}}}
}

// runPod creates a pod and waits until its container runs; it returns the
// pod as the API has it then.
func (g *guestRun) runPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := g.c.cs.CoreV1().Pods(p.Namespace).Create(g.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	err := poll(3*time.Minute, "pod "+p.Namespace+"/"+p.Name+" running", func() (bool, error) {
		q, err := g.c.cs.CoreV1().Pods(p.Namespace).Get(g.ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = q
		return q.Status.Phase == corev1.PodRunning && len(q.Status.ContainerStatuses) == 1 && q.Status.ContainerStatuses[0].ContainerID != "",
			fmt.Errorf("phase %s", q.Status.Phase)
	})
	if err != nil {
		g.describe(t, p.Namespace)
		t.Fatal(err)
	}
	return got
}

// deletePods deletes pods by name and waits until they are gone.
func (g *guestRun) deletePods(t *testing.T, ns string, names ...string) {
	t.Helper()
	var dirs []string
	for _, n := range names {
		if p, err := g.c.cs.CoreV1().Pods(ns).Get(g.ctx, n, metav1.GetOptions{}); err == nil {
			dirs = append(dirs, podCgroup(p, string(p.UID)))
		}
		err := g.c.cs.CoreV1().Pods(ns).Delete(g.ctx, n, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	// Gone from the node too: the agent keeps a pod cgroup that outlives
	// its API pod in its levels' sums, so a step that measures the levels
	// next saw them fall by this pod's memory.low when the kubelet got
	// round to removing it (forged-mirror, after resize-infeasible: 64 MiB).
	defer func() {
		if err := waitGone(3*time.Minute, "the cgroups of pods "+strings.Join(names, ", "), dirs); err != nil {
			t.Error(err)
		}
	}()
	err := poll(3*time.Minute, "pods "+strings.Join(names, ", ")+" gone", func() (bool, error) {
		for _, n := range names {
			if _, err := g.c.cs.CoreV1().Pods(ns).Get(g.ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("%s still there (%v)", n, err)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
}

// memValues reads memory.min, memory.low and memory.high of every cgroup
// under kubepods (the levels, the pods and their containers), by path.
func memValues() map[string]int64 {
	out := map[string]int64{}
	root := "/sys/fs/cgroup/kubepods"
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		for _, f := range []string{"memory.min", "memory.low", "memory.high"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil {
				out[filepath.Join(p, f)] = num(strings.TrimSpace(string(b)))
			}
		}
		return nil
	})
	return out
}

// changed lists the values in both maps that differ, skipping paths under
// any of the excluded directories.
func changed(before, after map[string]int64, exclude ...string) []string {
	var diff []string
outer:
	for k, v := range before {
		for _, e := range exclude {
			if e != "" && strings.HasPrefix(k, e+"/") {
				continue outer
			}
		}
		if w, ok := after[k]; ok && w != v {
			diff = append(diff, fmt.Sprintf("%s %d→%d", strings.TrimPrefix(k, "/sys/fs/cgroup/"), v, w))
		}
	}
	sort.Strings(diff)
	return diff
}

// watchValues samples memValues every 250ms for d and returns every change
// against before (outside exclude) and how many samples it took.
func watchValues(before map[string]int64, d time.Duration, exclude ...string) ([]string, int) {
	seen := map[string]bool{}
	var all []string
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		for _, c := range changed(before, memValues(), exclude...) {
			if !seen[c] {
				seen[c] = true
				all = append(all, c)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return all, n
}

// agentPod is the running agent's pod; with want set, only one whose
// container has that env var (name=value).
func (g *guestRun) agentPod(t *testing.T, want string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	err := poll(timeout, "an agent pod running (env "+want+")", func() (bool, error) {
		l, err := g.c.cs.CoreV1().Pods("gofit-node").List(g.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gofit-node"})
		if err != nil {
			return false, err
		}
		for i := range l.Items {
			p := &l.Items[i]
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				continue
			}
			env := envOf(p.Spec.Containers[0])
			if k, v, _ := strings.Cut(want, "="); want != "" && env[k] != v {
				continue
			}
			found = p
			return true, nil
		}
		return false, fmt.Errorf("pods: %s", podSummary(l.Items))
	})
	if err != nil {
		g.describe(t, "gofit-node")
		t.Fatal(err)
	}
	return found
}

// agentHTTP gets a path from the agent's metrics port (over https, with
// the steps' reader token: --metrics-secure).
func (g *guestRun) agentHTTP(t *testing.T, p *corev1.Pod, path string) (int, string, error) {
	return agentGet(p.Status.PodIP, path, g.agentToken(t))
}

// faultProxy stands between the agent and the API server: TLS with the API
// server's own certificate (its SANs include the node's address), every
// request passed through with the agent's own token, except reads of the
// agent's ConfigMaps, which fail with a 503 while failing is set.
type faultProxy struct {
	srv      *http.Server
	addr     string
	failing  atomic.Bool
	failed   atomic.Int64 // ConfigMap requests answered 503
	cmPassed atomic.Int64 // ConfigMap requests passed through
	passed   atomic.Int64 // other requests passed through
}

func startFaultProxy(t *testing.T, cmPath string) *faultProxy {
	t.Helper()
	cert, err := tls.LoadX509KeyPair("/etc/kubernetes/apiserver.crt", "/etc/kubernetes/apiserver.key")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(thePKI.caPEM)
	target, _ := url.Parse(apiServerURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	rp.FlushInterval = -1 // watches stream
	p := &faultProxy{addr: net.JoinHostPort(nodeIP, "6443")}
	p.srv = &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, cmPath) {
				if p.failing.Load() {
					p.failed.Add(1)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusServiceUnavailable)
					io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"e2e fault proxy: the storage is unavailable","reason":"ServiceUnavailable","code":503}`)
					return
				}
				p.cmPassed.Add(1)
			} else {
				p.passed.Add(1)
			}
			rp.ServeHTTP(w, r)
		})}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	go p.srv.ServeTLS(ln, "", "")
	return p
}

// agentRestartConfigFails restarts the agent while every read of its
// ConfigMap fails with a 503, and checks that it writes nothing meanwhile,
// says so in /healthz, and resumes once the reads succeed.
//
// How the list fails, and for the agent only: the agent's pod is pointed
// (KUBERNETES_SERVICE_HOST/PORT in its container's env, which the in-cluster
// config reads and which win over the kubelet's service variables) at a
// proxy this test runs on the node. The proxy serves the API server's own
// certificate, so the agent's service-account CA trusts it unchanged, and
// passes every request through with the agent's own token (the API server
// still authenticates and authorizes the agent), except the ConfigMap
// reads, which it answers 503 ServiceUnavailable with a Status body: what
// an API server with its storage away answers, and neither NotFound nor
// Forbidden. Everything else the agent needs (pods, the node) keeps
// working, so the ConfigMap is the only thing missing. API Priority and
// Fairness objects could reject the agent's flow instead, but APF is off on
// this node (it slows the first start under TCG), and a 429 carries
// Retry-After, which client-go retries for a while on its own; the proxy
// fails exactly the requests in question, and counts them.
func (g *guestRun) agentRestartConfigFails(t *testing.T) {
	c := g.c
	g.faultNamespace(t)
	// A ConfigMap under which protection differs from the defaults: the LS
	// class (Burstable pods) protected by its request. Under the defaults a
	// pod without an annotation gets nothing.
	if _, _, err := c.run("apply", "-f", "/src/deploy/node/configmap-example.yaml"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Back to deploy/node's own ConfigMap (no data: the defaults).
		// Deleting it would leave the agent on this configuration and
		// unready: a missing ConfigMap is a bad one (issue 51).
		if _, _, err := g.c.run("replace", "-f", "/src/deploy/node/configmap.yaml"); err != nil {
			t.Errorf("restoring deploy/node's ConfigMap: %v", err)
		}
	}()
	plain := g.runPod(t, plainPod("plain", "80Mi", nil))
	defer g.deletePods(t, faultsNS, "plain", "late")
	plainDir := podCgroup(plain, string(plain.UID))
	err := poll(2*time.Minute, "memory.low on the unannotated pod under the ConfigMap", func() (bool, error) {
		v := num(readValue(t, plainDir, "memory.low"))
		return v > 0, fmt.Errorf("memory.low %d", v)
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	plainLow := num(readValue(t, plainDir, "memory.low"))
	// The defaults would change values now: what a pass on them would write.
	def := g.dryRun(t)
	wouldDrop := 0
	for _, ch := range def.Apply.Changed {
		if ch.Value.Value < ch.Old && (ch.File == "memory.low" || ch.File == "memory.min") {
			wouldDrop++
		}
	}
	if wouldDrop == 0 {
		t.Fatalf("precondition: a pass on the defaults would lower no memory.min/low (%d changes): the check below could not fail", len(def.Apply.Changed))
	}
	t.Logf("a pass on the defaults would lower %d memory.min/low values (of %d changes), the unannotated pod's among them", wouldDrop, len(def.Apply.Changed))

	old := g.agentPod(t, "", time.Minute)
	ds, err := c.cs.AppsV1().DaemonSets("gofit-node").Get(g.ctx, "gofit-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	origEnv := append([]corev1.EnvVar(nil), ds.Spec.Template.Spec.Containers[0].Env...)
	origArgs := append([]string(nil), ds.Spec.Template.Spec.Containers[0].Args...)
	origGrace := ds.Spec.Template.Spec.TerminationGracePeriodSeconds
	proxy := startFaultProxy(t, "/api/v1/namespaces/gofit-node/configmaps")
	proxy.failing.Store(true)
	defer proxy.srv.Close()
	// Back to the API server directly, and ready, whatever happened.
	defer func() {
		proxy.failing.Store(false)
		if err := g.setAgentSpec(origEnv, origArgs, origGrace); err != nil {
			t.Errorf("restoring the agent's DaemonSet: %v", err)
			return
		}
		// Ten minutes: in a starved guest containerd has taken 9 minutes
		// to stop the proxied agent's container (2026-11-28).
		err = poll(10*time.Minute, "the agent's DaemonSet restored and ready", func() (bool, error) {
			d, err := c.cs.AppsV1().DaemonSets("gofit-node").Get(g.ctx, "gofit-node", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			l, err := c.cs.CoreV1().Pods("gofit-node").List(g.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gofit-node"})
			if err != nil {
				return false, err
			}
			for _, p := range l.Items {
				if envOf(p.Spec.Containers[0])["KUBERNETES_SERVICE_PORT"] == "6443" {
					return false, fmt.Errorf("pod %s still points at the proxy", p.Name)
				}
			}
			return d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedNumberScheduled == 1 && d.Status.NumberReady == 1,
				fmt.Errorf("updated %d, ready %d; pods %s", d.Status.UpdatedNumberScheduled, d.Status.NumberReady, podSummary(l.Items))
		})
		if err != nil {
			t.Error(err)
		}
	}()

	// One interval for the pass that protected the pod to settle.
	time.Sleep(11 * time.Second)
	before := memValues()
	start := time.Now()
	proxied := append(append([]corev1.EnvVar(nil), origEnv...),
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: nodeIP}, corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: "6443"})
	// The proxied agent waits 45 s for its first lists instead of the
	// shipped 2 minutes: the same start-up wait and the same loop after
	// it, 75 s sooner. Its pod stops within 5 s when it is replaced on the
	// way back (its SIGTERM handling only reads the DaemonSet).
	args := make([]string, 0, len(origArgs)+1)
	for _, a := range origArgs {
		if !strings.HasPrefix(a, "--sync-timeout=") {
			args = append(args, a)
		}
	}
	args = append(args, "--sync-timeout=45s")
	grace := int64(5)
	if err := g.setAgentSpec(proxied, args, &grace); err != nil {
		t.Fatal(err)
	}
	agent := g.agentPod(t, "KUBERNETES_SERVICE_PORT=6443", 10*time.Minute)
	t.Logf("agent restarted through the proxy: %s (was %s), running %.1fs after the DaemonSet update", agent.Name, old.Name, time.Since(start).Seconds())
	oldDir := podCgroup(old, string(old.UID))
	newDir := podCgroup(agent, string(agent.UID))

	// The new agent lists pods and the node through the proxy, and its
	// ConfigMap reads fail: /healthz says what it waits for.
	var code int
	var body string
	err = poll(3*time.Minute, "the agent's /healthz waiting for its ConfigMap", func() (bool, error) {
		code, body, err = g.agentHTTP(t, agent, "/healthz")
		if err != nil {
			return false, err
		}
		return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for the first list of configmap gofit-node/slo-controller-config") &&
				proxy.failed.Load() >= 2,
			fmt.Errorf("%d %q; proxy: %d ConfigMap reads failed, %d other requests", code, body, proxy.failed.Load(), proxy.passed.Load())
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	t.Logf("/healthz %d: %s", code, body)
	// A pod that arrives while the agent waits: nothing is written for it
	// either until the configuration is known.
	late := g.runPod(t, plainPod("late", "72Mi", nil))
	lateDir := podCgroup(late, string(late.UID))
	// The agent waits --sync-timeout (45s here) for the first list, then runs
	// its loop, which keeps writing nothing while the reads fail (and says
	// so): watch through both, and 35s (three intervals) at least.
	watchStart := time.Now()
	seen := map[string]bool{}
	var diff []string
	samples := 0
	for {
		d, n := watchValues(before, 5*time.Second, oldDir, newDir, lateDir)
		samples += n
		for _, x := range d {
			if !seen[x] {
				seen[x] = true
				diff = append(diff, x)
			}
		}
		code, body, _ = g.agentHTTP(t, agent, "/healthz")
		if strings.Contains(body, "nothing written") && time.Since(watchStart) > 35*time.Second {
			break
		}
		if time.Since(watchStart) > 4*time.Minute {
			t.Errorf("/healthz never said the loop writes nothing: %d %q", code, body)
			break
		}
	}
	outage := time.Since(watchStart)
	t.Logf("/healthz %d after %.0fs: %s", code, outage.Seconds(), body)
	if len(diff) > 0 {
		t.Errorf("values changed while the agent could not read its ConfigMap: %s", strings.Join(diff, "; "))
	}
	if v := num(readValue(t, lateDir, "memory.low")); v != 0 {
		t.Errorf("the pod created during the outage got memory.low %d before the ConfigMap was read", v)
	}
	if code != http.StatusServiceUnavailable {
		t.Errorf("/healthz %d %q after %v of failing ConfigMap reads, want 503", code, body, outage)
	}
	kept, now := 0, memValues()
	for k := range before {
		if _, ok := now[k]; ok {
			kept++
		}
	}
	t.Logf("during the outage (%d samples over %.0fs): %d values unchanged, %d changed; the proxy failed %d ConfigMap reads and passed %d other requests; /healthz still %d",
		samples, outage.Seconds(), kept, len(diff), proxy.failed.Load(), proxy.passed.Load(), code)

	// The reads succeed again: the agent resumes, with the ConfigMap.
	proxy.failing.Store(false)
	healed := time.Now()
	err = poll(3*time.Minute, "the agent healthy after the ConfigMap reads succeed", func() (bool, error) {
		code, body, err = g.agentHTTP(t, agent, "/healthz")
		return err == nil && code == 200, fmt.Errorf("%d %q %v", code, body, err)
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	t.Logf("healthy %.1fs after the reads succeeded (%d ConfigMap reads passed): %s", time.Since(healed).Seconds(), proxy.cmPassed.Load(), body)
	err = poll(time.Minute, "memory.low on the pod created during the outage", func() (bool, error) {
		v := num(readValue(t, lateDir, "memory.low"))
		return v > 0, fmt.Errorf("memory.low %d", v)
	})
	if err != nil {
		g.agentLog(t)
		t.Error(err)
	}
	if v := num(readValue(t, plainDir, "memory.low")); v != plainLow {
		t.Errorf("the unannotated pod's memory.low %d after the agent resumed, want %d (the ConfigMap's)", v, plainLow)
	}
	t.Logf("resumed: the late pod got memory.low %d %.1fs after the reads succeeded", num(readValue(t, lateDir, "memory.low")), time.Since(healed).Seconds())

}

// setAgentSpec sets the agent container's env and args and the pod's
// termination grace period in the agent DaemonSet (a rolling restart of the
// agent).
func (g *guestRun) setAgentSpec(env []corev1.EnvVar, args []string, grace *int64) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := g.c.cs.AppsV1().DaemonSets("gofit-node").Get(g.ctx, "gofit-node", metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Env = env
		d.Spec.Template.Spec.Containers[0].Args = args
		d.Spec.Template.Spec.TerminationGracePeriodSeconds = grace
		_, err = g.c.cs.AppsV1().DaemonSets("gofit-node").Update(g.ctx, d, metav1.UpdateOptions{})
		return err
	})
}

// infeasibleResize asks for more memory than the node has through the
// resize subresource: the kubelet marks it Infeasible, and the agent keeps
// protecting what the kubelet allocated, not what the spec now asks for.
func (g *guestRun) infeasibleResize(t *testing.T) {
	g.faultNamespace(t)
	p := g.runPod(t, plainPod("resizer", "64Mi", map[string]string{memqos.AnnotationMemoryQOS: `{"policy":"auto"}`}))
	defer g.deletePods(t, faultsNS, "resizer")
	dir := podCgroup(p, string(p.UID))
	ctr := containerCgroup(p, dir)
	err := poll(2*time.Minute, "memory.low on the resizer's pod cgroup", func() (bool, error) {
		v := num(readValue(t, dir, "memory.low"))
		return v > 0, fmt.Errorf("memory.low %d", v)
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	// Let the agent's pass for this pod finish everywhere (levels too).
	err = poll(time.Minute, "no writes pending for the agent", func() (bool, error) {
		ch := g.dryRun(t).Apply.Changed
		return len(ch) == 0, fmt.Errorf("%d pending", len(ch))
	})
	if err != nil {
		t.Log(err)
	}
	before := memValues()
	podLow, podMin, ctrLow := num(readValue(t, dir, "memory.low")), num(readValue(t, dir, "memory.min")), num(readValue(t, ctr, "memory.low"))
	n, err := g.c.cs.CoreV1().Nodes().Get(g.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := n.Status.Capacity.Memory().Value()
	// Beyond the node's capacity the kubelet marks a resize Infeasible.
	// Kubernetes 1.37's API server refuses such a resize itself (Forbidden:
	// "node didn't have enough allocatable resources"), so there the
	// pending resize is one of exactly the node's allocatable memory: it
	// fits the node but not beside the other pods, and the kubelet defers
	// it. Either way the kubelet allocates nothing new.
	wantBytes, wantReason := (4*capacity>>20)<<20, corev1.PodReasonInfeasible
	resize := func(bytes int64) (string, error) {
		patch := `{"spec":{"containers":[{"name":"service","resources":{"requests":{"memory":"` + strconv.FormatInt(bytes, 10) + `"}}}]}}`
		_, stderr, err := g.c.run("patch", "pod", "-n", faultsNS, "resizer", "--subresource", "resize", "--type", "strategic", "-p", patch)
		return stderr, err
	}
	stderr, err := resize(wantBytes)
	if err != nil && strings.Contains(err.Error(), "allocatable") {
		t.Logf("the API server refuses a resize beyond the node (%v): resizing to its allocatable memory instead", err)
		wantBytes, wantReason = n.Status.Allocatable.Memory().Value(), corev1.PodReasonDeferred
		stderr, err = resize(wantBytes)
	}
	if err != nil {
		t.Fatal(err)
	} else if stderr != "" {
		t.Logf("kubectl patch --subresource resize: %s", stderr)
	}
	want := strconv.FormatInt(wantBytes, 10)
	var cond corev1.PodCondition
	var now *corev1.Pod
	err = poll(2*time.Minute, "the kubelet marking the resize "+wantReason, func() (bool, error) {
		q, err := g.c.cs.CoreV1().Pods(faultsNS).Get(g.ctx, "resizer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		now = q
		for _, c := range q.Status.Conditions {
			if c.Type == corev1.PodResizePending {
				cond = c
				return c.Reason == wantReason, fmt.Errorf("%s: %s", c.Reason, c.Message)
			}
		}
		return false, fmt.Errorf("no %s condition; conditions %v", corev1.PodResizePending, q.Status.Conditions)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node capacity %d; resize to a request of %s: %s %s: %s", capacity, want, cond.Type, cond.Reason, cond.Message)
	cs := now.Status.ContainerStatuses[0]
	alloc := cs.AllocatedResources[corev1.ResourceMemory]
	spec := now.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]
	if alloc.Value() != 64<<20 || spec.Value() != wantBytes {
		t.Errorf("allocatedResources memory %s and spec %s, want 64Mi allocated and %s desired", alloc.String(), spec.String(), want)
	}
	// Two intervals and then some: the status change itself is an event.
	diff, samples := watchValues(before, 25*time.Second)
	if len(diff) > 0 {
		t.Errorf("values changed after the %s resize: %s", wantReason, strings.Join(diff, "; "))
	}
	if v := num(readValue(t, dir, "memory.low")); v != podLow {
		t.Errorf("pod memory.low %d after the %s resize, was %d", v, wantReason, podLow)
	}
	// What the agent computes now is the allocated request's.
	rep := g.dryRun(t)
	planned := false
	for _, v := range rep.Values {
		if v.Dir == dir && v.File == "memory.low" {
			planned = true
			if v.Value != podLow {
				t.Errorf("the agent now computes pod memory.low %d (%s), was %d for the allocated 64Mi", v.Value, v.Reason, podLow)
			}
		}
	}
	if !planned {
		t.Errorf("the agent computes no memory.low for %s", dir)
	}
	t.Logf("after the %s resize (%d samples over 25s): pod memory.low %d, memory.min %d, container memory.low %d, unchanged; no value under kubepods changed (%d values)",
		wantReason, samples, podLow, podMin, ctrLow, len(before))
}

// forgedMirror creates pods that claim the service pod's cgroup through a
// forged kubernetes.io/config.mirror annotation, with a large request:
// first with the annotation alone, then also with a controller reference to
// the Node (which anyone who may create pods can write too). Neither may
// change what the service pod has, and the second is reported as a
// conflict.
func (g *guestRun) forgedMirror(t *testing.T) {
	if g.svc == nil {
		t.Fatal("no service pod")
	}
	g.faultNamespace(t)
	victim, err := g.c.cs.CoreV1().Pods("shop").Get(g.ctx, g.svc.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := podCgroup(victim, string(victim.UID))
	ctr := containerCgroup(victim, dir)
	if num(readValue(t, dir, "memory.low")) <= 0 {
		t.Fatalf("precondition: the victim %s has no memory.low", dir)
	}
	node, err := g.c.cs.CoreV1().Nodes().Get(g.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forge := func(name string, owned bool) *corev1.Pod {
		p := plainPod(name, "2Gi", map[string]string{memqos.AnnotationMirror: string(victim.UID), memqos.AnnotationMemoryQOS: `{"policy":"auto"}`})
		// Bound to this node directly, and held in the API by a finalizer:
		// the kubelet takes it for a mirror pod without a static pod and
		// deletes it within seconds, which would race the agent's pass.
		p.Spec.NodeName = nodeName
		p.Finalizers = []string{"gofit.dev/e2e-hold"}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: node.UID, Controller: ptr(true)}}
		}
		return p
	}
	release := func(name string) {
		g.c.cs.CoreV1().Pods(faultsNS).Patch(g.ctx, name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
		g.deletePods(t, faultsNS, name)
	}
	defer func() {
		for _, n := range []string{"forged-annotation", "forged-owned"} {
			g.c.cs.CoreV1().Pods(faultsNS).Patch(g.ctx, n, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{})
			g.c.cs.CoreV1().Pods(faultsNS).Delete(g.ctx, n, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		}
	}()
	agent := g.agentPod(t, "", time.Minute)
	for _, tc := range []struct {
		name  string
		owned bool
	}{{"forged-annotation", false}, {"forged-owned", true}} {
		err := poll(time.Minute, "no writes pending for the agent", func() (bool, error) {
			ch := g.dryRun(t).Apply.Changed
			return len(ch) == 0, fmt.Errorf("%d pending", len(ch))
		})
		if err != nil {
			t.Log(err)
		}
		before := memValues()
		vals := fmt.Sprintf("pod memory.min %d, memory.low %d; container memory.low %d, memory.high %d",
			num(readValue(t, dir, "memory.min")), num(readValue(t, dir, "memory.low")), num(readValue(t, ctr, "memory.low")), num(readValue(t, ctr, "memory.high")))
		f, err := g.c.cs.CoreV1().Pods(faultsNS).Create(g.ctx, forge(tc.name, tc.owned), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// Two agent intervals with the forged pod in the API; the
		// conflict gauge is scraped meanwhile.
		maxConflicts := 0.0
		var mu sync.Mutex
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
				if code, body, err := g.agentHTTP(t, agent, "/metrics"); err == nil && code == 200 {
					for _, l := range strings.Split(body, "\n") {
						if v, ok := strings.CutPrefix(l, "gofit_node_cgroup_conflicts "); ok {
							x, _ := strconv.ParseFloat(v, 64)
							mu.Lock()
							maxConflicts = max(maxConflicts, x)
							mu.Unlock()
						}
					}
				}
			}
		}()
		diff, samples := watchValues(before, 25*time.Second)
		close(stop)
		<-done
		// The victim's own values stay, and so does what covers them:
		// memory.min/low of its QoS level and kubepods may grow (the
		// forged pod, pending, counts with its own request under its own
		// UID) but never shrink.
		var hurt []string
		vrel := strings.TrimPrefix(dir, "/sys/fs/cgroup/") + "/"
		for _, d := range diff {
			path, vals, _ := strings.Cut(d, " ")
			from, to, _ := strings.Cut(vals, "→")
			a, _ := strconv.ParseInt(from, 10, 64)
			b, _ := strconv.ParseInt(to, 10, 64)
			lvl := filepath.Dir(path)
			switch {
			case strings.HasPrefix(path, vrel):
				hurt = append(hurt, d)
			case (lvl == "kubepods" || lvl == filepath.Dir(strings.TrimSuffix(vrel, "/"))) && !strings.HasSuffix(path, "memory.high") && b < a:
				hurt = append(hurt, d)
			}
		}
		if len(hurt) > 0 {
			t.Errorf("%s: a pod forging the service pod's UID in %s changed the service pod's protection: %s", tc.name, memqos.AnnotationMirror, strings.Join(hurt, "; "))
		}
		live, _ := g.c.cs.CoreV1().Pods(faultsNS).Get(g.ctx, tc.name, metav1.GetOptions{})
		deleting := live != nil && live.DeletionTimestamp != nil
		logs, _, _ := g.c.run("logs", "-n", "gofit-node", agent.Name, "--since=40s")
		logged := ""
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "mapping to one cgroup") && strings.Contains(l, faultsNS+"/"+tc.name) {
				logged = l
			}
		}
		t.Logf("%s (uid %s, 2Gi request, claims %s): %d samples over 25s; victim before: %s; changes under kubepods: %v; conflict gauge max %v; the kubelet deleting it as an orphaned mirror pod: %v; agent log: %q",
			tc.name, f.UID, victim.UID, samples, vals, diff, maxConflicts, deleting, logged)
		if tc.owned {
			if maxConflicts < 1 || logged == "" {
				t.Errorf("%s: the conflict was not reported: gofit_node_cgroup_conflicts max %v, log line %q", tc.name, maxConflicts, logged)
			}
		} else if maxConflicts != 0 {
			t.Errorf("%s: an untrusted mirror annotation counted as a conflict (%v): it should be ignored", tc.name, maxConflicts)
		}
		release(tc.name)
	}
}

// webhookFailover creates pods in bursts while one of the webhook's three
// replicas is killed, once by deleting its pod with grace 0 and once by
// SIGKILL to its process, and counts the pods the webhook did not mutate
// (admitted unfitted: failed open).
func (g *guestRun) webhookFailover(t *testing.T) {
	type result struct {
		name    string
		at      time.Duration // since the burst started
		err     error
		mutated bool
	}
	spec := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"gofit.dev/e2e": "failover"}}, Spec: corev1.PodSpec{
			// Never scheduled: only admission is under test, and twenty
			// containers would load the node for nothing.
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "gofit.dev/e2e-hold"}},
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: serviceImage, Resources: corev1.ResourceRequirements{Limits: resources("500m", "128Mi")},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	}
	defer func() {
		g.c.cs.CoreV1().Pods("shop").DeleteCollection(g.ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{LabelSelector: "gofit.dev/e2e=failover"})
	}()
	const burst, killAfter, workers = 20, 5, 4
	for _, round := range []string{"delete-grace-0", "sigkill"} {
		pods := g.waitDeployment(t, "gofit-system", "gofit-webhook", 3, 10*time.Minute)
		// All three answer: a dry run is injected.
		err := poll(3*time.Minute, "the webhook injecting into a dry-run pod", func() (bool, error) {
			p, err := g.c.cs.CoreV1().Pods("shop").Create(g.ctx, spec("dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, err
			}
			return envOf(p.Spec.Containers[0])["GOMAXPROCS"] != "", fmt.Errorf("env %v", p.Spec.Containers[0].Env)
		})
		if err != nil {
			t.Fatal(err)
		}
		victim := pods[0]
		var killAt time.Duration
		var killErr error
		var mu sync.Mutex
		var results []result
		var created atomic.Int32
		next := make(chan int, burst)
		for i := 0; i < burst; i++ {
			next <- i
		}
		close(next)
		killed := make(chan struct{})
		mark := markLogs(g.c.paths.control)
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					name := fmt.Sprintf("failover-%s-%02d", round, i)
					if i >= killAfter {
						<-killed
					}
					p, err := g.c.cs.CoreV1().Pods("shop").Create(g.ctx, spec(name), metav1.CreateOptions{})
					r := result{name: name, at: time.Since(start), err: err}
					if err == nil {
						_, ann := p.Annotations[podplan.Annotation]
						r.mutated = envOf(p.Spec.Containers[0])["GOMAXPROCS"] != "" && ann
					}
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
					if created.Add(1) == killAfter {
						killAt = time.Since(start)
						killErr = g.killReplica(victim, round)
						close(killed)
					}
				}
			}()
		}
		wg.Wait()
		if killErr != nil {
			t.Fatalf("%s: killing %s: %v", round, victim.Name, killErr)
		}
		sort.Slice(results, func(i, j int) bool { return results[i].at < results[j].at })
		var ok, open, failed int
		var timeline []string
		for _, r := range results {
			mark := "mutated"
			switch {
			case r.err != nil:
				failed++
				mark = "error: " + r.err.Error()
			case r.mutated:
				ok++
			default:
				open++
				mark = "NOT MUTATED"
			}
			timeline = append(timeline, fmt.Sprintf("%+.2fs %s", (r.at-killAt).Seconds(), mark))
		}
		t.Logf("%s: %s killed %.2fs into the burst; %d pods created in %.2fs: %d mutated, %d admitted unmutated (failed open), %d errors; relative to the kill: %s",
			round, victim.Name, killAt.Seconds(), len(results), results[len(results)-1].at.Seconds(), ok, open, failed, strings.Join(timeline, ", "))
		// Why each call failed open, from the API server's own log (the
		// host's, shared live): a call to the lost replica's address, or
		// one refused or reset, is a lost admission; one that outlasted
		// the webhook's timeout on a live replica is slow, not lost.
		apiLog, err := mark.since(g.c.paths.control)
		if err != nil {
			t.Fatalf("%s: the API server's log: %v", round, err)
		}
		var slow, lost []string
		for _, f := range parseFailOpen(apiLog, victim.Status.PodIP) {
			if f.Slow {
				slow = append(slow, f.Reason)
			} else {
				lost = append(lost, f.Reason)
			}
		}
		t.Logf("%s: the API server failed open %d calls: %d slow (timeouts), %d lost: %q", round, len(slow)+len(lost), len(slow), len(lost), append(slow, lost...))
		switch {
		case failed > 0:
			t.Errorf("%s: %d creations failed: the webhook must fail open, never block", round, failed)
		case round == "sigkill":
			// A crashed replica stays an endpoint until the kubelet sees
			// its container die; the API server's calls to it are refused
			// and fail open (failurePolicy Ignore) rather than go to another
			// endpoint. Before the kill every pod is mutated.
			for _, r := range results {
				if r.at < killAt && !r.mutated {
					t.Errorf("%s: %s, created before the kill, not mutated", round, r.name)
				}
			}
			t.Logf("%s: %d pods failed open while the killed replica was still an endpoint", round, open)
			// Recovered means the kubelet saw the kill: the container
			// restarted (or the pod was replaced). Until then the pod
			// still reads Ready, and the Deployment 3 of 3.
			var restarts int32
			if len(victim.Status.ContainerStatuses) > 0 {
				restarts = victim.Status.ContainerStatuses[0].RestartCount
			}
			err := poll(5*time.Minute, "the kubelet restarting "+victim.Name, func() (bool, error) {
				p, err := g.c.cs.CoreV1().Pods(victim.Namespace).Get(g.ctx, victim.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return true, nil
				}
				if err != nil || len(p.Status.ContainerStatuses) == 0 {
					return false, err
				}
				cs := p.Status.ContainerStatuses[0]
				return cs.RestartCount > restarts && cs.Ready, fmt.Errorf("restarts %d, ready %v", cs.RestartCount, cs.Ready)
			})
			if err != nil {
				t.Fatal(err)
			}
		case len(lost) > 0:
			t.Errorf("%s: %d of %d pods mutated; the API server lost %d admissions to the deleted replica: %q", round, ok, burst, len(lost), lost)
		case open > len(slow):
			t.Errorf("%s: %d of %d pods mutated, %d failed open, and the API server's log explains only %d as timeouts: a deleted replica must lose no admission", round, ok, burst, open, len(slow))
		case open > 0:
			t.Logf("%s: %d pods failed open on calls that outlasted the webhook's timeout, none lost: slow, not a failover's loss", round, open)
		}
	}
	pods := g.waitDeployment(t, "gofit-system", "gofit-webhook", 3, 10*time.Minute)
	t.Logf("webhook back at 3 ready: %s", podSummary(pods))
	// Recovered: every creation is mutated again.
	for i := 0; i < 8; i++ {
		name := fmt.Sprintf("failover-after-%d", i)
		p, err := g.c.cs.CoreV1().Pods("shop").Create(g.ctx, spec(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, ann := p.Annotations[podplan.Annotation]; !ann || envOf(p.Spec.Containers[0])["GOMAXPROCS"] == "" {
			t.Errorf("%s, created after the webhook recovered: not mutated", name)
		}
	}
}

// killReplica ends one webhook replica: its pod deleted with grace 0, or
// its process killed (SIGKILL to every process in its container's cgroup,
// as the OOM killer or a crash would).
func (g *guestRun) killReplica(p corev1.Pod, how string) error {
	if how == "delete-grace-0" {
		return g.c.cs.CoreV1().Pods(p.Namespace).Delete(g.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return fmt.Errorf("no container status")
	}
	procs := filepath.Join(containerCgroup(&p, podCgroup(&p, string(p.UID))), "cgroup.procs")
	b, err := os.ReadFile(procs)
	if err != nil {
		return err
	}
	n := 0
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		if pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("no process killed in %s (%q)", procs, b)
	}
	return nil
}

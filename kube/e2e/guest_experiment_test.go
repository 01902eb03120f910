package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/tools/promtest"
)

// prometheusDir is the host's directory holding Debian's prometheus
// binary (tools/promtest installs and caches it), shared into the guest
// as /mnt/prometheus for the experiment step.
func prometheusDir(t *testing.T) string {
	t.Helper()
	b, err := promtest.Install()
	if err != nil {
		t.Fatalf("prometheus for the guest's experiment step: %v", err)
	}
	return filepath.Dir(b.Prometheus)
}

// The experiment step's shape: testdata/experiment.yaml's Deployment and
// its spec, the load and Prometheus's pace. Under TCG only function is
// asserted, never figures.
const (
	expName     = "gomaxprocs"
	expDeploy   = "experiment"
	expScrape   = 5 * time.Second
	expWindow   = 15 * time.Second
	expSpan     = 2 * time.Minute // 8 windows: the fewest the report bounds an interval with
	expLoadRate = "20"            // requests/s over the 4 pods
)

// experiment runs an experiment on live traffic as docs/experiment.md
// tells a user to: the webhook with the experiments component, a
// Deployment of examples/service with 4 replicas and 2 arms, a load
// generator pod (`gofit experiment load`) and Prometheus scraping the pods
// and the kubelet's cAdvisor; then `gofit experiment report` must name
// both arms with their pods and data. Deleting the Deployment must take
// the experiment's Lease with it (the garbage collector, through the
// Lease's owners).
func (g *guestRun) experiment(t *testing.T) {
	c := g.c
	step := time.Now()
	phase := func(what string, since time.Time) {
		t.Logf("experiment: %s in %.1fs", what, time.Since(since).Seconds())
	}

	// The webhook with experiments on: the component on the same overlay.
	t0 := time.Now()
	g.experimentsOn(t)
	phase("webhook rolled out with --experiments", t0)

	// The workload: 4 replicas, 2 arms.
	t0 = time.Now()
	err := poll(3*time.Minute, "kubectl apply -f testdata/experiment.yaml", func() (bool, error) {
		_, _, err := c.run("apply", "-f", "/src/kube/e2e/testdata/experiment.yaml")
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Waited for: the next step (restart-cm-fails) watches every value
		// under kubepods, and pods still leaving would move their levels.
		c.run("delete", "-f", "/src/kube/e2e/testdata/experiment.yaml", "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=5m")
		c.run("delete", "pod", "-n", "shop", "experiment-load", "--ignore-not-found", "--wait=false")
	})
	pods := g.armedPods(t, "shop", expDeploy, 4)
	phase("4 replicas ready, each with its arm", t0)
	byArm := map[string][]string{}
	var targets []promtest.Target
	var urls []string
	for _, p := range pods {
		arm := p.Labels["gofit.dev/arm"]
		env := envOf(p.Spec.Containers[0])
		t.Logf("pod %s: labels %v, env %v", p.Name, p.Labels, env)
		if p.Labels["gofit.dev/experiment"] != expName {
			t.Errorf("pod %s: label gofit.dev/experiment %q, want %s (no arm: see the ReplicaSet's events for the webhook's warning)", p.Name, p.Labels["gofit.dev/experiment"], expName)
		}
		switch arm {
		case "fitted":
			if env["GOFIT_RUN"] == "" || env["GOMAXPROCS"] == "" {
				t.Errorf("pod %s of arm fitted: env %v, want gofit's fit with its GOFIT_RUN marker", p.Name, env)
			}
		case "go-default":
			if env["GOFIT"] != "off" || env["GOMAXPROCS"] != "" || env["GOMEMLIMIT"] != "" {
				t.Errorf("pod %s of arm go-default: env %v, want GOFIT=off and no Go variables", p.Name, env)
			}
		default:
			t.Errorf("pod %s: arm %q, want fitted or go-default", p.Name, arm)
		}
		byArm[arm] = append(byArm[arm], p.Name)
		urls = append(urls, fmt.Sprintf("http://%s:8080/work?n=200", p.Status.PodIP))
		targets = append(targets, promtest.Target{Job: "service", Addr: p.Status.PodIP + ":8080",
			Labels: map[string]string{"namespace": p.Namespace, "pod": p.Name, "container": "service"}})
	}
	if len(byArm["fitted"]) != 2 || len(byArm["go-default"]) != 2 {
		g.describe(t, "shop")
		t.Fatalf("pods by arm %v: want 2 and 2", byArm)
	}
	// The Lease the assignments went through is owned by the ReplicaSet.
	lease, err := c.cs.CoordinationV1().Leases("shop").Get(g.ctx, admission.ExperimentLease(expName, "Deployment/"+expDeploy), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the experiment's Lease: %v", err)
	}
	if owner := metav1.GetControllerOfNoCopy(&pods[0]); owner == nil || len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != owner.UID {
		t.Errorf("lease owners %+v, want the pods' ReplicaSet %+v", lease.OwnerReferences, owner)
	}

	// Prometheus in the guest: the pods with their namespace and pod
	// labels (as a PodMonitor gives them), and the kubelet's cAdvisor,
	// whose series carry their own.
	t0 = time.Now()
	targets = append(targets, promtest.Target{Job: "cadvisor", Addr: nodeIP + ":10250", Path: "/metrics/cadvisor", HTTPS: true, Interval: cadvisorScrape})
	prom := promtest.Start(t, promtest.Binaries{Prometheus: "/mnt/prometheus/prometheus"}, promtest.Config{Interval: expScrape, Targets: targets, Ready: 5 * time.Minute})
	phase("prometheus ready at "+prom.URL, t0)

	// The load generator: the gofit image's `gofit experiment load` in a
	// pod, spreading the requests over the 4 pods by address (the node has
	// no ClusterIP routing).
	t0 = time.Now()
	loadPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "experiment-load", Namespace: "shop"}, Spec: corev1.PodSpec{
		RestartPolicy:   corev1.RestartPolicyNever,
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "load", Image: gofitImage,
			Args:            append([]string{"experiment", "load", "--rps", expLoadRate, "--every", "30s"}, urls...),
			Resources:       corev1.ResourceRequirements{Limits: resources("500m", "64Mi"), Requests: resources("50m", "32Mi")},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	if _, err := c.cs.CoreV1().Pods("shop").Create(g.ctx, loadPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Load is flowing once Prometheus has seen requests at every pod.
	err = poll(4*time.Minute, "requests at every pod in Prometheus", func() (bool, error) {
		p, err := c.cs.CoreV1().Pods("shop").Get(g.ctx, "experiment-load", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("%w: the load pod ended: %s", errGaveUp, podSummary([]corev1.Pod{*p}))
		}
		ss, err := prom.Query(g.ctx, `sum by (pod) (http_request_duration_seconds_count{namespace="shop", handler="/work"}) > 0`)
		if err != nil {
			return false, err
		}
		return len(ss) == 4, fmt.Errorf("%d pods with requests; load pod %s", len(ss), podSummary([]corev1.Pod{*p}))
	})
	if err != nil {
		g.describe(t, "shop")
		t.Fatal(err)
	}
	loaded := time.Now()
	phase("load reaching all 4 pods", t0)
	// The span to report on: whole windows, all of them under load (the
	// first window's increase looks one window back).
	time.Sleep(expSpan + expWindow + 2*expScrape)
	if out, _, err := c.run("logs", "-n", "shop", "experiment-load"); err == nil {
		t.Logf("gofit experiment load:\n%s", out)
	}
	health, err := prom.TargetHealth(g.ctx)
	if err != nil {
		t.Error(err)
	}
	t.Logf("prometheus targets: %v", health)

	// The report, as a user runs it.
	t0 = time.Now()
	outDir := filepath.Join(g.tmp, "experiment-report")
	cmd := exec.Command(filepath.Join(c.paths.images, "gofit"), "experiment", "report", "--prometheus", prom.URL,
		"--namespace", "shop", "--name", expName, "--since", expSpan.String(), "--window", expWindow.String(),
		"--kubeconfig", filepath.Join(c.dir, "admin.kubeconfig"), "--out", outDir, "--resamples", "200")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("gofit experiment report (%.1fs after the load reached every pod, %.1fs to run): %v\n%s", t0.Sub(loaded).Seconds(), time.Since(t0).Seconds(), err, stdout.String())
	if err != nil {
		t.Fatalf("gofit experiment report: %v: %s", err, tailLines(stderr.String(), 20))
	}
	b, err := os.ReadFile(filepath.Join(outDir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outDir, "report.html")); err != nil {
		t.Error(err)
	}
	var res struct {
		Experiment string            `json:"experiment"`
		Control    string            `json:"control"`
		Windows    int               `json:"windows"`
		Sources    map[string]string `json:"sources"`
		Notes      []string          `json:"notes"`
		Arms       []struct {
			Name    string   `json:"name"`
			Pods    []string `json:"pods"`
			Windows int      `json:"windows"`
			Metrics map[string]struct {
				Value *float64 `json:"value"`
			} `json:"metrics"`
		} `json:"arms"`
		Verdicts []struct {
			Arm, Metric, Verdict string
		} `json:"verdicts"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	t.Logf("results.json: experiment %s, control %s, %d windows, sources %v, notes %q", res.Experiment, res.Control, res.Windows, res.Sources, res.Notes)
	if res.Experiment != expName || res.Control != "fitted" {
		t.Errorf("results.json: experiment %q, control %q; want %s, fitted", res.Experiment, res.Control, expName)
	}
	var names []string
	for _, a := range res.Arms {
		names = append(names, a.Name)
		want := slices.Clone(byArm[a.Name])
		sort.Strings(want)
		got := slices.Clone(a.Pods)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("arm %s: pods %v, want %v (the API server's)", a.Name, a.Pods, want)
		}
		var figures []string
		for _, m := range []string{"requests_per_second", "p99_seconds", "cpu_seconds_per_request"} {
			v := a.Metrics[m].Value
			if v == nil || !(*v > 0) {
				t.Errorf("arm %s: %s %v, want a figure above 0", a.Name, m, v)
				continue
			}
			figures = append(figures, fmt.Sprintf("%s %.4g", m, *v))
		}
		if a.Windows == 0 {
			t.Errorf("arm %s: no window with data", a.Name)
		}
		t.Logf("arm %s: pods %v, %d windows with data, %s", a.Name, a.Pods, a.Windows, strings.Join(figures, ", "))
	}
	if !slices.Equal(names, []string{"fitted", "go-default"}) {
		t.Errorf("results.json arms %v, want [fitted go-default]", names)
	}
	// The report takes the first CPU source with data for every arm in
	// every window, in the documented order. cAdvisor is first but its
	// housekeeping (about 10 s, slower under TCG) can leave a 15 s window
	// of one pod empty: one run of this step fell back to
	// process_cpu_seconds_total. Either is right; anything else is not.
	switch cpu := res.Sources["cpu"]; {
	case strings.HasPrefix(cpu, "container_cpu_usage_seconds_total (cAdvisor)"),
		strings.HasPrefix(cpu, "gofit_cpu_usage_seconds_total"),
		strings.HasPrefix(cpu, "process_cpu_seconds_total"):
		t.Logf("CPU from %s (cAdvisor scraped at %s)", cpu, nodeIP)
	default:
		t.Errorf("CPU from %q, want one of the documented sources", cpu)
	}
	judged := 0
	for _, v := range res.Verdicts {
		if v.Arm == "go-default" {
			judged++
		}
	}
	if judged == 0 {
		t.Errorf("no verdict on go-default against fitted: %+v", res.Verdicts)
	}
	phase("report", t0)

	// The experiment ends with its workload, and so does its Lease.
	t0 = time.Now()
	if err := c.cs.CoreV1().Pods("shop").Delete(g.ctx, "experiment-load", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
	if err := c.cs.AppsV1().Deployments("shop").Delete(g.ctx, expDeploy, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = poll(3*time.Minute, "the garbage collector deleting the experiment's Lease", func() (bool, error) {
		_, err := c.cs.CoordinationV1().Leases("shop").Get(g.ctx, admission.ExperimentLease(expName, "Deployment/"+expDeploy), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("still there (%v)", err)
	})
	if err != nil {
		t.Error(err)
	}
	phase("lease gone after the Deployment", t0)
	phase("the whole step", step)
}

// experimentsOn installs the webhook with the experiments component (once
// per boot), as docs/experiment.md tells a user to, and waits until every
// replica runs with --experiments. The experiment and experiment-guard
// steps need it; whichever runs first installs it.
func (g *guestRun) experimentsOn(t *testing.T) {
	t.Helper()
	c := g.c
	if g.experiments {
		return
	}
	// The overlay moves the component's Role into shop: shop first, as
	// the service step makes it (when that did not run).
	if _, stderr, err := c.run("apply", "-f", "/src/kube/e2e/testdata/namespace.yaml"); err != nil {
		t.Fatalf("kubectl apply -f testdata/namespace.yaml: %v: %s", err, stderr)
	}
	dir := filepath.Join(g.tmp, "webhook-experiments")
	os.MkdirAll(dir, 0o755)
	base, _ := filepath.Rel(dir, "/src/deploy/webhook/self-managed")
	comp, _ := filepath.Rel(dir, "/src/deploy/webhook/experiments")
	// The component grants experiments in one namespace (default), as its
	// comment says to change: the overlay moves its Role and RoleBinding to
	// shop and names shop in --experiment-namespaces (the last one wins).
	// One guard replica is enough on one node. The 3 new webhook replicas
	// start together (maxSurge 3): one at a time took 227 s under TCG,
	// and the old ones serve until the new are ready either way.
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
components:
  - %s
images:
  - name: ghcr.io/gofit-dev/gofit
    newTag: e2e
patches:
  - target: {kind: Deployment, name: gofit-webhook}
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --experiment-namespaces=shop
  - target: {kind: Role, name: gofit-webhook-experiments}
    patch: |-
      - op: replace
        path: /metadata/namespace
        value: shop
  - target: {kind: RoleBinding, name: gofit-webhook-experiments}
    patch: |-
      - op: replace
        path: /metadata/namespace
        value: shop
  - target: {kind: Role, name: gofit-experiment-guard}
    patch: |-
      - op: replace
        path: /metadata/namespace
        value: shop
  - target: {kind: RoleBinding, name: gofit-experiment-guard}
    patch: |-
      - op: replace
        path: /metadata/namespace
        value: shop
  - target: {kind: Deployment, name: gofit-experiment-guard}
    patch: |-
      - op: replace
        path: /spec/replicas
        value: 1
      - op: test
        path: /spec/template/spec/containers/0/args/3
        value: --namespaces=default
      - op: replace
        path: /spec/template/spec/containers/0/args/3
        value: --namespaces=shop
  - target: {kind: Deployment, name: gofit-webhook}
    patch: |-
      - op: add
        path: /spec/strategy
        value: {type: RollingUpdate, rollingUpdate: {maxSurge: 3, maxUnavailable: 0}}
`, base, comp)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	// Retried: under TCG on a loaded host the API server can time a TLS
	// handshake out (seen: kubectl's openapi download).
	err := poll(3*time.Minute, "kubectl apply -k (self-managed + experiments)", func() (bool, error) {
		_, stderr, err := c.run("apply", "-k", dir)
		if err == nil && stderr != "" {
			t.Logf("kubectl apply -k (self-managed + experiments): %s", stderr)
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every replica must have --experiments before a pod asks for an arm:
	// a replica without it gives the normal fit and a warning, and the API
	// server can still reach a terminating one (see webhookDown).
	err = poll(8*time.Minute, "every webhook replica started with --experiments", func() (bool, error) {
		l, err := c.cs.CoreV1().Pods("gofit-system").List(g.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gofit-webhook"})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range l.Items {
			if !slices.Contains(p.Spec.Containers[0].Args, "--experiments") {
				return false, fmt.Errorf("pod %s without --experiments; pods: %s", p.Name, podSummary(l.Items))
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Ready && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		return ready == 3 && len(l.Items) == 3, fmt.Errorf("%d of %d ready; pods: %s", ready, len(l.Items), podSummary(l.Items))
	})
	if err != nil {
		g.describe(t, "gofit-system")
		t.Fatal(err)
	}
	// And the API server reaches them: on a fresh install (this step
	// run alone) the caBundle comes after the pods are ready.
	g.webhookInjects(t)
	g.experiments = true
}

// armedPods waits for a Deployment of examples/service under an
// experiment to have n ready pods and returns them, replacing a pod that
// got no arm. An assignment that misses admission.ArmDeadline (1 s)
// gives the pod gofit's normal fit and no arm, by design. Under TCG, pods
// admitted within a second, assigned one at a time per experiment, can
// miss it; and a review that outlasts the webhook's 2 s timeoutSeconds is
// admitted unmutated (failurePolicy Ignore: the webhook-failover step
// counts these). Such a pod is replaced alone, one at a time, up to one
// round a replica; the caller's checks fail the step if one still has
// none.
func (g *guestRun) armedPods(t *testing.T, ns, deploy string, n int) []corev1.Pod {
	t.Helper()
	c := g.c
	pods := g.waitDeployment(t, ns, deploy, int32(n), 6*time.Minute)
	for round := 0; ; round++ {
		var noArm []string
		for _, p := range pods {
			if p.Labels["gofit.dev/experiment"] == "" {
				noArm = append(noArm, p.Name)
				if env := envOf(p.Spec.Containers[0]); env["GOFIT_RUN"] == "" {
					t.Logf("pod %s: no arm and no normal fit: admitted unmutated (the review outlasted the webhook's timeoutSeconds, and it fails open): env %v", p.Name, env)
				}
			}
		}
		if len(noArm) == 0 || round == n {
			return pods
		}
		t.Logf("round %d: pods with no arm (assignment over its deadline), replacing %s of %v", round+1, noArm[0], noArm)
		if _, stderr, err := c.run("delete", "pod", "-n", ns, noArm[0]); err != nil {
			t.Fatalf("delete %s: %v: %s", noArm[0], err, stderr)
		}
		pods = g.waitDeployment(t, ns, deploy, int32(n), 6*time.Minute)
	}
}

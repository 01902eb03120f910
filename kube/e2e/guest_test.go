package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gofit "github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/agent"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// TestGuest runs inside the VM that TestNode boots: it starts the node,
// installs gofit from deploy/ and checks what the issue asks for, one
// subtest per claim. The subtests run in order and build on each other.
func TestGuest(t *testing.T) {
	if !*guest {
		t.Skip("runs inside the VM that TestNode boots (-e2e.guest)")
	}
	var stepsRE *regexp.Regexp
	if *stepsFlag != "" {
		var err error
		if stepsRE, err = regexp.Compile(*stepsFlag); err != nil {
			t.Fatalf("-e2e.steps (GOFIT_E2E_STEPS): %v", err)
		}
	}
	var skipRE *regexp.Regexp
	if *skipFlag != "" {
		var err error
		if skipRE, err = regexp.Compile(*skipFlag); err != nil {
			t.Fatalf("-e2e.skip (GOFIT_E2E_SKIP): %v", err)
		}
	}
	p := guestPaths{node: "/mnt/node", envtest: "/mnt/envtest", images: "/mnt/images", helm: "/mnt/helm", pki: "/mnt/pki", control: "/mnt/control"}
	up, _ := os.ReadFile("/proc/uptime")
	c := startCluster(t, p)
	t.Logf("node Ready %.1fs after the cluster started (guest uptime at start %s)", c.ready.Seconds(), strings.Fields(string(up))[0])
	cur, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	avail, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/available_clocksource")
	t.Logf("guest clocksource %s (available: %s)", strings.TrimSpace(string(cur)), strings.TrimSpace(string(avail)))
	stopCPU := make(chan struct{})
	defer close(stopCPU)
	go sampleCPU(filepath.Join(c.logs, "cpu.log"), 30*time.Second, stopCPU)
	// Who kept the API server busy, for the next look at the guest's CPU
	// (it runs before the cluster stops: cleanups run last first).
	t.Cleanup(func() { c.writeRequestCounts(filepath.Join(c.logs, "apiserver-requests.txt")) })
	ctx := context.Background()
	g := &guestRun{c: c, ctx: ctx, top: t, tmp: t.TempDir(), kubeletMode: agent.KubeletAuto, agentNS: "gofit-node"}

	// Two phases on one boot. Phase 1 runs the kubelet with its MemoryQoS
	// defaults and installs gofit from deploy/; it ends by uninstalling.
	// Phase 2 restarts the kubelet with TieredReservation and installs the
	// Helm chart. Steps are one a line: add new ones to the phase they need
	// (phase 1's before "one-writer" and "uninstall").
	phases := []struct {
		name  string
		steps []guestStep
	}{
		{"defaults", []guestStep{
			{name: "webhook", f: g.webhook},
			{name: "agent", f: g.agent},
			{name: "service", f: g.service},
			{name: "injected", f: g.injected},
			{name: "protected", f: g.protected},
			{name: "fixtures", f: g.fixtures},
			{name: "plan", f: g.plan},
			{name: "resize", f: g.resize},
			{name: "static", f: g.static},
			// lab-pods waits on trial pods' starts, the fleet steps on
			// Prometheus's history: independent namespaces and objects,
			// and the guest mostly idle while each waits (issue 50).
			{name: "lab-pods", f: g.labPods, lane: "lab"},
			{name: "fleet-alerts", f: g.fleetAlerts, lane: "fleet"},
			{name: "fleet", f: g.fleetStep, lane: "fleet"},
			{name: "experiment", f: g.experiment},
			{name: "experiment-guard", f: g.experimentGuard},
			{name: "rightsize", f: g.rightsize},
			{name: "restart-cm-fails", f: g.agentRestartConfigFails},
			{name: "resize-infeasible", f: g.infeasibleResize},
			{name: "forged-mirror", f: g.forgedMirror},
			{name: "webhook-failover", f: g.webhookFailover},
			{name: "webhook-down", f: g.webhookDown},
			{name: "delete", f: g.deleted},
			{name: "one-writer", f: g.oneWriter},
			{name: "uninstall", f: g.uninstall},
		}},
		{"tiered", []guestStep{
			{name: "tiered", f: g.tiered},
			{name: "chart", f: g.chart},
			{name: "one-writer-tiered", f: g.oneWriter},
			{name: "helm-uninstall", f: g.helmUninstall},
			{name: "chart-upgrade", f: g.chartUpgrade},
		}},
	}
	for _, ph := range phases {
		t.Logf("phase %s", ph.name)
		var steps []guestStep
		for _, s := range ph.steps {
			if stepsRE != nil && !stepsRE.MatchString(s.name) {
				continue
			}
			if skipRE != nil && skipRE.MatchString(s.name) {
				t.Logf("%s: LEFT OUT (-e2e.skip %q)", s.name, *skipFlag)
				continue
			}
			steps = append(steps, s)
		}
		for _, group := range groups(steps) {
			runLanes(t, group)
		}
	}
}

// groups splits steps, in order, into what runs at once: a run of
// consecutive steps with a lane is one group, and each step without one
// is a group of its own. A group is its lanes, each lane its steps in
// order.
func groups(steps []guestStep) [][][]guestStep {
	var out [][][]guestStep
	for i, s := range steps {
		if s.lane == "" || i == 0 || steps[i-1].lane == "" {
			out = append(out, nil)
		}
		g := out[len(out)-1]
		k := slices.IndexFunc(g, func(l []guestStep) bool { return l[0].lane == s.lane })
		if k < 0 {
			g, k = append(g, nil), len(g)
		}
		g[k] = append(g[k], s)
		out[len(out)-1] = g
	}
	return out
}

// runLanes runs a group's lanes at once, each its steps in order, every
// step a subtest of t named as the step (t.Run may be called from several
// goroutines at once).
func runLanes(t *testing.T, lanes [][]guestStep) {
	var names []string
	for _, l := range lanes {
		for _, s := range l {
			names = append(names, s.name)
		}
	}
	if len(lanes) > 1 {
		t.Logf("beside each other: %s", strings.Join(names, ", "))
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Go(func() {
			for _, s := range l {
				t1 := time.Now()
				ok := t.Run(s.name, s.f)
				t.Logf("%s: %v in %.1fs", s.name, map[bool]string{true: "ok", false: "FAILED"}[ok], time.Since(t1).Seconds())
			}
		})
	}
	wg.Wait()
	if len(lanes) > 1 {
		t.Logf("%s: together %.1fs", strings.Join(names, ", "), time.Since(t0).Seconds())
	}
}

// guestStep is one subtest of TestGuest; later steps may use what earlier
// ones set up (so narrowing with -e2e.steps must keep those).
type guestStep struct {
	name string
	f    func(t *testing.T)
	// lane, when set, runs the step beside the steps next to it in the
	// list that have other lanes; steps of one lane run in order (the
	// fleet step reads what fleet-alerts started).
	lane string
}

type guestRun struct {
	c   *cluster
	ctx context.Context
	// top is TestGuest's own T: what outlives one step (kube-state-
	// metrics, the fleet steps' Prometheus and load) ends with it.
	top *testing.T
	tmp string
	// Set by the steps, for the ones after them.
	svc        *corev1.Pod
	svcIP      string
	env        map[string]string
	staticHash string
	// kubeletMode is what the kubelet's MemoryQoS does in this phase, as
	// the agent's --kubelet-memory-qos names it; agentNS the agent's
	// namespace.
	kubeletMode string
	agentNS     string
	ksmUp       bool
	experiments bool
	fleet       *fleetRun
}

// overlay writes a kustomization that only swaps the image: how a user
// installs a released base with their own registry's copy.
func (g *guestRun) overlay(t *testing.T, name, base string) string {
	t.Helper()
	dir := filepath.Join(g.tmp, name)
	os.MkdirAll(dir, 0o755)
	// kustomize takes a base by relative path only.
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: ghcr.io/gofit-dev/gofit
    newTag: e2e
`, rel)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (g *guestRun) webhook(t *testing.T) {
	c := g.c
	if _, stderr, err := c.run("apply", "-k", g.overlay(t, "webhook", "/src/deploy/webhook/self-managed")); err != nil {
		t.Fatal(err)
	} else if stderr != "" {
		t.Logf("kubectl apply -k deploy/webhook/self-managed: %s", stderr)
	}
	ns, err := c.cs.CoreV1().Namespaces().Get(g.ctx, "gofit-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("gofit-system enforces %q, want restricted", got)
	}
	pods := g.waitDeployment(t, "gofit-system", "gofit-webhook", 3, 10*time.Minute)
	for _, p := range pods {
		if p.Spec.NodeName != nodeName {
			t.Errorf("webhook pod %s on %q, want %s (the anti-affinity is only preferred)", p.Name, p.Spec.NodeName, nodeName)
		}
		ct := p.Spec.Containers[0]
		if ct.StartupProbe == nil || ct.ReadinessProbe == nil || ct.LivenessProbe == nil {
			t.Errorf("webhook pod %s: startup, readiness and liveness probes expected", p.Name)
		}
		if st := p.Status.ContainerStatuses; len(st) != 1 || st[0].RestartCount != 0 || !st[0].Ready {
			t.Errorf("webhook pod %s: container status %+v, want ready without restarts", p.Name, st)
		}
		if ct.Image != gofitImage {
			t.Errorf("webhook image %s, want %s (the overlay's override)", ct.Image, gofitImage)
		}
	}
	// minAvailable 1 of the 3 replicas: two may be disrupted at once.
	err = poll(time.Minute, "PDB gofit-webhook with 3 healthy", func() (bool, error) {
		pdb, err := c.cs.PolicyV1().PodDisruptionBudgets("gofit-system").Get(g.ctx, "gofit-webhook", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pdb.Status.CurrentHealthy == 3 && pdb.Status.DisruptionsAllowed == 2,
			fmt.Errorf("healthy %d, disruptions allowed %d", pdb.Status.CurrentHealthy, pdb.Status.DisruptionsAllowed)
	})
	if err != nil {
		t.Error(err)
	}
	mwc, err := c.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(g.ctx, "gofit-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(mwc.Webhooks) == 0 || len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Error("the webhook configuration has no caBundle: the rotator did not inject its CA")
	}
	sa := "system:serviceaccount:gofit-system:gofit-webhook"
	g.can(t, sa, true, authzv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "gofit-webhook", Verb: "update"})
	g.can(t, sa, false, authzv1.ResourceAttributes{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "other", Verb: "update"})
	g.can(t, sa, true, authzv1.ResourceAttributes{Namespace: "gofit-system", Resource: "secrets", Name: "gofit-webhook-tls", Verb: "update"})
	g.can(t, sa, false, authzv1.ResourceAttributes{Namespace: "kube-system", Resource: "secrets", Verb: "get"})
	g.can(t, sa, false, authzv1.ResourceAttributes{Namespace: "shop", Resource: "pods", Verb: "create"})
}

// can checks one RBAC decision for a user through a SubjectAccessReview.
func (g *guestRun) can(t *testing.T, user string, want bool, ra authzv1.ResourceAttributes) {
	t.Helper()
	sar, err := g.c.cs.AuthorizationV1().SubjectAccessReviews().Create(g.ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + strings.Split(user, ":")[2]}, ResourceAttributes: &ra}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sar.Status.Allowed != want {
		t.Errorf("RBAC: %s %s %s/%s %q: allowed=%v, want %v", user, ra.Verb, ra.Namespace, ra.Resource, ra.Name, sar.Status.Allowed, want)
	}
}

// waitDeployment waits until a Deployment has n ready replicas and
// returns its pods.
func (g *guestRun) waitDeployment(t *testing.T, ns, name string, n int32, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := poll(timeout, fmt.Sprintf("deployment %s/%s with %d ready", ns, name, n), func() (bool, error) {
		d, err := g.c.cs.AppsV1().Deployments(ns).Get(g.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		sel := metav1.FormatLabelSelector(d.Spec.Selector)
		list, err := g.c.cs.CoreV1().Pods(ns).List(g.ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		pods = nil
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		// The status must be of the current spec: right after a patch
		// it still describes the old rollout, complete.
		return d.Status.ObservedGeneration >= d.Generation && d.Status.ReadyReplicas == n && d.Status.UpdatedReplicas == n && int32(len(pods)) == n,
			fmt.Errorf("ready %d of %d (generation %d observed %d); pods: %s", d.Status.ReadyReplicas, n, d.Generation, d.Status.ObservedGeneration, podSummary(pods))
	})
	if err != nil {
		g.describe(t, ns)
		t.Fatal(err)
	}
	return pods
}

func podSummary(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		st := string(p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				st += " " + w.Reason + ": " + w.Message
			}
			if cs.RestartCount > 0 {
				st += fmt.Sprintf(" restarts=%d", cs.RestartCount)
			}
		}
		s = append(s, p.Name+" "+st)
	}
	return strings.Join(s, "; ")
}

// describe logs the namespace's pods and events: why something is not up.
func (g *guestRun) describe(t *testing.T, ns string) {
	out, _, _ := g.c.run("get", "pods,events", "-n", ns, "-o", "wide")
	t.Logf("kubectl get pods,events -n %s:\n%s", ns, out)
	for _, f := range []string{"/var/log/pods"} {
		filepath.WalkDir(f, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.Contains(p, ns+"_") {
				b, _ := os.ReadFile(p)
				t.Logf("%s:\n%s", p, tailLines(string(b), 15))
			}
			return nil
		})
	}
}

func (g *guestRun) agent(t *testing.T) {
	c := g.c
	if _, stderr, err := c.run("apply", "-k", g.overlay(t, "node", "/src/deploy/node")); err != nil {
		t.Fatal(err)
	} else if stderr != "" {
		t.Logf("kubectl apply -k deploy/node: %s", stderr)
	}
	ns, err := c.cs.CoreV1().Namespaces().Get(g.ctx, "gofit-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("gofit-node enforces %q, want privileged (hostPath)", got)
	}
	err = poll(5*time.Minute, "daemonset gofit-node ready", func() (bool, error) {
		ds, err := c.cs.AppsV1().DaemonSets("gofit-node").Get(g.ctx, "gofit-node", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ds.Status.NumberReady == 1 && ds.Status.DesiredNumberScheduled == 1,
			fmt.Errorf("ready %d of %d", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	})
	if err != nil {
		g.describe(t, "gofit-node")
		t.Fatal(err)
	}
	sa := "system:serviceaccount:gofit-node:gofit-node"
	g.can(t, sa, true, authzv1.ResourceAttributes{Resource: "pods", Verb: "watch"})
	g.can(t, sa, true, authzv1.ResourceAttributes{Resource: "nodes", Verb: "get", Name: nodeName})
	g.can(t, sa, false, authzv1.ResourceAttributes{Namespace: "shop", Resource: "pods", Verb: "update"})
	g.can(t, sa, false, authzv1.ResourceAttributes{Namespace: "kube-system", Resource: "configmaps", Verb: "get"})
	g.can(t, sa, true, authzv1.ResourceAttributes{Namespace: "gofit-node", Resource: "configmaps", Verb: "list"})
	// Its port as deploy/node serves it: --metrics-secure (issue 51).
	g.agentNS = cmp.Or(g.agentNS, "gofit-node")
	g.agentPortGuarded(t, g.agentIP(t))
}

func (g *guestRun) service(t *testing.T) {
	c := g.c
	// The namespace first, then a server-side dry run until the webhook
	// injects: its certificate and caBundle arrive after it is Ready, and
	// with failurePolicy Ignore a pod admitted before would start unfitted.
	if _, _, err := c.run("apply", "-f", "/src/kube/e2e/testdata/namespace.yaml"); err != nil {
		t.Fatal(err)
	}
	g.webhookInjects(t)
	if _, stderr, err := c.run("apply", "-f", "/src/kube/e2e/testdata/service.yaml"); err != nil {
		t.Fatal(err)
	} else if stderr != "" {
		t.Logf("kubectl apply service.yaml: %s", stderr)
	}
	pods := g.waitDeployment(t, "shop", "service", 1, 5*time.Minute)
	g.svc = &pods[0]
	g.svcIP = pods[0].Status.PodIP
	if g.svc.Status.QOSClass != corev1.PodQOSBurstable {
		t.Errorf("service pod QoS %s, want Burstable", g.svc.Status.QOSClass)
	}
}

func ptr[T any](v T) *T { return &v }

func resources(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: mustQuantity(cpu), corev1.ResourceMemory: mustQuantity(mem)}
}

func envOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func (g *guestRun) injected(t *testing.T) {
	if g.svc == nil {
		t.Fatal("no service pod (the service step failed)")
	}
	env := envOf(g.svc.Spec.Containers[0])
	g.env = env
	t.Logf("injected env: %v", env)
	if env["GOMAXPROCS"] != "1" {
		t.Errorf("GOMAXPROCS=%q injected for a 500m limit, want 1", env["GOMAXPROCS"])
	}
	limit, err := fit.ParseMemLimit(env["GOMEMLIMIT"])
	if err != nil || limit <= 0 || limit >= 128<<20 {
		t.Errorf("GOMEMLIMIT=%q injected for a 128Mi limit: want a value below it (%v)", env["GOMEMLIMIT"], err)
	}
	m := g.metrics(t)
	if m["gofit_gomaxprocs"] != 1 {
		t.Errorf("the running service reports gofit_gomaxprocs %v, want 1", m["gofit_gomaxprocs"])
	}
	// The webhook marks what it injected (GOFIT_RUN), so the library takes
	// the values over as gofit's own and refines GOMEMLIMIT with the non-Go
	// memory it measures in-process, where the webhook could only assume
	// the ratio (no static non-Go budget). What it applies is its own plan, never above what
	// the webhook injected (measuring only lowers it; the ratio caps both)
	// and never under a quarter of the limit.
	got := int64(m["gofit_gomemlimit_bytes"])
	if plan := int64(m["gofit_plan_gomemlimit_bytes"]); got != plan {
		t.Errorf("the running service reports gofit_gomemlimit_bytes %d but its plan says %d: the library did not take the injected value over", got, plan)
	}
	if got <= 0 || got > limit || got < (128<<20)/4 {
		t.Errorf("the running service reports gofit_gomemlimit_bytes %d: want gofit's own value in [32Mi, the injected %d]", got, limit)
	}
	t.Logf("GOMEMLIMIT injected %d, applied in-process %d", limit, got)
}

var sample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// metrics scrapes the service pod's /metrics: unlabelled samples by name.
func (g *guestRun) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	m, err := scrape("http://" + g.svcIP + ":8080/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// scrape reads a /metrics endpoint: its unlabelled samples by name.
func scrape(url string) (map[string]float64, error) {
	body, err := httpGet(url)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		if s := sample.FindStringSubmatch(l); s != nil && s[2] == "" {
			m[s[1]], _ = strconv.ParseFloat(s[3], 64)
		}
	}
	return m, nil
}

// cgroupDirs are the service pod's cgroups as the kubelet named them
// (cgroupfs driver): kubepods/<qos>/pod<uid>/<container id>.
func podCgroup(p *corev1.Pod, uid string) string {
	qos := strings.ToLower(string(p.Status.QOSClass))
	if p.Status.QOSClass == corev1.PodQOSGuaranteed {
		return filepath.Join("/sys/fs/cgroup/kubepods", "pod"+uid)
	}
	return filepath.Join("/sys/fs/cgroup/kubepods", qos, "pod"+uid)
}

func containerCgroup(p *corev1.Pod, podDir string) string {
	id := p.Status.ContainerStatuses[0].ContainerID
	_, id, _ = strings.Cut(id, "://")
	return filepath.Join(podDir, id)
}

func readValue(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func num(s string) int64 {
	if s == "max" {
		return manage.Unlimited
	}
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

func (g *guestRun) protected(t *testing.T) {
	if g.svc == nil {
		t.Fatal("no service pod")
	}
	pod := podCgroup(g.svc, string(g.svc.UID))
	ctr := containerCgroup(g.svc, pod)
	for _, d := range []string{pod, ctr} {
		if _, err := os.Stat(d); err != nil {
			t.Fatalf("the kubelet's cgroup: %v", err)
		}
	}
	// The agent reconciles every 10s and on pod events.
	err := poll(time.Minute, "memory.low on the service's pod cgroup", func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(pod, "memory.low"))
		return err == nil && num(strings.TrimSpace(string(b))) > 0, err
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	// The container's memory.high is Go-aware (left at max when
	// GOMEMLIMIT plus the non-Go budget reaches the limit): compared with
	// the agent's own plan (a dry run of its reconcile, in process), once
	// a pass has written it. A pass can write the pod's values before the
	// container's cgroup is there, and the next one (every 10 s, or on a
	// pod event) the container's: in CI on 2026-12-07 the pod had its
	// memory.low while its container still had memory.high max.
	var rep agent.Report
	var ctrHigh int64
	waited := time.Now()
	err = poll(45*time.Second, "the service container's memory.high as the agent computes it", func() (bool, error) {
		rep = g.dryRun(t)
		ctrHigh = num(readValue(t, ctr, "memory.high"))
		for _, v := range rep.Values {
			if v.Dir == ctr && v.File == "memory.high" {
				if v.Value != ctrHigh {
					return false, fmt.Errorf("container memory.high %d, the agent computes %d (%s)", ctrHigh, v.Value, v.Reason)
				}
				t.Logf("container memory.high %d as computed, %.1fs after the pod's memory.low: %s", ctrHigh, time.Since(waited).Seconds(), v.Reason)
				return true, nil
			}
		}
		return false, fmt.Errorf("the agent computes no memory.high for the service's container %s", ctr)
	})
	if err != nil {
		g.agentLog(t)
		t.Error(err)
	}
	qos := filepath.Dir(pod)
	kubepods := filepath.Dir(qos)
	podLow, ctrLow := num(readValue(t, pod, "memory.low")), num(readValue(t, ctr, "memory.low"))
	ctrMax := num(readValue(t, ctr, "memory.max"))
	qosLow, kpLow := num(readValue(t, qos, "memory.low")), num(readValue(t, kubepods, "memory.low"))
	t.Logf("memory.low: kubepods %d, burstable %d, pod %d, container %d; container memory.high %d of memory.max %d",
		kpLow, qosLow, podLow, ctrLow, ctrHigh, ctrMax)
	// The container's memory.low is the agent's unless the kubelet's
	// MemoryQoS writes it (v1.37 by default: 0, when it makes or resizes
	// the container); the pod's protection then reaches the container
	// through memory_recursiveprot.
	if _, kubelets := g.kubeletQoS(t).Owns(memqos.LevelContainer, memqos.FileLow); kubelets {
		if ctrLow != 0 || podLow <= 0 {
			t.Errorf("container %s: memory.low %d (the kubelet's, want 0), pod memory.low %d (the agent's, want the auto profile's protection)", ctr, ctrLow, podLow)
		}
	} else if ctrLow <= 0 {
		t.Errorf("container %s: memory.low %d, want the auto profile's protection", ctr, ctrLow)
	}
	if qosLow < podLow || kpLow < qosLow {
		t.Errorf("memory.low must cover the levels below: kubepods %d ≥ burstable %d ≥ pod %d", kpLow, qosLow, podLow)
	}
	// Every path the agent computes for this node exists.
	for _, v := range rep.Values {
		if _, err := os.Stat(filepath.Join(v.Dir, v.File)); err != nil {
			t.Errorf("the agent computed %s/%s, which does not exist: %v", v.Dir, v.File, err)
		}
	}
	for _, ch := range rep.Apply.Changed {
		t.Logf("pending (may be the agent's next pass): %s/%s = %d (now %d)", ch.Dir, ch.File, ch.Value.Value, ch.Old)
	}
}

// dryRun plans the node as the agent does, against the live cgroups,
// writing nothing.
func (g *guestRun) dryRun(t *testing.T) agent.Report {
	t.Helper()
	layout, err := agent.Detect("/", "/")
	if err != nil {
		t.Fatal(err)
	}
	pods, alloc := g.nodePods(t)
	a := agent.New(layout, agent.Options{Policy: memqos.PolicyDefault, MaxProtectedRatio: 0.8, DryRun: true, Kubelet: g.kubeletQoS(t)})
	return a.Reconcile(agent.State{Pods: pods, Config: &memqos.Config{}, Namespaces: memqos.Namespaces{}, NodeAllocatable: alloc})
}

func (g *guestRun) nodePods(t *testing.T) ([]*corev1.Pod, int64) {
	t.Helper()
	list, err := g.c.cs.CoreV1().Pods("").List(g.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	n, err := g.c.cs.CoreV1().Nodes().Get(g.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pods, n.Status.Allocatable.Memory().Value()
}

func (g *guestRun) agentLog(t *testing.T) {
	out, _, _ := g.c.run("logs", "-n", "gofit-node", "daemonset/gofit-node", "--tail=30")
	t.Logf("agent log:\n%s", out)
}

// fixtures compares kube/agent/testdata/v2-cgroupfs with the tree this
// kubelet made: the same levels, names of the same shape, and the memory
// files the fixtures hold exist at each level.
func (g *guestRun) fixtures(t *testing.T) {
	fix := "/src/kube/agent/testdata/v2-cgroupfs/sys/fs/cgroup"
	layout, err := agent.Detect("/", "/")
	if err != nil {
		t.Fatal(err)
	}
	flayout, err := agent.Detect("/src/kube/agent/testdata/v2-cgroupfs", "/")
	if err != nil {
		t.Fatal(err)
	}
	if layout.Version != flayout.Version || layout.Driver != flayout.Driver || layout.Kubepods != flayout.Kubepods {
		t.Errorf("this kubelet: v%d %s %q; the fixture: v%d %s %q", layout.Version, layout.Driver, layout.Kubepods, flayout.Version, flayout.Driver, flayout.Kubepods)
	}
	podName := regexp.MustCompile(`^pod[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	containerd := regexp.MustCompile(`^[0-9a-f]{64}$`)
	// The real tree: which names appear at each level.
	real := map[string][]string{}
	filepath.WalkDir("/sys/fs/cgroup/kubepods", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel("/sys/fs/cgroup", p)
		depth := strings.Count(rel, "/")
		real[strconv.Itoa(depth)] = append(real[strconv.Itoa(depth)], rel)
		return nil
	})
	t.Logf("this kubelet's tree: %v", real)
	for _, rel := range real["2"] {
		parts := strings.Split(rel, "/")
		if !podName.MatchString(parts[2]) {
			t.Errorf("%s: pod cgroup name not pod<uid>", rel)
		}
	}
	for _, rel := range real["3"] {
		parts := strings.Split(rel, "/")
		if !containerd.MatchString(parts[3]) {
			t.Errorf("%s: containerd's container cgroup is not the bare 64-hex ID", rel)
		}
	}
	// The fixture's files exist at the same level in the real tree.
	filepath.WalkDir(fix, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(fix, p)
		parts := strings.Split(rel, "/")
		var realDir string
		switch {
		case len(parts) == 1:
			realDir = "/sys/fs/cgroup"
		case len(parts) == 2: // kubepods/<file>
			realDir = "/sys/fs/cgroup/kubepods"
		case len(parts) == 3 && !strings.HasPrefix(parts[1], "pod"): // qos/<file>
			realDir = filepath.Join("/sys/fs/cgroup/kubepods", parts[1])
		case len(parts) == 4 && real["2"] != nil:
			realDir = filepath.Join("/sys/fs/cgroup", real["2"][0])
		case len(parts) == 5 && real["3"] != nil:
			realDir = filepath.Join("/sys/fs/cgroup", real["3"][0])
		default:
			return nil
		}
		if _, err := os.Stat(filepath.Join(realDir, d.Name())); err != nil {
			t.Errorf("fixture %s: the real %s has no %s", rel, realDir, d.Name())
		}
		return nil
	})
	// The sandbox (pause) container has a cgroup of its own beside the
	// pod's containers, which the pod's status does not list: the agent
	// must leave it alone, and the fixture has one (pod1111…/f00111).
	if g.svc != nil {
		dir := podCgroup(g.svc, string(g.svc.UID))
		kids := subdirs(dir)
		_, id, _ := strings.Cut(g.svc.Status.ContainerStatuses[0].ContainerID, "://")
		if len(kids) != 2 || !slices.Contains(kids, id) {
			t.Errorf("the service pod's cgroup %s holds %v; want its container %s and the sandbox's", dir, kids, id)
		}
	}
	fixPods, err := agent.ReadPodList("/src/kube/agent/testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	sandbox := false
	for _, p := range fixPods {
		known := map[string]bool{}
		for _, cs := range p.Status.ContainerStatuses {
			_, id, _ := strings.Cut(cs.ContainerID, "://")
			known[id] = true
		}
		for _, k := range subdirs(filepath.Join(fix, "kubepods", strings.ToLower(string(p.Status.QOSClass)), "pod"+string(p.UID))) {
			if !known[k] {
				sandbox = true
			}
		}
	}
	if !sandbox {
		t.Errorf("no pod in %s has a sandbox cgroup beside its containers, as this kubelet makes", fix)
	}
	// Which container cgroup names the fixture models.
	var fixNames []string
	filepath.WalkDir(filepath.Join(fix, "kubepods"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join(fix, "kubepods"), p)
			if strings.Count(rel, "/") == 2 {
				fixNames = append(fixNames, filepath.Base(p))
			}
		}
		return nil
	})
	sort.Strings(fixNames)
	t.Logf("the fixture's container cgroups: %v (containerd names them by the bare ID, as the fixture's non-crio ones do)", fixNames)
}

// plan runs `gofit node plan` as a user would against the live node: the
// running agent has already written everything, so nothing is pending.
func (g *guestRun) plan(t *testing.T) {
	_, alloc := g.nodePods(t)
	file := filepath.Join(g.tmp, "pods.json")
	var out []byte
	err := poll(3*time.Minute, "gofit node plan with no writes", func() (bool, error) {
		o, _, err := g.c.run("get", "pods", "-A", "--field-selector", "spec.nodeName="+nodeName, "-o", "json")
		if err != nil {
			return false, err
		}
		if err := os.WriteFile(file, []byte(o), 0o644); err != nil {
			return false, err
		}
		cmd := exec.Command(filepath.Join(g.c.paths.images, "gofit"), "node", "plan", "--pods", file,
			"--node-memory", strconv.FormatInt(alloc, 10), "--json")
		// JSON on stdout only: under TCG the binary's package init can take
		// over 30s, after which controller-runtime prints a warning and a
		// stack to stderr about its logger never being set.
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		if err != nil {
			return false, fmt.Errorf("gofit node plan: %w: %s", err, stderr.String())
		}
		var p agent.Plan
		if err := json.Unmarshal(out, &p); err != nil {
			return false, fmt.Errorf("gofit node plan --json: %w: %s", err, out)
		}
		return len(p.Writes) == 0, fmt.Errorf("%d writes pending: %s", len(p.Writes), out)
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	t.Logf("gofit node plan: %s", out)
}

func (g *guestRun) resize(t *testing.T) {
	if g.svc == nil {
		t.Fatal("no service pod")
	}
	pod := podCgroup(g.svc, string(g.svc.UID))
	ctr := containerCgroup(g.svc, pod)
	before := g.metrics(t)
	patch := `{"spec":{"containers":[{"name":"service","resources":{"limits":{"cpu":"2","memory":"256Mi"}}}]}}`
	resize := []string{"patch", "pod", "-n", "shop", g.svc.Name, "--subresource", "resize", "--type", "strategic", "-p", patch}
	warned := func(stderr string) bool {
		return strings.Contains(stderr, "Warning:") && strings.Contains(stderr, "GOMAXPROCS")
	}
	// A server-side dry run goes through the webhook (sideEffects None)
	// and changes nothing: wait until the webhook answers one, so that a
	// webhook restarting under TCG (failurePolicy Ignore) is not mistaken
	// for one that does not warn.
	g.waitDeployment(t, "gofit-system", "gofit-webhook", 3, 5*time.Minute)
	var dry string
	err := poll(3*time.Minute, "the webhook's warning on a dry-run resize", func() (bool, error) {
		_, stderr, err := g.c.run(append(resize, "--dry-run=server")...)
		dry = stderr
		return err == nil && warned(stderr), fmt.Errorf("stderr %q, err %v", stderr, err)
	})
	if err != nil {
		t.Error(err)
	} else {
		t.Logf("kubectl patch --subresource resize --dry-run=server: %s", strings.TrimSpace(dry))
	}
	_, stderr, err := g.c.run(resize...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl patch --subresource resize: stderr %q", stderr)
	if !warned(stderr) {
		t.Errorf("the webhook's resize warning did not reach kubectl on the real resize (stderr %q)", stderr)
	}
	var seen time.Time
	err = poll(2*time.Minute, "cpu.max and memory.max after the resize", func() (bool, error) {
		cpu, mem := readValue(t, ctr, "cpu.max"), readValue(t, ctr, "memory.max")
		if cpu == "200000 100000" && mem == strconv.Itoa(256<<20) {
			seen = time.Now()
			return true, nil
		}
		return false, fmt.Errorf("cpu.max %q, memory.max %q", cpu, mem)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The library re-reads the limits every refresh interval; allow two,
	// plus a second for the scrape itself under TCG.
	deadline := seen.Add(2*gofit.DefaultRefresh + time.Second)
	var m map[string]float64
	for {
		m = g.metrics(t)
		if m["gofit_gomaxprocs"] == 2 && m["gofit_gomemlimit_bytes"] > before["gofit_gomemlimit_bytes"] {
			t.Logf("the service followed %.1fs after the cgroup changed: gofit_gomaxprocs %v, gofit_gomemlimit_bytes %v → %v",
				time.Since(seen).Seconds(), m["gofit_gomaxprocs"], before["gofit_gomemlimit_bytes"], m["gofit_gomemlimit_bytes"])
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("the service did not follow within two refresh intervals: gofit_gomaxprocs %v (want 2), gofit_gomemlimit_bytes %v (was %v); injected env %v (without the %s marker the library treats the injected values as the user's own)",
		m["gofit_gomaxprocs"], m["gofit_gomemlimit_bytes"], before["gofit_gomemlimit_bytes"], g.env, fit.MarkerVar)
}

func (g *guestRun) static(t *testing.T) {
	b, err := os.ReadFile("/src/kube/e2e/testdata/static-pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/kubernetes/manifests/static-service.yaml", b, 0o644); err != nil {
		t.Fatal(err)
	}
	var mirror *corev1.Pod
	err = poll(3*time.Minute, "the static pod's mirror running", func() (bool, error) {
		p, err := g.c.cs.CoreV1().Pods("default").Get(g.ctx, "static-service-"+nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mirror = p
		return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != "",
			fmt.Errorf("phase %s", p.Status.Phase)
	})
	if err != nil {
		g.describe(t, "default")
		t.Fatal(err)
	}
	hash := mirror.Annotations["kubernetes.io/config.mirror"]
	g.staticHash = hash
	t.Logf("mirror pod UID %s; the kubelet's UID (kubernetes.io/config.mirror) %s", mirror.UID, hash)
	dir := podCgroup(mirror, hash)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the static pod's cgroup is not named by its config.mirror hash: %v", err)
	}
	if _, err := os.Stat(podCgroup(mirror, string(mirror.UID))); err == nil {
		t.Errorf("a cgroup is named by the mirror pod's API UID too")
	}
	err = poll(time.Minute, "memory.low on the static pod's cgroup "+dir, func() (bool, error) {
		v := num(readValue(t, dir, "memory.low"))
		return v > 0, fmt.Errorf("memory.low %d", v)
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
	// The container's memory.low is the agent's unless the kubelet's
	// MemoryQoS owns it (as in protected).
	ctr := containerCgroup(mirror, dir)
	v := num(readValue(t, ctr, "memory.low"))
	if _, kubelets := g.kubeletQoS(t).Owns(memqos.LevelContainer, memqos.FileLow); kubelets {
		if v != 0 {
			t.Errorf("the static pod's container %s: memory.low %d, the kubelet's (want 0)", ctr, v)
		}
	} else if v <= 0 {
		t.Errorf("the static pod's container %s: memory.low %d", ctr, v)
	}
	// Protected and stays so: the agent does not reset it on its next pass.
	time.Sleep(12 * time.Second)
	if v := num(readValue(t, dir, "memory.low")); v <= 0 {
		t.Errorf("the static pod lost its protection on the agent's next pass (memory.low %d)", v)
	}
}

func (g *guestRun) webhookDown(t *testing.T) {
	if _, _, err := g.c.run("scale", "-n", "gofit-system", "deployment/gofit-webhook", "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	// No webhook process left at all: the API server's endpoint resolver
	// can lag the EndpointSlice (seen at low load, where a terminating
	// replica still answered after its endpoint went unready). Under TCG at
	// high load the kubelet takes minutes to finish them.
	err := poll(6*time.Minute, "no webhook pods left", func() (bool, error) {
		l, err := g.c.cs.CoreV1().Pods("gofit-system").List(g.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=gofit-webhook"})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, fmt.Errorf("%d pods: %s", len(l.Items), podSummary(l.Items))
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unfitted", Namespace: "shop", Annotations: map[string]string{"koordinator.sh/memoryQOS": `{"policy":"auto"}`}}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "service", Image: serviceImage, Args: []string{"-addr=:8080"},
			Resources:       corev1.ResourceRequirements{Limits: resources("500m", "128Mi"), Requests: resources("100m", "64Mi")},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	created, err := g.c.cs.CoreV1().Pods("shop").Create(g.ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("with the webhook down a pod must still be admitted (failurePolicy Ignore): %v", err)
	}
	t.Logf("admitted in %.1fs with the webhook down", time.Since(start).Seconds())
	if env := envOf(created.Spec.Containers[0]); env["GOMAXPROCS"] != "" {
		t.Errorf("env injected with no webhook running? %v", env)
	}
	err = poll(2*time.Minute, "the unfitted pod running", func() (bool, error) {
		p, err := g.c.cs.CoreV1().Pods("shop").Get(g.ctx, "unfitted", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, fmt.Errorf("phase %s", p.Status.Phase)
	})
	if err != nil {
		g.describe(t, "shop")
		t.Error(err)
	}
}

// deleted removes every pod the agent protects and checks that no level
// keeps protection for them.
func (g *guestRun) deleted(t *testing.T) {
	var dirs []string
	if g.svc != nil {
		dirs = append(dirs, podCgroup(g.svc, string(g.svc.UID)))
	}
	if g.staticHash != "" {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup/kubepods/burstable", "pod"+g.staticHash))
	}
	if p, err := g.c.cs.CoreV1().Pods("shop").Get(g.ctx, "unfitted", metav1.GetOptions{}); err == nil {
		dirs = append(dirs, podCgroup(p, string(p.UID)))
	}
	os.Remove("/etc/kubernetes/manifests/static-service.yaml")
	// Foreground: the Deployment goes only after its pods, so that the wait
	// below measures the kubelet, not the garbage collector's queue.
	if _, _, err := g.c.run("delete", "-f", "/src/kube/e2e/testdata/service.yaml", "--cascade=foreground", "--wait=true", "--timeout=5m"); err != nil {
		t.Error(err)
	}
	g.c.run("delete", "pod", "-n", "shop", "unfitted", "--ignore-not-found", "--wait=true", "--timeout=3m")
	err := waitGone(5*time.Minute, "the deleted pods' cgroups", dirs)
	if err != nil {
		t.Error(err)
	}
	levels := []string{"/sys/fs/cgroup/kubepods", "/sys/fs/cgroup/kubepods/burstable", "/sys/fs/cgroup/kubepods/besteffort"}
	err = poll(2*time.Minute, "no memory.min/low left at any level", func() (bool, error) {
		var left []string
		for _, d := range levels {
			for _, f := range []string{"memory.min", "memory.low"} {
				if v := num(readValue(t, d, f)); v != 0 {
					left = append(left, fmt.Sprintf("%s/%s=%d", d, f, v))
				}
			}
		}
		return len(left) == 0, fmt.Errorf("left: %v", left)
	})
	if err != nil {
		g.agentLog(t)
		t.Error(err)
	}
	if rep := g.dryRun(t); len(rep.Apply.Changed) != 0 {
		t.Errorf("after the deletes the agent still has %d writes pending", len(rep.Apply.Changed))
	}
}

// subdirs lists the directories in dir.
func subdirs(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// waitGone waits until none of dirs exists (what names them in errors).
func waitGone(timeout time.Duration, what string, dirs []string) error {
	return poll(timeout, what+" gone", func() (bool, error) {
		for _, d := range dirs {
			if _, err := os.Stat(d); err == nil {
				return false, fmt.Errorf("%s still there", d)
			}
		}
		return true, nil
	})
}

// webhookInjects waits until a server-side dry run of a pod in shop comes
// back with gofit's env: the webhook's certificate and caBundle arrive
// after its Deployment is Ready, and with failurePolicy Ignore a pod
// admitted before would start unfitted (or, under an experiment, without
// its arm).
func (g *guestRun) webhookInjects(t *testing.T) {
	t.Helper()
	c := g.c
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "shop"}, Spec: corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "c", Image: serviceImage, Resources: corev1.ResourceRequirements{Limits: resources("500m", "128Mi")},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	start := time.Now()
	err := poll(3*time.Minute, "the webhook injecting into a dry-run pod", func() (bool, error) {
		p, err := c.cs.CoreV1().Pods("shop").Create(g.ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return envOf(p.Spec.Containers[0])["GOMAXPROCS"] != "", fmt.Errorf("env %v", p.Spec.Containers[0].Env)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the webhook injected into a dry-run pod after %.1fs", time.Since(start).Seconds())
}

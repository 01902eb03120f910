package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/agent"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// The steps that prove the agent and the kubelet's own MemoryQoS each
// write their own files (issue 27 item 9), that uninstalling gives the
// kernel its defaults back (item 6), and the chart install (issue 28).

// The one-writer steps watch at least minPasses agent passes and at
// least watchSpan: the kubelet's QoS loop runs every 60 s, so it runs
// between two of the passes.
const (
	minPasses = 6
	watchSpan = 65 * time.Second
)

// ownersNS holds the pods the one-writer steps watch.
const ownersNS = "owners"

// kubeletQoS is what the agent is expected to take the kubelet to do in
// this phase: its version's defaults, or what the phase configured.
func (g *guestRun) kubeletQoS(t *testing.T) agent.KubeletQoS {
	t.Helper()
	n, err := g.c.cs.CoreV1().Nodes().Get(g.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := agent.KubeletMode(g.kubeletMode, n.Status.NodeInfo.KubeletVersion)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ownerPods starts a Burstable and a Guaranteed pod (gofit's auto profile)
// and returns them Running.
func (g *guestRun) ownerPods(t *testing.T) []*corev1.Pod {
	t.Helper()
	cs := g.c.cs
	if _, err := cs.CoreV1().Namespaces().Get(g.ctx, ownersNS, metav1.GetOptions{}); err != nil {
		if _, err := cs.CoreV1().Namespaces().Create(g.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ownersNS}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(name string, req, lim corev1.ResourceList) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ownersNS,
			Annotations: map[string]string{memqos.AnnotationMemoryQOS: `{"policy":"auto"}`}}, Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: serviceImage, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
	}
	want := []*corev1.Pod{
		mk("burstable", resources("50m", "64Mi"), resources("200m", "160Mi")),
		mk("guaranteed", resources("50m", "64Mi"), resources("50m", "64Mi")),
	}
	for _, p := range want {
		if _, err := cs.CoreV1().Pods(ownersNS).Create(g.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var out []*corev1.Pod
	err := poll(4*time.Minute, "the owners pods Running", func() (bool, error) {
		out = out[:0]
		for _, w := range want {
			p, err := cs.CoreV1().Pods(ownersNS).Get(g.ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
				return false, fmt.Errorf("%s: %s", p.Name, p.Status.Phase)
			}
			out = append(out, p)
		}
		return true, nil
	})
	if err != nil {
		g.describe(t, ownersNS)
		t.Fatal(err)
	}
	return out
}

// agentMetrics scrapes the agent's /metrics: every sample, by name with
// its labels as printed.
func (g *guestRun) agentMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	ns := g.agentNS
	list, err := g.c.cs.CoreV1().Pods(ns).List(g.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if !strings.HasPrefix(p.Name, "gofit-node") || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		code, body, err := agentGet(p.Status.PodIP, "/metrics", g.agentToken(t))
		if err == nil && code != 200 {
			err = fmt.Errorf("agent /metrics: %d %.200s", code, body)
		}
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for _, l := range strings.Split(body, "\n") {
			if s := sample.FindStringSubmatch(l); s != nil {
				m[s[1]+s[2]], _ = strconv.ParseFloat(s[3], 64)
			}
		}
		return m
	}
	t.Fatalf("no running agent pod in %s", ns)
	return nil
}

// level is one cgroup the one-writer steps watch.
type level struct {
	name  string // for the log: "kubepods", "pod burstable", ...
	level memqos.Level
	dir   string
}

func (g *guestRun) levels(pods []*corev1.Pod) []level {
	ls := []level{
		{"kubepods", memqos.LevelKubepods, "/sys/fs/cgroup/kubepods"},
		{"qos burstable", memqos.LevelQoS, "/sys/fs/cgroup/kubepods/burstable"},
		{"qos besteffort", memqos.LevelQoS, "/sys/fs/cgroup/kubepods/besteffort"},
	}
	for _, p := range pods {
		pd := podCgroup(p, string(p.UID))
		ls = append(ls, level{"pod " + p.Name, memqos.LevelPod, pd}, level{"container " + p.Name, memqos.LevelContainer, containerCgroup(p, pd)})
	}
	return ls
}

var qosFiles = []string{memqos.FileMin, memqos.FileLow, memqos.FileHigh}

// oneWriter watches every level's memory.min, memory.low and memory.high
// at each agent pass over at least 65 s: no value may change (a flip is the agent
// and the kubelet undoing each other), the agent must report no other
// writer of its files, it must defer exactly the files the kubelet owns
// in this phase, and the kubelet's files must hold the kubelet's values.
func (g *guestRun) oneWriter(t *testing.T) {
	k := g.kubeletQoS(t)
	pods := g.ownerPods(t)
	defer g.c.run("delete", "pod", "-n", ownersNS, "--all", "--wait=true", "--timeout=3m")
	levels := g.levels(pods)
	t.Logf("the kubelet, as the agent should see it: %s", k.Reason)
	for _, d := range k.Deferred() {
		t.Logf("  defers: %s", d)
	}
	// The agent's own account of who owns what.
	m := g.agentMetrics(t)
	for _, l := range []memqos.Level{memqos.LevelKubepods, memqos.LevelQoS, memqos.LevelPod, memqos.LevelContainer} {
		for _, f := range qosFiles {
			if f == memqos.FileHigh && l != memqos.LevelContainer {
				continue
			}
			_, want := k.Owns(l, f)
			key := fmt.Sprintf(`gofit_node_kubelet_owned{file="%s",level="%s"}`, f, agent.LevelName(l))
			if got, ok := m[key]; !ok || (got == 1) != want {
				t.Errorf("%s = %v (present %v), want kubelet-owned %v", key, got, ok, want)
			}
		}
	}
	if out, _, err := g.c.run("logs", "-n", g.agentNS, "daemonset/gofit-node"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "kubelet memory QoS") {
				t.Logf("agent: %s", l)
			}
		}
	}
	_, text, err := agentGet(g.agentIP(t), "/healthz", "")
	t.Logf("agent /healthz: %s (%v)", strings.TrimSpace(text), err)
	if len(k.Owned) > 0 && !strings.Contains(text, "defers to the kubelet") {
		t.Errorf("/healthz does not say what the agent defers to the kubelet")
	}

	g.settled(t)
	foreign0 := sumPrefix(g.agentMetrics(t), "gofit_node_foreign_writes_total")
	type key struct{ dir, file string }
	seen := map[key][]string{}
	last := g.agentMetrics(t)["gofit_node_last_reconcile_timestamp_seconds"]
	start := time.Now()
	n := 0
	for ; n < minPasses || time.Since(start) < watchSpan; n++ {
		err := poll(time.Minute, "the agent's next pass", func() (bool, error) {
			ts := g.agentMetrics(t)["gofit_node_last_reconcile_timestamp_seconds"]
			if ts > last {
				last = ts
				return true, nil
			}
			return false, fmt.Errorf("last pass at %v", ts)
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range levels {
			for _, f := range qosFiles {
				seen[key{l.dir, f}] = append(seen[key{l.dir, f}], readValue(t, l.dir, f))
			}
		}
	}
	t.Logf("%d agent passes in %.0fs (the kubelet's QoS loop runs every 60s)", n, time.Since(start).Seconds())
	for _, l := range levels {
		for _, f := range qosFiles {
			vals := seen[key{l.dir, f}]
			owner := "agent"
			if _, ok := k.Owns(l.level, f); ok {
				owner = "kubelet"
			} else if f == memqos.FileHigh && l.level != memqos.LevelContainer {
				owner = "none"
			}
			t.Logf("no-flip %-22s %-11s owner %-7s: %s", l.name, f, owner, strings.Join(vals, " "))
			for j := 1; j < len(vals); j++ {
				if vals[j] != vals[0] {
					t.Errorf("%s %s changed over the passes (%s): two writers?", l.dir, f, strings.Join(vals, " "))
					break
				}
			}
		}
	}
	if n := sumPrefix(g.agentMetrics(t), "gofit_node_foreign_writes_total") - foreign0; n != 0 {
		g.agentLog(t)
		t.Errorf("the agent saw %v writes by someone else to its files during the passes", n)
	}
	// The kubelet's files hold the kubelet's values: under TieredReservation
	// kubepods memory.min is the Guaranteed and Burstable pods' requests,
	// its memory.low and burstable's the Burstable ones'.
	if _, owned := k.Owns(memqos.LevelKubepods, memqos.FileMin); owned && g.kubeletMode == agent.KubeletTiered {
		list, err := g.c.cs.CoreV1().Pods("").List(g.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			t.Fatal(err)
		}
		var gr, br int64
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			var r int64
			for _, c := range p.Spec.Containers {
				r += c.Resources.Requests.Memory().Value()
			}
			switch p.Status.QOSClass {
			case corev1.PodQOSGuaranteed:
				gr += r
			case corev1.PodQOSBurstable:
				br += r
			}
		}
		for _, c := range []struct {
			dir, file string
			want      int64
		}{
			{"/sys/fs/cgroup/kubepods", memqos.FileMin, gr + br},
			{"/sys/fs/cgroup/kubepods", memqos.FileLow, br},
			{"/sys/fs/cgroup/kubepods/burstable", memqos.FileLow, br},
		} {
			if got := num(readValue(t, c.dir, c.file)); got != c.want {
				t.Errorf("%s/%s = %d, want the kubelet's TieredReservation %d (Guaranteed requests %d, Burstable %d)", c.dir, c.file, got, c.want, gr, br)
			}
		}
	}
	for _, p := range pods {
		pd := podCgroup(p, string(p.UID))
		ctr := containerCgroup(p, pd)
		req := p.Spec.Containers[0].Resources.Requests.Memory().Value()
		guaranteed := p.Status.QOSClass == corev1.PodQOSGuaranteed
		for _, c := range []struct {
			lvl  memqos.Level
			dir  string
			file string
			want int64
		}{
			{memqos.LevelPod, pd, memqos.FileMin, tiered(g, guaranteed, req)},
			{memqos.LevelPod, pd, memqos.FileLow, tiered(g, !guaranteed, req)},
			{memqos.LevelContainer, ctr, memqos.FileMin, tiered(g, guaranteed, req)},
			{memqos.LevelContainer, ctr, memqos.FileLow, tiered(g, !guaranteed, req)},
		} {
			if _, owned := k.Owns(c.lvl, c.file); !owned {
				continue
			}
			if got := num(readValue(t, c.dir, c.file)); got != c.want {
				t.Errorf("%s %s = %d, want the kubelet's %d", c.dir, c.file, got, c.want)
			}
		}
		// The agent's part: memory.high on the Burstable container.
		if !guaranteed {
			if h := num(readValue(t, ctr, memqos.FileHigh)); h == manage.Unlimited || h <= req {
				t.Errorf("%s memory.high %d: the agent's auto profile sets it between request and limit", ctr, h)
			}
		}
	}
}

// settled waits until the agent has nothing pending on the node: a dry
// run of its plan against the live cgroups changes nothing.
func (g *guestRun) settled(t *testing.T) {
	t.Helper()
	err := poll(2*time.Minute, "the agent's plan applied", func() (bool, error) {
		rep := g.dryRun(t)
		return len(rep.Apply.Changed) == 0, fmt.Errorf("%d pending, e.g. %+v", len(rep.Apply.Changed), rep.Apply.Changed)
	})
	if err != nil {
		g.agentLog(t)
		t.Fatal(err)
	}
}

// tiered is the value the kubelet writes for a pod or container file: the
// request where TieredReservation puts it (on), else 0.
func tiered(g *guestRun, on bool, req int64) int64 {
	if g.kubeletMode == agent.KubeletTiered && on {
		return req
	}
	return 0
}

func sumPrefix(m map[string]float64, prefix string) float64 {
	s := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

func (g *guestRun) agentIP(t *testing.T) string {
	t.Helper()
	list, err := g.c.cs.CoreV1().Pods(g.agentNS).List(g.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if strings.HasPrefix(p.Name, "gofit-node") && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			return p.Status.PodIP
		}
	}
	t.Fatalf("no agent pod in %s", g.agentNS)
	return ""
}

// kernelDefaults checks that every file the agent owns at every level
// holds the kernel's default (memory.min and memory.low 0, memory.high
// max), and that the kubelet's files were left alone (before: what they
// held before the uninstall).
func (g *guestRun) kernelDefaults(t *testing.T, before map[string]string) {
	t.Helper()
	k := g.kubeletQoS(t)
	type lv struct {
		level memqos.Level
		dir   string
	}
	var all []lv
	root := "/sys/fs/cgroup/kubepods"
	all = append(all, lv{memqos.LevelKubepods, root})
	for _, q := range []string{"burstable", "besteffort"} {
		all = append(all, lv{memqos.LevelQoS, filepath.Join(root, q)})
		for _, p := range subdirs(filepath.Join(root, q)) {
			all = append(all, lv{memqos.LevelPod, filepath.Join(root, q, p)})
			for _, c := range subdirs(filepath.Join(root, q, p)) {
				all = append(all, lv{memqos.LevelContainer, filepath.Join(root, q, p, c)})
			}
		}
	}
	for _, p := range subdirs(root) {
		if strings.HasPrefix(p, "pod") {
			all = append(all, lv{memqos.LevelPod, filepath.Join(root, p)})
			for _, c := range subdirs(filepath.Join(root, p)) {
				all = append(all, lv{memqos.LevelContainer, filepath.Join(root, p, c)})
			}
		}
	}
	var bad []string
	checked := 0
	for _, l := range all {
		for _, f := range qosFiles {
			v, err := os.ReadFile(filepath.Join(l.dir, f))
			if err != nil {
				continue // gone since listed
			}
			got := strings.TrimSpace(string(v))
			if _, owned := k.Owns(l.level, f); owned {
				// A pod's and a container's stay as the kubelet set them
				// (its sums above them follow the pods the uninstall
				// removed).
				if b, ok := before[filepath.Join(l.dir, f)]; ok && b != got && l.level >= memqos.LevelPod {
					bad = append(bad, fmt.Sprintf("%s/%s: the kubelet's, changed from %s to %s", l.dir, f, b, got))
				}
				continue
			}
			want := "0"
			if f == memqos.FileHigh {
				want = "max"
			}
			checked++
			if got != want {
				bad = append(bad, fmt.Sprintf("%s/%s = %s, want %s", l.dir, f, got, want))
			}
		}
	}
	sort.Strings(bad)
	t.Logf("kernel defaults: %d files the agent owns checked across %d cgroups", checked, len(all))
	for _, b := range bad {
		t.Error(b)
	}
}

// snapshotLevels reads every memory file under kubepods (for kernelDefaults'
// check that the kubelet's are left alone).
func snapshotLevels() map[string]string {
	out := map[string]string{}
	filepath.Walk("/sys/fs/cgroup/kubepods", func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if b := filepath.Base(p); b == memqos.FileMin || b == memqos.FileLow || b == memqos.FileHigh {
			v, _ := os.ReadFile(p)
			out[p] = strings.TrimSpace(string(v))
		}
		return nil
	})
	return out
}

// uninstall deletes what phase 1 installed from deploy/ (kubectl delete -k,
// as docs/install.md says) and checks that the agent's reset on the way out
// gave every file it owns back to the kernel.
func (g *guestRun) uninstall(t *testing.T) {
	before := snapshotLevels()
	for _, o := range []struct{ name, base string }{{"node", "/src/deploy/node"}, {"webhook", "/src/deploy/webhook/self-managed"}} {
		if _, _, err := g.c.run("delete", "-k", g.overlay(t, o.name, o.base), "--ignore-not-found", "--wait=true", "--timeout=5m"); err != nil {
			t.Error(err)
		}
	}
	err := poll(3*time.Minute, "namespaces gofit-node and gofit-system gone", func() (bool, error) {
		for _, ns := range []string{"gofit-node", "gofit-system"} {
			if _, err := g.c.cs.CoreV1().Namespaces().Get(g.ctx, ns, metav1.GetOptions{}); err == nil {
				return false, fmt.Errorf("%s still there", ns)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	g.kernelDefaults(t, before)
}

// tieredConfig is phase 2's addition to the kubelet's configuration (the
// gate is on by default from v1.37; naming it keeps v1.36 nodes working).
const tieredConfig = `featureGates: {MemoryQoS: true}
memoryReservationPolicy: TieredReservation
`

// tiered restarts the kubelet with memoryReservationPolicy TieredReservation.
func (g *guestRun) tiered(t *testing.T) {
	if err := g.c.restartKubelet(tieredConfig); err != nil {
		g.c.dumpLogs()
		t.Fatal(err)
	}
	g.kubeletMode = agent.KubeletTiered
	// The kubelet's QoS loop sets kubepods and burstable from the running
	// pods' requests at its start (one-writer-tiered checks them with pods
	// running).
	t.Logf("after the restart: kubepods memory.min %s, memory.low %s; burstable memory.low %s",
		readValue(t, "/sys/fs/cgroup/kubepods", memqos.FileMin), readValue(t, "/sys/fs/cgroup/kubepods", memqos.FileLow),
		readValue(t, "/sys/fs/cgroup/kubepods/burstable", memqos.FileLow))
}

// helm runs the chart's helm (built by kube/hack/helm.sh, shared in).
func (g *guestRun) helm(args ...string) (string, error) {
	argv := append([]string{"--kubeconfig", filepath.Join(g.c.dir, "admin.kubeconfig")}, args...)
	cmd := exec.Command(filepath.Join(g.c.paths.helm, "helm"), argv...)
	home := filepath.Join(g.tmp, "helm-home")
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// chart installs gofit with the Helm chart: the image imported into the
// node, and the agent told the kubelet runs TieredReservation.
func (g *guestRun) chart(t *testing.T) {
	// As docs/install.md says: the release's namespace made by Helm (and
	// left by uninstall), the agent in a privileged namespace of its own
	// that the chart makes.
	out, err := g.helm("install", "gofit", "/src/charts/gofit", "-n", "gofit-system", "--create-namespace", "--wait", "--timeout", "10m",
		"--set", "namespaces.create=true", "--set", "node.namespace=gofit-node",
		"--set", "image.tag=e2e", "--set", "image.pullPolicy=Never",
		"--set-json", `node.extraArgs=["--kubelet-memory-qos=tiered"]`)
	t.Logf("helm install: %s", tailLines(out, 20))
	if err != nil {
		g.describe(t, "gofit-node")
		g.describe(t, "gofit-system")
		t.Fatal(err)
	}
	g.agentNS = "gofit-node"
	g.waitDeployment(t, "gofit-system", "gofit-webhook", 3, 5*time.Minute)
	err = poll(5*time.Minute, "daemonset gofit-node ready", func() (bool, error) {
		ds, err := g.c.cs.AppsV1().DaemonSets("gofit-node").Get(g.ctx, "gofit-node", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ds.Status.NumberReady == 1, fmt.Errorf("ready %d", ds.Status.NumberReady)
	})
	if err != nil {
		g.describe(t, "gofit-node")
		t.Fatal(err)
	}
}

// helmUninstall removes the chart and checks the kernel defaults again,
// with the kubelet's TieredReservation values left in place.
func (g *guestRun) helmUninstall(t *testing.T) {
	before := snapshotLevels()
	out, err := g.helm("uninstall", "gofit", "-n", "gofit-system", "--wait", "--timeout", "5m")
	t.Logf("helm uninstall: %s", strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	err = poll(3*time.Minute, "the agent's pod gone", func() (bool, error) {
		list, err := g.c.cs.CoreV1().Pods("gofit-node").List(g.ctx, metav1.ListOptions{})
		if err != nil {
			return true, nil
		}
		return len(list.Items) == 0, fmt.Errorf("%d pods left", len(list.Items))
	})
	if err != nil {
		t.Fatal(err)
	}
	g.kernelDefaults(t, before)
}

//go:build !nokube

package pods

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kfake "k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
)

// TestTrialPod: a trial is an ordinary pod with the trial's limits and
// env, owned by the run's ConfigMap, on its node, never restarted.
func TestTrialPod(t *testing.T) {
	r := &runPods{ns: "lab", selector: map[string]string{"pool": "bench"}, budget: 15 * time.Minute,
		owner: &runOwner{id: "ab12", ref: metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "gofit-lab-ab12", UID: types.UID("u1")}}}
	tgt := podTarget{image: "registry.example/svc:1", args: []string{"--port", "8080"}, env: []corev1.EnvVar{{Name: "PORT", Value: "8080"}}}
	p := r.pod(roleTrial, "node-a", tgt, map[string]string{"GOMAXPROCS": "1", "GODEBUG": "x=1"}, 0.25, 0, 64<<20, mustURL(t, "http://0.0.0.0:8080/healthz"))
	c := p.Spec.Containers[0]
	if got := c.Resources.Limits.Cpu().MilliValue(); got != 250 {
		t.Errorf("cpu limit %dm, want 250m", got)
	}
	if got := c.Resources.Requests.Cpu().MilliValue(); got != 250 {
		t.Errorf("cpu request %dm, want 250m (the limit)", got)
	}
	if got := c.Resources.Limits.Memory().Value(); got != 64<<20 {
		t.Errorf("memory limit %d", got)
	}
	var env []string
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	if strings.Join(env, " ") != "PORT=8080 GODEBUG=x=1 GOMAXPROCS=1" {
		t.Errorf("env %v", env)
	}
	if p.Spec.NodeSelector["pool"] != "bench" || len(p.Spec.NodeSelector) != 1 || pinnedTo(p) != "node-a" {
		t.Errorf("node selector %v, pinned to %q: want pool=bench, on node-a by name", p.Spec.NodeSelector, pinnedTo(p))
	}
	if p.Spec.RestartPolicy != corev1.RestartPolicyNever || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "u1" {
		t.Errorf("restart %s, owners %v", p.Spec.RestartPolicy, p.OwnerReferences)
	}
	if p.Labels[labelRun] != "ab12" || p.Labels[labelRole] != roleTrial || c.ReadinessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("labels %v, probe %+v", p.Labels, c.ReadinessProbe.HTTPGet)
	}
	// A killed run's pods end by themselves (issue 51, item 9): twice
	// the budget (the study ends within it plus one trial) and the time
	// to be scheduled.
	if d := p.Spec.ActiveDeadlineSeconds; d == nil || *d != int64((30*time.Minute+podSchedule)/time.Second) {
		t.Errorf("activeDeadlineSeconds %v, want %d", d, int64((30*time.Minute+podSchedule)/time.Second))
	}
	// The request row: CPU weight, no CPU limit; no memory limit.
	p = r.pod(roleTrial, "", tgt, nil, 0, 0.5, 0, mustURL(t, "http://0.0.0.0:8080/"))
	c = p.Spec.Containers[0]
	if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok || c.Resources.Requests.Cpu().MilliValue() != 500 {
		t.Errorf("request row: limits %v requests %v", c.Resources.Limits, c.Resources.Requests)
	}
	if p.Spec.Affinity != nil {
		t.Errorf("no node: the scheduler places it, yet the pod names one: %+v", p.Spec.Affinity)
	}
}

func TestPodTargetOf(t *testing.T) {
	cfg := trial.Study{}
	pt, err := podTargetOf(cfg, "ghcr.io/gofit-dev/gofit:v1")
	if err != nil || pt.image != "ghcr.io/gofit-dev/gofit:v1" || strings.Join(pt.args, " ") != trial.SampleCommand+" :8080" {
		t.Errorf("sample: %+v %v", pt, err)
	}
	if _, err := podTargetOf(cfg, ""); err == nil || !strings.Contains(err.Error(), "--kube-image") {
		t.Errorf("sample without an image: %v", err)
	}
	for _, ref := range []string{"oci:dir", "oci-archive:a.tar", "docker-archive:b.tar"} {
		cfg := trial.Study{ImageRef: ref}
		if _, err := podTargetOf(cfg, "g"); err == nil || !strings.Contains(err.Error(), "registry reference") {
			t.Errorf("%s: %v", ref, err)
		}
	}
	cfg = trial.Study{ImageRef: "registry.example/svc:1", ImageArgs: []string{"-listen", ":{port}"},
		Target: sandbox.Target{URL: "http://127.0.0.1:{port}/api"}}
	pt, err = podTargetOf(cfg, "g")
	if err != nil || strings.Join(pt.args, " ") != "-listen :8080" || pt.ready != "http://127.0.0.1:{port}/api" {
		t.Errorf("image: %+v %v", pt, err)
	}
	// No --args: the image's own cmd.
	cfg.ImageArgs = nil
	if pt, _ := podTargetOf(cfg, "g"); pt.args != nil {
		t.Errorf("args %v, want the image's cmd", pt.args)
	}
}

func TestOnPod(t *testing.T) {
	for _, c := range []struct{ in, want, port string }{
		{"http://127.0.0.1:{port}/work", "http://10.1.2.3:8080/work", "8080"},
		{"http://localhost:9000/a?b=c", "http://10.1.2.3:9000/a?b=c", "9000"},
		{"http://localhost/x", "http://10.1.2.3:80/x", "80"},
	} {
		got, port, err := onPod(c.in, "10.1.2.3")
		if err != nil || got != c.want || port != c.port {
			t.Errorf("onPod(%s) = %s %s %v, want %s %s", c.in, got, port, err, c.want, c.port)
		}
	}
	if got, _, _ := onPod("http://127.0.0.1:{port}/", "fd00::5"); got != "http://[fd00::5]:8080/" {
		t.Errorf("IPv6: %s", got)
	}
}

func TestParseSelector(t *testing.T) {
	m, err := parseSelector("pool=bench, zone=a")
	if err != nil || m["pool"] != "bench" || m["zone"] != "a" {
		t.Errorf("%v %v", m, err)
	}
	if _, err := parseSelector("pool"); err == nil || !strings.Contains(err.Error(), "--node-selector") {
		t.Errorf("no =: %v", err)
	}
}

// TestSweepStale: a run killed outright stops renewing its owner's
// heartbeat; the next run deletes that owner (its pods follow through
// the garbage collector) and leaves live runs and other ConfigMaps.
func TestSweepStale(t *testing.T) {
	// now is the API server's clock (this run's owner's creation); each
	// owner's heartbeat annotation is its writer's clock, and its
	// managed fields' time the server's stamp of that write.
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	cm := func(name, run string, wrote, clock time.Time) *corev1.ConfigMap {
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "lab", UID: types.UID(name),
			Labels: map[string]string{labelApp: appName, labelRun: run}, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}}
		if !wrote.IsZero() {
			at := metav1.NewTime(wrote)
			c.Annotations = map[string]string{annHeartbeat: clock.Format(time.RFC3339)}
			c.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "gofit-lab", Operation: metav1.ManagedFieldsOperationUpdate, Time: &at}}
		}
		return c
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: "lab"}}
	cs := kfake.NewSimpleClientset(
		cm("gofit-lab-dead", "dead", now.Add(-10*time.Minute), now.Add(-10*time.Minute)),
		cm("gofit-lab-live", "live", now.Add(-20*time.Second), now.Add(-20*time.Second)),
		// Renewed 20 s ago by a machine whose clock is 10 minutes behind.
		cm("gofit-lab-skewed", "skewed", now.Add(-20*time.Second), now.Add(-10*time.Minute-20*time.Second)),
		// Renewed 10 minutes ago by a machine whose clock is ahead: dead.
		cm("gofit-lab-ahead", "ahead", now.Add(-10*time.Minute), now.Add(time.Minute)),
		cm("gofit-lab-nohb", "nohb", time.Time{}, time.Time{}), // created an hour ago, never renewed
		cm("gofit-lab-self", "self", now.Add(-time.Hour), now.Add(-time.Hour)),
		other)
	got := sweepStale(context.Background(), cs, "lab", "gofit-lab-self", now)
	if strings.Join(got, ",") != "gofit-lab-ahead,gofit-lab-dead,gofit-lab-nohb" {
		t.Errorf("swept %v", got)
	}
	left, _ := cs.CoreV1().ConfigMaps("lab").List(context.Background(), metav1.ListOptions{})
	var names []string
	for _, c := range left.Items {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "app-config,gofit-lab-live,gofit-lab-self,gofit-lab-skewed" {
		t.Errorf("left %v", names)
	}
}

func TestPodEnded(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "target",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}}}}}
	if !oomKilled(p) || !strings.Contains(podEnded(p), "137 (OOMKilled)") {
		t.Errorf("oom: %v %q", oomKilled(p), podEnded(p))
	}
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	if oomKilled(p) || podEnded(p) != "" {
		t.Error("a running container ended")
	}
}

// TestWaitReadyFailsFast: a trial pod whose image cannot be pulled, or
// whose container cannot be created, fails the wait at once, as the
// target's failure (a *sandbox.StartError) naming the flag and image the
// user gave, rather than after minutes of waiting; a first ErrImagePull
// (a registry's hiccup) is waited on.
func TestWaitReadyFailsFast(t *testing.T) {
	const image = "--image registry.example/shop:1.2"
	for _, c := range []struct {
		name     string
		state    corev1.ContainerState
		fails    bool
		outcome  string
		contains string
	}{
		{"backoff", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.example/shop:1.2"`}}, true, result.Errored, "ImagePullBackOff"},
		{"invalid", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "InvalidImageName"}}, true, result.Errored, "InvalidImageName"},
		{"config", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "db" not found`}}, true, result.Errored, `secret "db" not found`},
		{"exited", corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}}, true, result.Errored, "exited 2"},
		{"oom", corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}, true, result.OOMKilled, "OOMKilled"},
		{"first pull error", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}, false, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trial-1", Namespace: "lab"},
				Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "target", State: c.state}}}}
			r := &runPods{cs: kfake.NewSimpleClientset(p), ns: "lab"}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			t0 := time.Now()
			_, err := r.waitReady(ctx, "trial-1", image, time.Minute)
			var se *sandbox.StartError
			switch {
			case !c.fails:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("gave up on a first ErrImagePull: %v", err)
				}
			case !errors.As(err, &se):
				t.Fatalf("after %v: %v, want a *sandbox.StartError", time.Since(t0).Round(time.Millisecond), err)
			case se.Outcome != c.outcome || !strings.Contains(se.Detail, image) || !strings.Contains(se.Detail, c.contains):
				t.Errorf("outcome %s, detail %q: want %s, naming %q and %q", se.Outcome, se.Detail, c.outcome, image, c.contains)
			}
		})
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestTrialPodHTTPS: a target that serves TLS (--url https://...) is
// probed over https on its own port, not http on 8080.
func TestTrialPodHTTPS(t *testing.T) {
	r := &runPods{ns: "lab", owner: &runOwner{id: "abcd"}}
	u, _, err := onPod("https://127.0.0.1:8443/ready?deep=1", "0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	p := r.pod(roleTrial, "", podTarget{image: "shop:1"}, nil, 0.5, 0, 0, mustURL(t, u))
	g := p.Spec.Containers[0].ReadinessProbe.HTTPGet
	if g.Scheme != corev1.URISchemeHTTPS || g.Port.IntValue() != 8443 || g.Path != "/ready?deep=1" {
		t.Errorf("probe %s port %v path %q: want HTTPS 8443 /ready?deep=1", g.Scheme, g.Port.IntValue(), g.Path)
	}
	if c := p.Spec.Containers[0].Ports[0].ContainerPort; c != 8443 {
		t.Errorf("container port %d, want 8443", c)
	}
}

// pinnedTo is the node p's required node affinity names by metadata.name.
func pinnedTo(p *corev1.Pod) string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// TestListNodes: trials go to Ready, schedulable nodes the selector
// matches and no NoSchedule or NoExecute taint guards (the lab's pods
// tolerate none); the load to such a node outside the selector.
func TestListNodes(t *testing.T) {
	node := func(name string, lbl map[string]string, ready bool, taint corev1.TaintEffect) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
		if taint != "" {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "x", Effect: taint}}
		}
		return n
	}
	bench := map[string]string{"pool": "bench"}
	sized := func(n *corev1.Node, cpus, alloc string) *corev1.Node {
		n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpus)}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(alloc)}
		return n
	}
	cs := kfake.NewSimpleClientset(
		sized(node("bench-1", bench, true, ""), "8", "7800m"),
		node("bench-2", bench, true, corev1.TaintEffectNoSchedule),
		node("bench-3", bench, false, ""),
		sized(node("bench-4", bench, true, corev1.TaintEffectPreferNoSchedule), "4", "3900m"), // a preference: pods still land
		node("cp", nil, true, corev1.TaintEffectNoExecute),
		node("web-1", nil, true, ""),
		// What bench-4's pods ask for is not a trial's: 3.9 - 0.9 - 0.2.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "gofit-node"}, Spec: corev1.PodSpec{NodeName: "bench-4",
			Containers:     []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("900m")}}}},
			InitContainers: []corev1.Container{{Name: "i", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}},
			Overhead:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: "x"}, Spec: corev1.PodSpec{NodeName: "bench-4",
			Containers: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere", Namespace: "x"}, Spec: corev1.PodSpec{NodeName: "web-1",
			Containers: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}}})
	r := &trialNodes{cs: cs, selector: bench}
	p, listed := r.list(context.Background())
	if !listed || strings.Join(p.trial, ",") != "bench-1,bench-4" || p.load != "web-1" {
		t.Errorf("listed %v, trials %v, load %q: want bench-1,bench-4 and web-1", listed, p.trial, p.load)
	}
	if p.cpus != 4 || math.Abs(p.alloc-2.8) > 1e-9 {
		t.Errorf("trial nodes' fewest CPUs %d, room %v: want 4 and 2.8 (bench-4's 3.9 allocatable less its pods' 1.1)", p.cpus, p.alloc)
	}
}

// TestNodeQuotas: a cluster run's study is designed for its trial nodes:
// the default whole-machine row becomes the nodes' CPUs (or what they can
// allocate), quotas no node can allocate are dropped from the defaults
// and refused from --quotas, naming the flag.
func TestNodeQuotas(t *testing.T) {
	def := trial.Study{Quotas: []float64{0.25, 0.5, 1, 16}, CPURequest: 0.25, WholeRow: true} // a 16-CPU laptop's defaults
	one := trial.Study{Quotas: []float64{0.25, 0.5, 1}, CPURequest: 0.25, WholeRow: true}     // a 1-CPU laptop's
	for _, c := range []struct {
		name   string
		cfg    trial.Study
		cpus   int
		alloc  float64
		want   []float64
		errHas string
	}{
		{"unknown nodes", def, 0, 0, []float64{0.25, 0.5, 1, 16}, ""},
		{"4-CPU nodes", def, 4, 3.9, []float64{0.25, 0.5, 1, 3.9}, ""},
		{"64-CPU nodes", def, 64, 63.5, []float64{0.25, 0.5, 1, 63.5}, ""},
		{"2-CPU node shared with the load", def, 2, 1.65, []float64{0.25, 0.5, 1, 1.65}, ""},
		{"1-CPU node", def, 1, 0.9, []float64{0.25, 0.5}, ""},
		{"quick", trial.Study{Quotas: []float64{0.25}}, 8, 7.5, []float64{0.25}, ""},
		{"1-CPU laptop, 8-CPU nodes", one, 8, 7.5, []float64{0.25, 0.5, 1, 7.5}, ""},
		{"given, fits", trial.Study{Quotas: []float64{0.5, 2}, QuotasGiven: true}, 4, 3.9, []float64{0.5, 2}, ""},
		{"given, too large", trial.Study{Quotas: []float64{0.5, 4}, QuotasGiven: true}, 4, 3.9, nil, "--quotas: 4 cores"},
		{"no room at all", def, 1, 0.1, nil, "less than the smallest quota"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := nodeQuotas(c.cfg, c.cpus, c.alloc)
			switch {
			case c.errHas != "":
				if err == nil || !strings.Contains(err.Error(), c.errHas) {
					t.Errorf("err %v, want one containing %q", err, c.errHas)
				}
			case err != nil:
				t.Errorf("err %v", err)
			case fmt.Sprint(got.Quotas) != fmt.Sprint(c.want):
				t.Errorf("quotas %v, want %v", got.Quotas, c.want)
			case got.CPURequest > 0 && got.CPURequest != slices.Min(got.Quotas):
				t.Errorf("request row %v, want the smallest quota", got.CPURequest)
			}
		})
	}
}

// TestSideBySide: a health pair on two nodes starts both pods, then both
// loads together, so that the pair's windows see the same moment; on one
// node (not together) each trial runs through on its own; a trial that
// never reports its start holds no one.
func TestSideBySide(t *testing.T) {
	run := func(together bool, startFor []time.Duration) (startsEnd time.Time, loads []time.Time) {
		var mu sync.Mutex
		loads = make([]time.Time, len(startFor))
		sideBySide(len(startFor), together, func(i int, started func()) {
			time.Sleep(startFor[i])
			mu.Lock()
			if now := time.Now(); now.After(startsEnd) {
				startsEnd = now
			}
			mu.Unlock()
			started()
			loads[i] = time.Now()
		})
		return startsEnd, loads
	}
	end, loads := run(true, []time.Duration{10 * time.Millisecond, 150 * time.Millisecond})
	for i, l := range loads {
		if l.Before(end) {
			t.Errorf("together: load %d began %v before the last pod started", i, end.Sub(l))
		}
	}
	end, loads = run(false, []time.Duration{10 * time.Millisecond, 150 * time.Millisecond})
	if !loads[0].Before(end) {
		t.Errorf("one at a time: load 0 waited for the other trial's start")
	}
	finished := make(chan struct{})
	go func() {
		sideBySide(2, true, func(i int, started func()) {
			if i == 1 {
				started()
			}
		})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(5 * time.Second):
		t.Fatal("a trial that never called started held the other")
	}
}

// TestWaitReadyUnschedulable: a trial pod the scheduler cannot place
// (its quota is more than any node has room for) fails its wait after
// unschedulableFor, naming --quotas, not after the 5-minute podSchedule.
func TestWaitReadyUnschedulable(t *testing.T) {
	defer func(d time.Duration) { unschedulableFor = d }(unschedulableFor)
	unschedulableFor = 300 * time.Millisecond
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "trial-1", Namespace: "lab"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient cpu."}}}}
	r := &runPods{cs: kfake.NewSimpleClientset(p), ns: "lab"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := r.waitReady(ctx, "trial-1", "--kube-image gofit:1", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "--quotas") || !strings.Contains(err.Error(), "Insufficient cpu") {
		t.Errorf("unschedulable pod: %v, want an error naming --quotas and the scheduler's reason", err)
	}
}

// TestRunNamespace: without --namespace the run's pods went to the
// kubeconfig context's namespace, else default, not the one deploy/lab
// makes with the lab's Roles (issue 51, item 9).
func TestRunNamespace(t *testing.T) {
	if got := runNamespace(Options{Context: "team"}); got != "gofit-lab" {
		t.Errorf("no --namespace: %q, want gofit-lab (deploy/lab's)", got)
	}
	// The namespace deploy/lab makes.
	b, err := os.ReadFile("../../../../../deploy/lab/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "kind: Namespace\nmetadata:\n  name: "+DefaultNamespace+"\n") {
		t.Errorf("deploy/lab/rbac.yaml makes no namespace %s", DefaultNamespace)
	}
	if got := runNamespace(Options{Namespace: "bench"}); got != "bench" {
		t.Errorf("--namespace bench: %q", got)
	}
}

// TestServesSecure: the lab reads an agent over https with a token when
// its pod runs --metrics-secure, and over plain http otherwise.
func TestServesSecure(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"node", "--root=/host", "--metrics-secure"}, true},
		{[]string{"node", "--metrics-secure=true"}, true},
		{[]string{"node", "--metrics-secure=false"}, false},
		{[]string{"node"}, false},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Args: c.args}}}}
		if got := servesSecure(p); got != c.want {
			t.Errorf("args %q: secure %v, want %v", c.args, got, c.want)
		}
	}
}

// TestLoadPodStartReadFails: when the API server cannot be read while the
// load pod starts, start says so, naming the pod it created, and keeps
// it. It used to read the name of the nil pod the failed wait returned,
// and panic.
func TestLoadPodStartReadFails(t *testing.T) {
	cs := kfake.NewSimpleClientset()
	cs.PrependReactor("create", "pods", func(a ktesting.Action) (bool, runtime.Object, error) {
		p := a.(ktesting.CreateAction).GetObject().(*corev1.Pod)
		p.Name = p.GenerateName + "x1"
		return false, nil, nil
	})
	cs.PrependReactor("get", "pods", func(ktesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	owner := &runOwner{cs: cs, ns: "lab", id: "r1", ref: metav1.OwnerReference{Kind: "ConfigMap", Name: "gofit-lab-r1"}}
	lp := &loadPod{cs: cs, ns: "lab", image: "gofit:test", token: "t"}
	err := lp.start(context.Background(), &runPods{cs: cs, ns: "lab", owner: owner}, "", false)
	if err == nil || !strings.Contains(err.Error(), "gofit-lab-r1-load-x1") || !strings.Contains(err.Error(), "request timed out") {
		t.Fatalf("start: %v, want an error naming the pod and the cause", err)
	}
	if got := lp.name(); got != "gofit-lab-r1-load-x1" {
		t.Errorf("name() = %q after the failed wait, want the pod created", got)
	}
}

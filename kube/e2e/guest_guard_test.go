package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/tools/promtest"
)

// The experiment-guard step's pace: the shipped guard looks every 5
// minutes over a 2-hour plan; here every 15 s over 10 minutes, 40 looks
// (the flags docs/experiment.md names; harm is anytime-valid, so the
// looks' number costs it no error).
var guardArgs = []string{"experiment", "guard", "--namespaces=shop", "--interval=15s", "--window=15s", "--warm-up=15s",
	"--planned=10m", "--resamples=200", "--metrics-addr=:9090"}

// experimentGuard is issue 42's step on the node: the guard, as the
// experiments component deploys it (its Deployment, RBAC and leader
// election; only its Prometheus and pace changed), judges two running
// experiments under the same load:
//   - guarded: the control fitted by gofit, and an arm with GOGC=off and
//     no GOMEMLIMIT whose heap grows into the limit, where the kernel
//     OOM-kills it, or it stalls and fails its readiness probe: its
//     pods restart, back off and are not ready much of the time;
//   - aa: gofit's fit against itself.
//
// The guard must stop the harmful arm (the Lease's annotation, which the
// webhook then reads), evict its pods so that the ReplicaSet replaces
// them with the control, and write an ArmStopped Event on the
// Deployment; and it must leave the A/A pair running.
func (g *guestRun) experimentGuard(t *testing.T) {
	c := g.c
	step := time.Now()
	phase := func(what string) {
		t.Logf("experiment-guard: %s at %.1fs", what, time.Since(step).Seconds())
	}
	g.experimentsOn(t)
	ksm := g.kubeStateMetrics(t)
	phase("webhook with experiments, kube-state-metrics")

	// One Deployment at a time: under TCG, six pods admitted at once
	// missed their arms' 1 s deadline or the webhook's 2 s timeout.
	apply := func(app string) {
		t.Helper()
		err := poll(3*time.Minute, "kubectl apply -f testdata/guard.yaml -l app="+app, func() (bool, error) {
			_, _, err := c.run("apply", "-f", "/src/kube/e2e/testdata/guard.yaml", "-l", "app="+app)
			return err == nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(context.Background())
	t.Cleanup(func() {
		stopLoad()
		wg.Wait()
		// The guard's Prometheus ends with this step: scale the guard
		// down rather than have it fail its looks in later steps.
		c.run("scale", "deployment", "-n", "gofit-system", "gofit-experiment-guard", "--replicas=0")
		var dirs []string
		if list, err := c.cs.CoreV1().Pods("shop").List(g.ctx, metav1.ListOptions{LabelSelector: "app in (guarded, aa)"}); err == nil {
			for _, p := range list.Items {
				dirs = append(dirs, podCgroup(&p, string(p.UID)))
			}
		}
		c.run("delete", "-f", "/src/kube/e2e/testdata/guard.yaml", "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=5m")
		// Gone from the node too, before the steps that read every level
		// under kubepods.
		if err := waitGone(3*time.Minute, "the guard step's pods' cgroups", dirs); err != nil {
			t.Log(err)
		}
	})
	// Prometheus, then the guard, before the experiments' pods: the
	// guard must already be looking when the arm first restarts (in CI
	// on 2026-12-07 its pod started 85 s after the load, when the arm
	// had restarted ten times, and the stop came 180 s after the first
	// restart). Prometheus scrapes the node's targets now and the pods'
	// own once they have addresses (a reload).
	nodeTargets := []promtest.Target{
		{Job: "kubelet", Addr: nodeIP + ":10250", Path: "/metrics/cadvisor", HTTPS: true, Labels: map[string]string{"metrics_path": "/metrics/cadvisor"}, Interval: cadvisorScrape},
		{Job: "kube-state-metrics", Addr: ksm},
	}
	prom := promtest.Start(t, promtest.Binaries{Prometheus: "/mnt/prometheus/prometheus"}, promtest.Config{
		Interval: 5 * time.Second, Targets: nodeTargets, Ready: 5 * time.Minute, Host: nodeIP})
	phase("prometheus at " + prom.URL)

	// The guard: the component's Deployment (one replica, from the
	// overlay), pointed at this Prometheus at the step's pace.
	args, _ := json.Marshal(append(guardArgs, "--prometheus="+prom.URL))
	patch := fmt.Sprintf(`[{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": %s}, {"op": "replace", "path": "/spec/replicas", "value": 1}]`, args)
	if _, stderr, err := c.run("patch", "deployment", "-n", "gofit-system", "gofit-experiment-guard", "--type", "json", "-p", patch); err != nil {
		t.Fatalf("patch the guard: %v: %s", err, stderr)
	}
	gp := g.waitDeployment(t, "gofit-system", "gofit-experiment-guard", 1, 6*time.Minute)
	// The guard's log from the node's own files: kubectl logs goes
	// through the kubelet, which a busy guest answers too late.
	guardLog := func() string {
		files, _ := filepath.Glob("/var/log/pods/gofit-system_" + gp[0].Name + "_*/*/*.log")
		var out []string
		for _, f := range files {
			b, _ := os.ReadFile(f)
			out = append(out, f+":\n"+tailLines(string(b), 40))
		}
		return strings.Join(out, "\n")
	}
	if err := poll(3*time.Minute, "the guard leading", func() (bool, error) {
		return strings.Contains(guardLog(), "msg=leading"), fmt.Errorf("guard's log:\n%s", guardLog())
	}); err != nil {
		t.Fatal(err)
	}
	phase("guard " + gp[0].Name + " running and leading")

	// nogc's first end (a container's first exit) and first restart (the
	// kubelet's next container of it, RESTARTS 1), as its pods' statuses
	// say (firstEnd, firstRestart). Watched every 2 s from before the
	// pods exist. Issue 57 asks for the stop within 3 minutes of the
	// first restart; the step says both.
	var firstMu sync.Mutex
	var firstEndAt, firstRestartAt time.Time
	noteRestarts := func() {
		list, err := c.cs.CoreV1().Pods("shop").List(g.ctx, metav1.ListOptions{LabelSelector: "app=guarded,gofit.dev/arm=nogc"})
		if err != nil {
			return
		}
		firstMu.Lock()
		defer firstMu.Unlock()
		for _, p := range list.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if at, ok := firstEnd(cs, time.Now()); ok && (firstEndAt.IsZero() || at.Before(firstEndAt)) {
					firstEndAt = at
				}
				if at, ok := firstRestart(cs, time.Now()); ok && (firstRestartAt.IsZero() || at.Before(firstRestartAt)) {
					firstRestartAt = at
				}
			}
		}
	}
	watchCtx, stopWatch := context.WithCancel(g.ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for tick := time.NewTicker(2 * time.Second); ; {
			noteRestarts()
			select {
			case <-watchCtx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { stopWatch(); <-watched }()

	apply("guarded")
	guarded := g.armedPods(t, "shop", "guarded", 10)
	apply("aa")
	aa := g.armedPods(t, "shop", "aa", 4)
	arms := map[string][]string{}
	for _, p := range append(append([]corev1.Pod(nil), guarded...), aa...) {
		arms[p.Labels["gofit.dev/experiment"]+"/"+p.Labels["gofit.dev/arm"]] = append(arms[p.Labels["gofit.dev/experiment"]+"/"+p.Labels["gofit.dev/arm"]], p.Name)
		if p.Labels["gofit.dev/arm"] == "nogc" {
			if env := envOf(p.Spec.Containers[0]); env["GOGC"] != "off" || env["GOFIT"] != "off" || env["GOMEMLIMIT"] != "" {
				t.Errorf("pod %s of arm nogc: env %v, want GOGC=off and GOFIT=off alone", p.Name, env)
			}
		}
	}
	for a, want := range map[string]int{"guarded/base": 5, "guarded/nogc": 5, "aa/a": 2, "aa/a-again": 2} {
		if len(arms[a]) != want {
			g.describe(t, "shop")
			t.Fatalf("pods by experiment/arm %v: want 5 in each of guarded's arms and 2 in each of aa's", arms)
		}
	}
	phase(fmt.Sprintf("14 pods with their arms %v", arms))

	targets := append([]promtest.Target(nil), nodeTargets...)
	for _, p := range append(append([]corev1.Pod(nil), guarded...), aa...) {
		targets = append(targets, promtest.Target{Job: "service", Addr: p.Status.PodIP + ":8080",
			Labels: map[string]string{"namespace": p.Namespace, "pod": p.Name, "container": "service"}})
	}
	reload, cancelReload := context.WithTimeout(g.ctx, 2*time.Minute)
	err := prom.SetTargets(reload, targets)
	cancelReload()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(append([]corev1.Pod(nil), guarded...), aa...) {
		// Requests (the latency histogram) that leave 2 MiB of garbage
		// each, every 500 ms, and reads of /metrics (about 150 KiB)
		// every second: about 4.3 MB/s, so without a GC the heap reaches
		// the 32Mi limit seconds after each start. The guard's count
		// test needed 9 restarts against none, and CrashLoopBackOff
		// spaces each pod's restarts 10, 20, 40 s apart: with 3 pods an
		// arm the 9th restart is every pod's third, and the stop came
		// 108 to 189 s after the first restart, over issue 57's 3
		// minutes in CI (2026-12-06); with 5 it was in the arm's second
		// round, which comes after each pod's next container start, 1-2
		// minutes under TCG: the stop came 113-281 s after the first end
		// (2026-12-07). Its first-end test (a log-rank test on the pods
		// still at risk) now calls 5 of 5 first ends against none, the
		// first round (eleventh session). Nine pods an arm, for a stop
		// on the first round by counts alone, were too many:
		// 22 pods under this load left every pod of both arms unready
		// 77-86% of the time, and in 12 minutes of load no nogc container
		// ended once (2026-12-07, tenth session). The same bytes in
		// half the requests of 1 MiB every 250 ms: in a run where the
		// guest ran slow from its start, 14 pods at that rate left the
		// controls unready 90% of the time too (2026-12-06).
		// Paced, not closed loops: six pods each running flat out at
		// their limits starved the guest's kubelet until the node went
		// NotReady and every pod, the controls too, failed its probes
		// (2026-11-28).
		pacedLoad(loadCtx, &wg, "http://"+p.Status.PodIP+":8080/work?n=200&garbage=2048", 500*time.Millisecond)
		pacedLoad(loadCtx, &wg, "http://"+p.Status.PodIP+":8080/metrics", time.Second)
	}
	loaded := time.Now()
	phase("every pod scraped and loaded")

	// The stop, on the Lease; then the Event; then the arm's pods replaced.
	var st admission.GuardStatus
	err = poll(12*time.Minute, "the guard stopping arm nogc of guarded", func() (bool, error) {
		l, err := c.cs.CoordinationV1().Leases("shop").Get(g.ctx, admission.ExperimentLease("guarded", "Deployment/guarded"), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if st, err = admission.ParseGuardStatus(l.Annotations); err != nil {
			return false, err
		}
		_, stopped := st.Stopped["nogc"]
		return stopped, fmt.Errorf("guard status %s; pods: %s", st, g.podsOf("shop", "app=guarded"))
	})
	if err != nil {
		g.describe(t, "shop")
		t.Fatalf("%v\nguard's log:\n%s", err, guardLog())
	}
	if _, ok := st.Stopped["base"]; ok || len(st.Stopped) != 1 {
		t.Errorf("guard status %s: want nogc stopped alone (the control is never stopped)", st)
	}
	stopWatch()
	<-watched
	// The load has done its part: without it the guest replaces the
	// evicted pods sooner (340 s under it in CI, 2026-12-07).
	stopLoad()
	wg.Wait()
	phase(fmt.Sprintf("nogc stopped %.0fs after the load started: %s", st.Stopped["nogc"].At.Sub(loaded).Seconds(), st.Stopped["nogc"].Reason))
	stopAt := st.Stopped["nogc"].At
	since := func(at time.Time, what string) string {
		if at.IsZero() {
			return "before any " + what
		}
		return fmt.Sprintf("%.0fs after its %s at %s", stopAt.Sub(at).Seconds(), what, at.Format(time.RFC3339))
	}
	phase(fmt.Sprintf("nogc stopped at %s: %s, %s", stopAt.Format(time.RFC3339), since(firstEndAt, "first end"), since(firstRestartAt, "first restart")))
	if !firstRestartAt.IsZero() && stopAt.Sub(firstRestartAt) > 3*time.Minute {
		t.Errorf("nogc stopped %s: want within 3 minutes of it (issue 57)\nguard's log:\n%s", since(firstRestartAt, "first restart"), guardLog())
	}

	err = poll(2*time.Minute, "an ArmStopped Event on Deployment guarded", func() (bool, error) {
		ev, err := c.cs.CoreV1().Events("shop").List(g.ctx, metav1.ListOptions{FieldSelector: "reason=ArmStopped"})
		if err != nil {
			return false, err
		}
		var seen []string
		for _, e := range ev.Items {
			seen = append(seen, e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+": "+e.Message)
			if e.InvolvedObject.Kind == "Deployment" && e.InvolvedObject.Name == "guarded" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "nogc") {
				t.Logf("event: %s", e.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("ArmStopped events: %q", seen)
	})
	if err != nil {
		t.Error(err)
	}
	err = poll(6*time.Minute, "guarded's pods all in the control, 10 ready", func() (bool, error) {
		list, err := c.cs.CoreV1().Pods("shop").List(g.ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		if err != nil {
			return false, err
		}
		ready := 0
		var live []corev1.Pod
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			live = append(live, p)
			if p.Labels["gofit.dev/arm"] == "nogc" {
				return false, fmt.Errorf("pod %s still in nogc: %s", p.Name, podSummary(list.Items))
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == 10 && len(live) == 10, fmt.Errorf("%d of %d ready: %s", ready, len(live), podSummary(live))
	})
	if err != nil {
		g.describe(t, "shop")
		t.Fatalf("%v\nguard's log:\n%s", err, guardLog())
	}
	phase("nogc's pods replaced by the control's")

	// The A/A pair ran all along under the same load and guard.
	l, err := c.cs.CoordinationV1().Leases("shop").Get(g.ctx, admission.ExperimentLease("aa", "Deployment/aa"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if aaSt, err := admission.ParseGuardStatus(l.Annotations); err != nil || len(aaSt.Stopped) > 0 {
		t.Errorf("A/A experiment's guard status %s (%v): want no arm stopped", aaSt, err)
	}
	if list, err := c.cs.CoreV1().Pods("shop").List(g.ctx, metav1.ListOptions{LabelSelector: "app=aa"}); err == nil {
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				t.Errorf("A/A pod %s: %s (deleting: %v), want running, never evicted", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
			}
		}
	}
	t.Logf("guard's log:\n%s", guardLog())
}

// pacedLoad sends a GET to url every d, one at a time (a slow answer
// delays the next), until ctx ends.
func pacedLoad(ctx context.Context, wg *sync.WaitGroup, url string, d time.Duration) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := &http.Client{Timeout: 10 * time.Second}
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if resp, err := c.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
}

// podsOf summarises the pods of a selector, for a poll's error.
func (g *guestRun) podsOf(ns, selector string) string {
	list, err := g.c.cs.CoreV1().Pods(ns).List(g.ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var s []string
	for _, p := range list.Items {
		s = append(s, p.Labels["gofit.dev/arm"]+":"+podSummary([]corev1.Pod{p}))
	}
	return strings.Join(s, "; ")
}

// firstRestart is when the kubelet first restarted a container of the
// guard step's nogc arm (its next container's start), as its status says,
// read at now: the running container's start while it has restarted
// once, or, once that one has ended too, the last termination's start;
// else, restarted more often, now (when the step first saw it: later
// than the truth, so kinder to the bound, but the step watches every 2 s
// and a second restart comes minutes after the first). ok is false for a
// container never restarted.
func firstRestart(cs corev1.ContainerStatus, now time.Time) (at time.Time, ok bool) {
	switch {
	case cs.RestartCount == 0:
		return time.Time{}, false
	case cs.RestartCount > 1:
		return now, true
	case cs.State.Running != nil && !cs.State.Running.StartedAt.IsZero():
		return cs.State.Running.StartedAt.Time, true
	case cs.State.Terminated != nil && !cs.State.Terminated.StartedAt.IsZero():
		return cs.State.Terminated.StartedAt.Time, true
	case cs.LastTerminationState.Terminated != nil && !cs.LastTerminationState.Terminated.StartedAt.IsZero():
		return cs.LastTerminationState.Terminated.StartedAt.Time, true
	}
	return now, true
}

// firstEnd is when a container of the guard step's nogc arm first
// ended, as its status says, read at now: the current state's end while
// the container waits for its first restart (the kubelet restarts a
// first end at once, but on the emulated node the next container takes
// minutes to start, and until then the end is only the current state);
// else the last termination while it has restarted once at most (a
// later status holds only the last one); else, once restarted, now (the
// step first saw it then). ok is false for a container that has not
// ended.
func firstEnd(cs corev1.ContainerStatus, now time.Time) (at time.Time, ok bool) {
	if t := cs.State.Terminated; cs.RestartCount == 0 && t != nil && !t.FinishedAt.IsZero() {
		return t.FinishedAt.Time, true
	}
	last := cs.LastTerminationState.Terminated
	if cs.RestartCount == 0 && last == nil {
		return time.Time{}, false
	}
	if cs.RestartCount <= 1 && last != nil && !last.FinishedAt.IsZero() {
		return last.FinishedAt.Time, true
	}
	return now, true
}

package experiment

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/tools/promtest"
)

// TestRealHarmfulArmStopped is issue 53's harmful arm on this machine's
// processes, outside the emulated node: an experiment whose arm nogc
// runs GOGC=off with no GOMEMLIMIT in a 32 MiB cgroup, beside the
// control base (gofit's fit), 3 "pods" an arm, each examples/service in
// its own cgroup v1 group. Under requests that leave 256 KiB of garbage
// each, 4 a second a pod, nogc's heap reaches the limit and the kernel
// OOM-kills it; a supervisor starts it again in the same cgroup after
// the kubelet's crash-loop back-off (10 s, doubling), and serves what
// kube-state-metrics would of it (restarts, the last end OOMKilled).
// A real Prometheus scrapes all of it every second. Every 15 s the
// guard's own judge (PromJudge: Fetch and Analyze from the run's start,
// harm alone, anytime-valid at 5%) looks, as the guard does at
// --interval=15s. nogc must be called harmful, and base never; the time
// from nogc's first OOM kill to the stop is logged and recorded in
// docs/results/experiment.md (issue 53 asks for 3 minutes). About 3
// minutes.
func TestRealHarmfulArmStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short (a 3-minute real experiment)")
	}
	// Beside the package's other real experiment: each mostly waits on
	// its scrapes and looks (together about 0.75 of a core alone), and
	// make test's serial pass then spends their longer one, not both.
	t.Parallel()
	bins := promtest.Need(t)
	const (
		spec     = `{"name":"guarded","control":"base","arms":[{"name":"base","fit":"gofit"},{"name":"nogc","env":{"GOGC":"off"}}]}`
		perArm   = 3
		memory   = 32 << 20
		interval = 15 * time.Second
		bound    = 6 * time.Minute // the test's own end: twice issue 53's 3 minutes, and the start
	)
	exp, err := admission.ParseExperiment(spec)
	if err != nil {
		t.Fatal(err)
	}
	exe := promtest.BuildService(t, "../../../..")
	pods, envs := admitArms(t, spec, perArm*len(exp.Arms), 0.25, memory)
	var targets []promtest.Target
	procs := map[string]*promtest.Restarting{}
	for i, p := range pods {
		procs[p.Name] = promtest.StartRestarting(t, exe, p.Name, promtest.Limits{CPU: 0.25, Period: realPeriod, Weight: realWeight, Memory: memory}, envs[i])
		targets = append(targets, promtest.Target{Job: p.Name, Addr: procs[p.Name].Addr,
			Labels: map[string]string{"namespace": realNS, "pod": p.Name, "container": "app"}})
	}
	// What kube-state-metrics would say of the supervised processes.
	ksm := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		for _, p := range pods {
			ends, oom, _, last := procs[p.Name].Ends()
			fmt.Fprintf(&b, "kube_pod_container_status_restarts_total{namespace=%q,pod=%q,container=\"app\"} %d\n", realNS, p.Name, procs[p.Name].Restarts())
			if ends > 0 {
				v := 0
				if oom {
					v = 1
				}
				fmt.Fprintf(&b, "kube_pod_container_status_last_terminated_reason{namespace=%q,pod=%q,container=\"app\",reason=\"OOMKilled\"} %d\n", realNS, p.Name, v)
				fmt.Fprintf(&b, "kube_pod_container_status_last_terminated_timestamp{namespace=%q,pod=%q,container=\"app\"} %d\n", realNS, p.Name, last.Unix())
			}
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(b.String()))
	}), ReadHeaderTimeout: 5 * time.Second}
	ksmAddr := serveLocal(t, ksm)
	targets = append(targets, promtest.Target{Job: "kube-state-metrics", Addr: ksmAddr})
	prom := promtest.Start(t, bins, promtest.Config{Interval: time.Second, Targets: targets})
	pc, err := api.NewClient(api.Config{Address: prom.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// On any end, a t.Fatal's too: stop the load, then wait for it. (Two
	// defers would wait first, for a load that never stops: a failed run
	// hung until go test's timeout killed it, and its cgroups were left.)
	defer func() { cancel(); wg.Wait() }()
	for _, p := range procs {
		wg.Go(func() { pacedGarbage(ctx, "http://"+p.Addr+"/work?n=200&garbage=256", 250*time.Millisecond) })
	}
	started := time.Now()
	seq, err := NewSequential(Looks{Every: interval, Planned: 10 * time.Minute, Alpha: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	judge := PromJudge{
		Fetch: func(ctx context.Context, q Query) (Input, error) { return Fetch(ctx, pc, livePods(pods), q) },
		Query: Query{Window: interval, Latency: "http_request_duration_seconds", ErrorMatcher: `code=~"5.."`, Resamples: 200, Seed: 1},
		Harm:  DefaultHarm(),
	}
	run := Running{Namespace: realNS, Spec: exp, Started: started}
	firstOOM := func() time.Time {
		var first time.Time
		for _, p := range pods {
			if _, _, f, _ := procs[p.Name].Ends(); !f.IsZero() && (first.IsZero() || f.Before(first)) {
				first = f
			}
		}
		return first
	}
	var stopped *Results
	for time.Since(started) < bound && stopped == nil {
		time.Sleep(interval)
		r, err := judge.Judge(ctx, run, seq)
		if err != nil {
			// As the guard: a look without data judges nothing (the first
			// scrapes may not have landed yet).
			t.Logf("look at %.0fs failed: %v", time.Since(started).Seconds(), err)
			continue
		}
		if r == nil {
			continue
		}
		for _, a := range r.Arms {
			if a.Harmful && a.Name == "base" {
				t.Errorf("the control base was called harmful: %v", a.Harms)
			}
			if a.Harmful && a.Name == "nogc" {
				stopped = r
			}
		}
		var line []string
		for _, a := range r.Arms {
			line = append(line, fmt.Sprintf("%s restarts=%.0f oom=%.0f unready=%.2f e=%.3g", a.Name, a.Restarts, a.OOMKills, float64(a.Unready), float64(a.HarmEvidence)))
		}
		t.Logf("look at %3.0fs: %s", time.Since(started).Seconds(), strings.Join(line, "; "))
	}
	cancel()
	first := firstOOM()
	for _, p := range pods {
		n, oom, _, _ := procs[p.Name].Ends()
		if p.Labels[admission.LabelArm] == "base" && n > 0 {
			t.Errorf("control pod %s ended %d times (last an OOM kill: %v): the fitted service must live in 32 MiB", p.Name, n, oom)
		}
	}
	switch {
	case first.IsZero():
		t.Fatalf("no pod of nogc was OOM-killed in %v: the arm never became harmful", bound)
	case stopped == nil:
		t.Fatalf("nogc, OOM-killed first at %.0fs, was not stopped by %v", first.Sub(started).Seconds(), bound)
	}
	var sum strings.Builder
	WriteSummary(&sum, stopped)
	t.Logf("nogc stopped %.0fs after its first OOM kill (%.0fs after the load started), at the look of %s:\n%s",
		time.Since(first).Seconds(), first.Sub(started).Seconds(), stopped.To.UTC().Format(time.RFC3339), sum.String())
	if v := verdictOf(stopped, "nogc", "harm"); v.Verdict != Harmful {
		t.Errorf("nogc's harm verdict %q, want harmful", v.Verdict)
	}
}

// pacedGarbage asks url every every, each request on its own, until ctx
// ends: the garbage a request leaves, at a steady rate.
func pacedGarbage(ctx context.Context, url string, every time.Duration) {
	c := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
}

// serveLocal serves srv on a free loopback port until the test ends.
func serveLocal(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

package experiment

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/admission/admissiontest"
	"github.com/gofit-dev/gofit/tools/promtest"
)

// What the real test runs: each pod of an arm is examples/service in its
// own cgroup at 250m and 256 MiB, with the env the webhook injected into
// that pod, scraped by a real Prometheus with the pod's namespace and name
// as labels, under the same open-loop traffic per pod.
const (
	realNS      = "shop"
	realCPU     = 0.25
	realMemory  = 256 << 20
	realPeriod  = 100 * time.Millisecond
	realWindow  = 5 * time.Second
	realSpan    = 2 * time.Minute
	realRate    = 110 // requests a second per pod, of about 1.75 ms of CPU each: 3/4 of 250m fitted, more than all of it starved
	realPerArm  = 2
	realWeight  = 64 // cpu.shares as for 64 cores: the quota, not the neighbours, limits each pod
	realWorkArg = "/work?n=2000"
)

// TestRealPrometheusExperiment runs an experiment on real processes and a
// real Prometheus (tools/promtest): arms fitted and fitted-again are
// the same setting (an A/A pair); starved has GOMEMLIMIT=1MiB, far below
// what the runtime holds, so its GC runs all the time (up to the GC CPU
// limiter's half of the CPU). The report must call no difference between
// fitted and fitted-again, and call starved worse on CPU per request and
// p99. About 2.5 minutes.
//
// GOMAXPROCS=2 at 250m and GOGC=1 were the first choices of a worse arm,
// and neither was worse here: this handler hashes and barely allocates
// (docs/results/experiment.md). The report said so, which is its job.
func TestRealPrometheusExperiment(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short (a 3.5-minute real experiment)")
	}
	bins := promtest.Need(t)
	const spec = `{"name":"gmp","control":"fitted","arms":[{"name":"fitted","fit":"gofit"},{"name":"fitted-again","fit":"gofit"},{"name":"starved","env":{"GOMAXPROCS":"1","GOMEMLIMIT":"1MiB"}}]}`
	exp, err := admission.ParseExperiment(spec)
	if err != nil {
		t.Fatal(err)
	}
	exe := promtest.BuildService(t, "../../../..")
	m := admission.NewMutator(fit.Policy{}, admission.WithArmAssigner(&inTurn{}))
	var pods []corev1.Pod
	var targets []promtest.Target
	addrs := map[string]string{}
	for i := range realPerArm * len(exp.Arms) {
		pod := admissiontest.Pod(fmt.Sprintf("web-%d", i), corev1.Container{Name: "app", Image: "example.com/service:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU: *resource.NewMilliQuantity(int64(realCPU*1000), resource.DecimalSI), corev1.ResourceMemory: *resource.NewQuantity(realMemory, resource.BinarySI)}}})
		pod.Namespace = realNS
		pod.Annotations = map[string]string{admission.AnnotationExperiment: spec}
		pod.CreationTimestamp = metav1.Now()
		res := m.Admit(context.Background(), pod)
		if len(res.Warnings) > 0 {
			t.Fatalf("admission warnings: %q", res.Warnings)
		}
		got := admissiontest.ApplyPatchOps(t, pod, res.Patch)
		var env []string
		for _, e := range got.Spec.Containers[0].Env {
			env = append(env, e.Name+"="+e.Value)
		}
		t.Logf("pod %s, arm %s: %v", got.Name, got.Labels[admission.LabelArm], env)
		addrs[got.Name] = promtest.StartService(t, exe, got.Name, promtest.Limits{CPU: realCPU, Period: realPeriod, Weight: realWeight, Memory: realMemory}, env)
		targets = append(targets, promtest.Target{Job: got.Name, Addr: addrs[got.Name],
			Labels: map[string]string{"namespace": realNS, "pod": got.Name, "container": "app"}})
		pods = append(pods, *got)
	}
	prom := promtest.Start(t, bins, promtest.Config{Interval: time.Second, Targets: targets})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Go(func() { openLoop(ctx, addr, realRate) })
	}
	time.Sleep(5 * time.Second) // warm up: the first scrapes and GC cycles
	from := time.Now().Truncate(time.Second)
	time.Sleep(realSpan + 2*time.Second) // the last window's scrape lands
	cancel()
	wg.Wait()

	pc, err := api.NewClient(api.Config{Address: prom.URL})
	if err != nil {
		t.Fatal(err)
	}
	in, err := Fetch(context.Background(), v1.NewAPI(pc), livePods(pods), Query{
		Namespace: realNS, Name: "gmp", From: from, To: from.Add(realSpan), Window: realWindow,
		Latency: "http_request_duration_seconds", ErrorMatcher: `code=~"5.."`, Resamples: 2000, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	var sum strings.Builder
	WriteSummary(&sum, r)
	t.Logf("report:\n%s", sum.String())
	if dir := os.Getenv("GOFIT_EXPERIMENT_OUT"); dir != "" {
		if _, err := WriteFiles(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range r.Arms {
		if len(a.Pods) != realPerArm || a.Windows < r.Windows-1 {
			t.Errorf("arm %s: pods %v, %d of %d windows with data", a.Name, a.Pods, a.Windows, r.Windows)
		}
	}
	for _, s := range []string{"latency", "cpu", "throttling", "gc", "memory"} {
		if !in.Have[s] {
			t.Errorf("no %s source: %v", s, in.Sources)
		}
	}
	// The A/A arm: never harmful, and no verdict on the two headline
	// metrics. Each metric's false-verdict rate is about 2% (the A/A
	// simulation, docs/results/experiment.md), so over the report's
	// dozen metrics one false verdict in some run is expected: the others
	// are logged, not failed on, or CI would fail one run in six.
	for _, v := range r.Verdicts {
		if v.Arm != "fitted-again" {
			continue
		}
		headline := v.Metric == "p99_seconds" || v.Metric == "cpu_seconds_per_request"
		switch {
		case v.Verdict == Harmful, headline && (v.Verdict == "better" || v.Verdict == "worse"):
			t.Errorf("A/A: fitted-again %s is %s (%s)", v.Metric, v.Verdict, ratioText(v))
		case v.Verdict == "better" || v.Verdict == "worse":
			t.Logf("A/A: fitted-again %s is %s (%s): one of the ~2%% false verdicts a metric has", v.Metric, v.Verdict, ratioText(v))
		}
	}
	// The worse arm is worse on p99 because the rate puts it over its
	// quota (realRate's comment): if the load fell short of that rate, the
	// test did not test what it says. One run on a busy host reached 73
	// of 110 requests a second per pod with a ticker that dropped ticks,
	// and its p99 verdict was undecided (×1.16 [0.93–1.46]).
	// The starved arm may serve less: it is meant to be over its quota.
	for _, a := range r.Arms {
		if got := a.Metrics["requests_per_second"].Value; a.Name != "starved" && got < 0.9*realRate {
			t.Errorf("arm %s: %.1f requests a second per pod, want the %d sent (at least 90%%): the generator fell behind", a.Name, got, realRate)
		}
	}
	for _, metric := range []string{"cpu_seconds_per_request", "p99_seconds"} {
		if v := verdictOf(r, "starved", metric); v.Verdict != "worse" {
			t.Errorf("GOMEMLIMIT=1MiB: %s is %s (%s), want worse", metric, v.Verdict, ratioText(v))
		}
	}
}

// inTurn gives arms in turn, as the API server's counts would for pods
// created one by one.
type inTurn struct{ n int }

func (a *inTurn) Assign(_ context.Context, _ *corev1.Pod, e *admission.Experiment) (admission.Assignment, error) {
	arm := e.Arms[a.n%len(e.Arms)].Name
	a.n++
	return admission.Assignment{Arm: arm, Ticket: fmt.Sprint(a.n)}, nil
}

// livePods answers as the API server would, from the admitted pods.
type livePods []corev1.Pod

func (p livePods) Experiment(context.Context, string, string) (Spec, error) { return specOf(p), nil }

// openLoop sends rate requests a second to addr, each at its scheduled
// time whether or not the ones before have answered, as a pod behind a
// load balancer gets its share of traffic. The schedule is kept from the
// start: a sender that falls behind (a busy host) sends what it owes at
// once, where a time.Ticker would drop the ticks and lower the rate.
func openLoop(ctx context.Context, addr string, rate int) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
		if wait := time.Until(at); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			return
		}
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+realWorkArg, nil)
			resp, err := c.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
}

package experiment

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
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
	realNS       = "shop"
	realCPU      = 0.25
	realMemory   = 256 << 20
	realPeriod   = 100 * time.Millisecond
	realWindow   = 5 * time.Second
	realSpan     = 2 * time.Minute
	realLoad     = 0.7 // of each pod's quota a fitted pod spends on traffic: room to spare fitted, little starved
	realPerArm   = 2
	realWeight   = 64 // cpu.shares as for 64 cores: the quota, not the neighbours, limits each pod
	realWorkArg  = "/work?n=2000"
	realInFlight = 64
)

// TestRealPrometheusExperiment runs an experiment on real processes and a
// real Prometheus (tools/promtest): arms fitted and fitted-again are
// the same setting (an A/A pair); starved has GOMEMLIMIT=1MiB, far below
// what the runtime holds, so its GC runs all the time (up to the GC CPU
// limiter's half of the CPU). The report must call no difference between
// fitted and fitted-again, call starved worse on CPU per request and GC
// share, and give verdicts that agree with their intervals. Its p99 is
// logged, not judged: how much a starved arm's latency suffers depends on
// how fast the machine is (issue 44). About 2.5 minutes.
//
// GOMAXPROCS=2 at 250m and GOGC=1 were the first choices of a worse arm,
// and neither was worse here: this handler hashes and barely allocates
// (docs/results/experiment.md). The report said so, which is its job.
func TestRealPrometheusExperiment(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short (a 3.5-minute real experiment)")
	}
	// Beside the package's other real experiment: each mostly waits on
	// its scrapes and looks (together about 0.75 of a core alone), and
	// make test's serial pass then spends their longer one, not both.
	t.Parallel()
	bins := promtest.Need(t)
	const spec = `{"name":"gmp","control":"fitted","arms":[{"name":"fitted","fit":"gofit"},{"name":"fitted-again","fit":"gofit"},{"name":"starved","env":{"GOMAXPROCS":"1","GOMEMLIMIT":"1MiB"}}]}`
	exp, err := admission.ParseExperiment(spec)
	if err != nil {
		t.Fatal(err)
	}
	exe := promtest.BuildService(t, "../../../..")
	pods, envs := admitArms(t, spec, realPerArm*len(exp.Arms), realCPU, realMemory)
	var targets []promtest.Target
	addrs := map[string]string{}
	for i, p := range pods {
		addrs[p.Name] = promtest.StartService(t, exe, p.Name, promtest.Limits{CPU: realCPU, Period: realPeriod, Weight: realWeight, Memory: realMemory}, envs[i])
		targets = append(targets, promtest.Target{Job: p.Name, Addr: addrs[p.Name],
			Labels: map[string]string{"namespace": realNS, "pod": p.Name, "container": "app"}})
	}
	prom := promtest.Start(t, bins, promtest.Config{Interval: time.Second, Targets: targets})

	// The rate is set from what a request costs on this machine: a
	// hash-heavy request takes 1.7 ms of CPU with SHA instructions and
	// 7 ms without, and a fixed rate would overload every pod on one
	// machine and idle them on another.
	cost := requestCost(t, addrs[pods[0].Name])
	rate := max(5, int(realLoad*realCPU/cost))
	t.Logf("a request costs %.2f ms of CPU here: %d requests a second per pod", cost*1000, rate)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, addr := range addrs {
		wg.Go(func() { openLoop(ctx, addr, rate) })
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
	in, err := Fetch(context.Background(), pc, livePods(pods), Query{
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
	// Every arm has its pods and data for its windows. The starved arm's
	// GC runs without pause inside a quarter of a core, so some of its
	// scrapes time out (CI's run: 22 of 24 windows on a machine without
	// SHA instructions); the healthy arms miss at most one window, the
	// starved one at most half.
	for _, a := range r.Arms {
		least := r.Windows - 1
		if a.Name == "starved" {
			least = r.Windows / 2
		}
		if len(a.Pods) != realPerArm || a.Windows < least {
			t.Errorf("arm %s: pods %v, %d of %d windows with data, want at least %d", a.Name, a.Pods, a.Windows, r.Windows, least)
		}
	}
	for _, s := range []string{"latency", "cpu", "throttling", "gc", "memory"} {
		if !in.Have[s] {
			t.Errorf("no %s source: %v", s, in.Sources)
		}
	}
	// Every verdict agrees with the interval printed beside it: better or
	// worse only where the interval excludes 1 on that side, same only
	// where it lies inside 1 ± the metric's margin.
	dirs := map[string]stats.Direction{}
	for _, m := range Metrics() {
		dirs[m.Name] = m.Dir
	}
	for _, v := range r.Verdicts {
		if v.Verdict == Harmful {
			continue
		}
		if msg := disagrees(v, dirs[v.Metric]); msg != "" {
			t.Errorf("%s %s: %s", v.Arm, v.Metric, msg)
		}
	}
	// The A/A pair decides nothing: fitted-again is the control's own
	// setting, so any better, worse or harmful is false. A dozen metrics
	// at 5% each would call one in many runs, so this is judged as the
	// guard and `gofit experiment` judge: 5% for any false
	// verdict over every test of the analysis (one look).
	seq, err := NewSequential(Looks{Every: realSpan, Planned: realSpan, Alpha: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	in.Seq = seq
	fw, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range fw.Verdicts {
		if v.Arm == "fitted-again" && (v.Verdict == Harmful || v.Verdict == stats.Better || v.Verdict == stats.Worse) {
			t.Errorf("A/A: fitted-again %s is %s (%s at %.4g%%)", v.Metric, v.Verdict, ratioText(v), 100*v.Level)
		}
	}
	// The starved arm shows what a 1 MiB GOMEMLIMIT must do on any
	// machine, whatever its speed or load: the GC runs all the time, so
	// its share of the CPU is worse, and the heap is never larger (one
	// run, ×0.37 smaller, is too few to demand "better"). What that
	// costs each request depends on how much CPU a request takes besides
	// its allocations: on this machine without SHA instructions (8 ms a
	// request) the 2026-11-28 run gave ×0.994 [0.825–1.157] where earlier
	// runs gave ×1.41 (issue 44), so it is asserted only never to be
	// better; latency likewise depends on the machine. The figures are in
	// docs/results/experiment.md.
	if v := verdictOf(r, "starved", "gc_cpu_share"); v.Verdict != stats.Worse {
		t.Errorf("GOMEMLIMIT=1MiB: gc_cpu_share is %s (%s), want worse", v.Verdict, ratioText(v))
	}
	if v := verdictOf(r, "starved", "heap_bytes"); v.Verdict == stats.Worse {
		t.Errorf("GOMEMLIMIT=1MiB: heap_bytes is worse (%s): a GC that never stops cannot grow the heap", ratioText(v))
	} else {
		t.Logf("GOMEMLIMIT=1MiB: heap_bytes %s (%s)", v.Verdict, ratioText(v))
	}
	if v := verdictOf(r, "starved", "cpu_seconds_per_request"); v.Verdict == stats.Better {
		t.Errorf("GOMEMLIMIT=1MiB: cpu_seconds_per_request is better (%s): a GC that never stops cannot make requests cheaper", ratioText(v))
	} else {
		t.Logf("GOMEMLIMIT=1MiB: cpu_seconds_per_request %s (%s)", v.Verdict, ratioText(v))
	}
	for _, a := range r.Arms {
		if got := float64(a.Metrics["requests_per_second"].Value); got < 0.9*float64(rate) {
			t.Logf("arm %s: %.1f requests a second per pod of the %d sent: the generator or the arm fell behind", a.Name, got, rate)
		}
	}
}

// admitArms admits n pods of the experiment spec (realNS, one container
// "app" limited to cpu cores and memory bytes) through the webhook's
// Mutator, arms given in turn, and returns them with each one's env as
// the webhook injected it.
func admitArms(t *testing.T, spec string, n int, cpu float64, memory int64) ([]corev1.Pod, [][]string) {
	t.Helper()
	m := admission.NewMutator(fit.Policy{}, admission.WithArmAssigner(&inTurn{}))
	var pods []corev1.Pod
	var envs [][]string
	for i := range n {
		pod := admissiontest.Pod(fmt.Sprintf("web-%d", i), corev1.Container{Name: "app", Image: "example.com/service:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU: *resource.NewMilliQuantity(int64(cpu*1000), resource.DecimalSI), corev1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI)}}})
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
		pods, envs = append(pods, *got), append(envs, env)
	}
	return pods, envs
}

// disagrees says how verdict v contradicts its own interval, or "".
func disagrees(v Verdict, d stats.Direction) string {
	lo, hi := float64(v.Low), float64(v.High)
	above, below := lo > 1, hi < 1
	worse := (above && d == stats.LowerIsBetter) || (below && d == stats.HigherIsBetter)
	better := (above && d == stats.HigherIsBetter) || (below && d == stats.LowerIsBetter)
	inside := lo >= 1-v.Margin && hi <= 1+v.Margin
	switch v.Verdict {
	case stats.Worse:
		if !worse {
			return fmt.Sprintf("worse, but its interval [%.3g, %.3g] does not lie on the worse side of 1", lo, hi)
		}
	case stats.Better:
		if !better {
			return fmt.Sprintf("better, but its interval [%.3g, %.3g] does not lie on the better side of 1", lo, hi)
		}
	case stats.Same:
		if !inside || above || below {
			return fmt.Sprintf("same, but its interval [%.3g, %.3g] is not inside 1 ± %.2g", lo, hi, v.Margin)
		}
	case stats.Undecided:
		if worse || better || inside {
			return fmt.Sprintf("undecided, but its interval [%.3g, %.3g] decides", lo, hi)
		}
	default:
		return fmt.Sprintf("unknown verdict %q", v.Verdict)
	}
	return ""
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

func (p livePods) Experiment(_ context.Context, _, _, workload string) (Spec, error) {
	return specOf(p, workload), nil
}

// openLoop sends rate requests a second to addr, each at its scheduled
// time whether or not the ones before have answered, as a pod behind a
// load balancer gets its share of traffic. The schedule is kept from the
// start: a sender that falls behind (a busy host) sends what it owes at
// once, where a time.Ticker would drop the ticks and lower the rate.
//
// At most realInFlight requests are outstanding: one more is dropped, not
// queued. An arm that cannot keep up would otherwise collect connections
// until its listen backlog fills and Prometheus's scrapes time out too.
func openLoop(ctx context.Context, addr string, rate int) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: realInFlight}}
	slots := make(chan struct{}, realInFlight)
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
		select {
		case slots <- struct{}{}:
		default:
			continue // the arm is realInFlight requests behind
		}
		wg.Go(func() {
			defer func() { <-slots }()
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

// requestCost is the CPU seconds one request to addr takes, measured
// with requests one at a time for two seconds and the service's own
// process_cpu_seconds_total (which counts in 10 ms ticks: two seconds
// of a 250m quota is 50 of them).
func requestCost(t *testing.T, addr string) float64 {
	t.Helper()
	before := processCPU(t, addr)
	n := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); n++ {
		resp, err := http.Get("http://" + addr + realWorkArg)
		if err != nil {
			t.Fatalf("calibrate on %s: %v", addr, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	used := processCPU(t, addr) - before
	if used <= 0 || n == 0 {
		t.Fatalf("calibrate on %s: %d requests used %.3fs of CPU", addr, n, used)
	}
	return used / float64(n)
}

// processCPU reads process_cpu_seconds_total from addr's /metrics.
func processCPU(t *testing.T, addr string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s/metrics: process_cpu_seconds_total %q: %v", addr, v, err)
			}
			return f
		}
	}
	t.Fatalf("%s/metrics has no process_cpu_seconds_total", addr)
	return 0
}

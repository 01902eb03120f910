package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/admission"
)

// promStub answers range queries from canned matrices: the first rule
// whose substring the query contains wins; any other query gets an empty
// matrix, as Prometheus gives for series that do not exist. It checks the
// series selector every query must carry.
type promStub struct {
	t     *testing.T
	rules []stubRule
	seen  []string
}

type stubRule struct {
	contains string
	result   string // JSON of data.result
}

func (p *promStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		p.t.Error(err)
	}
	q := r.Form.Get("query")
	p.seen = append(p.seen, q)
	result := "[]"
	for _, rule := range p.rules {
		if strings.Contains(q, rule.contains) {
			result = rule.result
			break
		}
	}
	fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":%s}}`, result)
}

// series is a matrix entry for pod with one value per window end.
func series(from time.Time, labels map[string]string, values ...float64) string {
	lb, _ := json.Marshal(labels)
	var vs []string
	for i, v := range values {
		vs = append(vs, fmt.Sprintf(`[%d,"%g"]`, from.Add(time.Duration(i+1)*time.Minute).Unix(), v))
	}
	return fmt.Sprintf(`{"metric":%s,"values":[%s]}`, lb, strings.Join(vs, ","))
}

func nativeSeries(from time.Time, pod string, counts ...float64) string {
	var hs []string
	for i, c := range counts {
		hs = append(hs, fmt.Sprintf(`[%d,{"count":"%g","sum":"1","buckets":[[0,"0","0.01","%g"],[0,"0.01","0.1","%g"]]}]`,
			from.Add(time.Duration(i+1)*time.Minute).Unix(), c, c*0.9, c*0.1))
	}
	return fmt.Sprintf(`{"metric":{"pod":%q},"histograms":[%s]}`, pod, strings.Join(hs, ","))
}

type pods map[string][]string

func (p pods) Experiment(context.Context, string, string, string) (Spec, error) {
	return Spec{Arms: []string{"a", "b"}, Control: "a", Pods: p, Restarts: map[string]float64{"b": 1}, OOMKills: map[string]float64{}}, nil
}

func fetchFrom(t *testing.T, stub *promStub, live PodSource) Input {
	t.Helper()
	srv := httptest.NewServer(stub)
	defer srv.Close()
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Unix(1_700_000_000, 0)
	in, err := Fetch(context.Background(), c, live, Query{Namespace: "shop", Name: "g", From: from, To: from.Add(3 * time.Minute),
		Window: time.Minute, Latency: "http_request_duration_seconds", ErrorMatcher: `code=~"5.."`})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stub.seen {
		if strings.Contains(q, "kube_pod_labels") || strings.Contains(q, "kube_pod_owner") {
			continue
		}
		if !strings.Contains(q, `namespace="shop"`) || !strings.Contains(q, `pod=~"`) {
			t.Errorf("query without the pods' selector: %s", q)
		}
	}
	return in
}

func TestFetchClassicHistogramAndSources(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	bucket := func(pod, le string, vs ...float64) string {
		return series(from, map[string]string{"pod": pod, "le": le}, vs...)
	}
	stub := &promStub{t: t, rules: []stubRule{
		// a gone pod of arm b, kept by kube-state-metrics
		{"kube_pod_labels", "[" + series(from, map[string]string{"pod": "b-old", "label_gofit_dev_arm": "b"}, 1, 1, 1) + "]"},
		{"http_request_duration_seconds_bucket", "[" + strings.Join([]string{
			bucket("a-1", "0.01", 90, 90, 90), bucket("a-1", "0.1", 100, 100, 100), bucket("a-1", "+Inf", 100, 100, 100),
			bucket("b-1", "0.01", 50, 50, 50), bucket("b-1", "0.1", 98, 100, 100), bucket("b-1", "+Inf", 100, 100, 100),
		}, ",") + "]"},
		{`http_request_duration_seconds_count{namespace="shop"`, "[" + series(from, map[string]string{"pod": "b-1"}, 2, 0, 0) + "]"},
		// cAdvisor has nothing; gofit's CPU only for arm a; the process's for both
		{"gofit_cpu_usage_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "]"},
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 9, 9, 9) + "]"},
	}}
	in := fetchFrom(t, stub, pods{"a": {"a-1"}, "b": {"b-1"}})
	if len(in.Arms) != 2 || in.Arms[0].Name != "a" || fmt.Sprint(in.Arms[1].Pods) != "[b-1 b-old]" || in.Control != "a" {
		t.Fatalf("arms %+v", in.Arms)
	}
	if !strings.Contains(in.Sources["pods"], "1 not live") || !strings.Contains(in.Sources["latency"], "classic") || in.Sources["cpu"] != "process_cpu_seconds_total" {
		t.Errorf("sources %v", in.Sources)
	}
	w := in.Arms[1].Windows[0][0] // b-1, first window
	if w.Requests != 100 || w.Errors != 2 || w.CPUSeconds != 9 || w.Has&(HasLatency|HasCPU) != HasLatency|HasCPU {
		t.Errorf("b-1 window 0: %+v", w)
	}
	if got := fmt.Sprint(w.Latency); got != "[{0 0.01 50} {0.01 0.1 48} {0.1 +Inf 2}]" {
		t.Errorf("buckets %s", got)
	}
	if old := in.Arms[1].Windows[1][0]; old.Has != 0 {
		t.Errorf("the gone pod has no series here but has %+v", old)
	}
	// Arm b's restart came from the API server: no Prometheus source.
	if r := in.Arms[1].Windows[0][2].Restarts; r != 1 || !strings.Contains(in.Sources["restarts"], "API server") {
		t.Errorf("restarts %v from %q", r, in.Sources["restarts"])
	}
	res, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	// One restart is not harm relative to the control (TestAnalyzeHarmIsRelativeToTheControl).
	if res.Arms[1].Restarts != 1 || res.Arms[1].Harmful {
		t.Errorf("arm b: %v restarts, harmful %v (%v)", res.Arms[1].Restarts, res.Arms[1].Harmful, res.Arms[1].Harms)
	}
}

func TestFetchNativeHistogram(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	stub := &promStub{t: t, rules: []stubRule{
		{"histogram_count", "[]"},
		{"increase(http_request_duration_seconds{", "[" + nativeSeries(from, "a-1", 100, 100, 100) + "," + nativeSeries(from, "b-1", 50, 50, 50) + "]"},
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 9, 9, 9) + "]"},
	}}
	in := fetchFrom(t, stub, pods{"a": {"a-1"}, "b": {"b-1"}})
	if !strings.Contains(in.Sources["latency"], "native") {
		t.Fatalf("sources %v", in.Sources)
	}
	w := in.Arms[0].Windows[0][1]
	if w.Requests != 100 || len(w.Latency) != 2 || w.Latency[1] != (Bucket{0.01, 0.1, 10}) {
		t.Errorf("a-1 window 1: %+v", w)
	}
}

func TestFetchNoPods(t *testing.T) {
	srv := httptest.NewServer(&promStub{t: t})
	defer srv.Close()
	c, _ := api.NewClient(api.Config{Address: srv.URL})
	from := time.Unix(1_700_000_000, 0)
	_, err := Fetch(context.Background(), c, nil, Query{Namespace: "shop", Name: "g", From: from, To: from.Add(time.Hour), Window: time.Minute, Latency: "x"})
	if err == nil || !strings.Contains(err.Error(), "--metric-labels-allowlist") {
		t.Errorf("error %v does not say how to keep gone pods' arms", err)
	}
}

// TestFetchExtraMatchers: --match cluster=... reaches every query, or a
// Prometheus holding several clusters would mix their pods of one name.
func TestFetchExtraMatchers(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	stub := &promStub{t: t, rules: []stubRule{
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 9, 9, 9) + "]"},
	}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fetch(context.Background(), c, pods{"a": {"a-1"}, "b": {"b-1"}}, Query{Namespace: "shop", Name: "g", From: from, To: from.Add(3 * time.Minute),
		Window: time.Minute, Latency: "http_request_duration_seconds", ErrorMatcher: `code=~"5.."`, Matchers: []string{`cluster="prod"`}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range stub.seen {
		if n, want := strings.Count(q, `cluster="prod"`), strings.Count(q, "namespace="); n != want || n == 0 {
			t.Errorf("query %s: %d cluster matchers for %d selectors", q, n, want)
		}
	}
}

type startedPods struct{ pods }

func (p startedPods) Experiment(ctx context.Context, ns, name, workload string) (Spec, error) {
	s, _ := p.pods.Experiment(ctx, ns, name, workload)
	s.Started = map[string]time.Time{"b-1": time.Unix(1_700_000_000, 0).Add(-30 * time.Second)}
	return s, nil
}

// TestFetchLeavesOutWarmUp: a pod's first --warm-up after it started is
// missing data, not its figures; its restarts still count.
func TestFetchLeavesOutWarmUp(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	stub := &promStub{t: t, rules: []stubRule{
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 60, 9, 9) + "]"},
		{"kube_pod_start_time", "[" + series(from, map[string]string{"pod": "a-1"}, float64(from.Unix()-100), float64(from.Unix()-100), float64(from.Unix()-100)) + "]"},
	}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	in, err := Fetch(context.Background(), c, startedPods{pods{"a": {"a-1"}, "b": {"b-1"}}}, Query{Namespace: "shop", Name: "g", From: from, To: from.Add(3 * time.Minute),
		Window: time.Minute, Latency: "http_request_duration_seconds", ErrorMatcher: `code=~"5.."`, WarmUp: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b := in.Arms[1].Windows[0]
	// Its first window is left out but marked as a window it existed in
	// (HasPod: at risk of the harm tests' events).
	if b[0].Has != HasPod || b[0].CPUSeconds != 0 || b[1].CPUSeconds != 9 || b[2].Restarts != 1 {
		t.Errorf("b-1 (started 30 s before, 1 min warm-up): %+v", b)
	}
	if a := in.Arms[0].Windows[0]; a[0].CPUSeconds != 6 { // started 100 s before (kube_pod_start_time)
		t.Errorf("a-1 (warm before the span): %+v", a)
	}
}

// TestFetchReadiness: kube-state-metrics' ready condition gives each
// window's share not ready; without it, the share of failed scrapes.
func TestFetchReadiness(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	cpu := stubRule{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 9, 9, 9) + "]"}
	for _, c := range []struct {
		rule stubRule
		src  string
	}{
		{stubRule{`kube_pod_status_ready{namespace="shop"`, "[" + series(from, map[string]string{"pod": "a-1"}, 0, 0, 0) + "," + series(from, map[string]string{"pod": "b-1"}, 0, 0.5, 1) + "]"}, "kube_pod_status_ready"},
		{stubRule{`avg_over_time(up{namespace="shop"`, "[" + series(from, map[string]string{"pod": "a-1"}, 0, 0, 0) + "," + series(from, map[string]string{"pod": "b-1"}, 0, 0.5, 1) + "]"}, "up (scrapes that failed)"},
	} {
		in := fetchFrom(t, &promStub{t: t, rules: []stubRule{c.rule, cpu}}, pods{"a": {"a-1"}, "b": {"b-1"}})
		b := in.Arms[1].Windows[0]
		if !in.Have["ready"] || !strings.HasPrefix(in.Sources["ready"], c.src) || b[1].Unready != 0.5 || b[2].Unready != 1 || b[0].Has&HasReady == 0 {
			t.Errorf("%s: have %v, source %q, b-1 windows %+v", c.src, in.Have["ready"], in.Sources["ready"], b)
		}
	}
}

// workloadPod is a live pod of experiment g, arm arm, in Deployment deploy.
func workloadPod(name, deploy, arm string) corev1.Pod {
	yes := true
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
		Labels:          map[string]string{admission.LabelExperiment: "g", admission.LabelArm: arm, "pod-template-hash": "abc12"},
		Annotations:     map[string]string{admission.AnnotationExperiment: "name: g\narms: [{name: a, fit: gofit}, {name: b, fit: none}]"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: deploy + "-abc12", Controller: &yes}}}}
}

// livePodsOf is a PodSource over real pod objects, as the API server
// lists them.
type livePodsOf []corev1.Pod

func (p livePodsOf) Experiment(_ context.Context, _, _, workload string) (Spec, error) {
	return specOf(p, workload), nil
}

// TestFetchPerWorkload: an experiment is its name within one workload.
// Two Deployments that both run gmp in shop are two experiments: a report
// without --workload names both and asks for one, and one with it counts
// only that workload's pods, live and gone (by kube_pod_owner).
func TestFetchPerWorkload(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	live := livePodsOf{workloadPod("web-1", "web", "a"), workloadPod("web-2", "web", "b"), workloadPod("api-1", "api", "a"), workloadPod("api-2", "api", "b")}
	stub := &promStub{t: t, rules: []stubRule{
		{"kube_pod_labels", "[" + series(from, map[string]string{"pod": "web-old", "label_gofit_dev_arm": "b"}, 1, 1, 1) + "," +
			series(from, map[string]string{"pod": "api-old", "label_gofit_dev_arm": "a"}, 1, 1, 1) + "," +
			series(from, map[string]string{"pod": "who-old", "label_gofit_dev_arm": "a"}, 1, 1, 1) + "]"},
		{"kube_pod_owner", "[" + series(from, map[string]string{"pod": "web-old", "owner_kind": "ReplicaSet", "owner_name": "web-7zz9b4"}, 1, 1, 1) + "," +
			series(from, map[string]string{"pod": "api-old", "owner_kind": "ReplicaSet", "owner_name": "api-x4c9z"}, 1, 1, 1) + "]"},
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "web-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "api-1"}, 6, 6, 6) + "]"},
	}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	q := Query{Namespace: "shop", Name: "g", From: from, To: from.Add(3 * time.Minute), Window: time.Minute, Latency: "http_request_duration_seconds", ErrorMatcher: `code=~"5.."`}
	_, err = Fetch(context.Background(), c, live, q)
	if err == nil || !strings.Contains(err.Error(), "Deployment/api, Deployment/web") || !strings.Contains(err.Error(), "--workload") {
		t.Fatalf("two workloads, none named: %v, want an error naming both and --workload", err)
	}
	q.Workload = "Deployment/web"
	in, err := Fetch(context.Background(), c, live, q)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range in.Arms {
		got = append(got, a.Name+":"+strings.Join(a.Pods, ","))
	}
	if fmt.Sprint(got) != "[a:web-1 b:web-2,web-old]" || in.Workload != "Deployment/web" {
		t.Errorf("web's arms %v (workload %q), want [a:web-1 b:web-2,web-old]", got, in.Workload)
	}
	if !strings.Contains(strings.Join(in.Notes, "\n"), "1 gone pods of experiment g left out") {
		t.Errorf("notes %q: want the gone pod without an owner named", in.Notes)
	}
	// One workload live: it is the experiment, and its gone pods only.
	in, err = Fetch(context.Background(), c, live[2:], Query{Namespace: "shop", Name: "g", From: from, To: from.Add(3 * time.Minute), Window: time.Minute, Latency: "x", ErrorMatcher: `code=~"5.."`})
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, a := range in.Arms {
		got = append(got, a.Name+":"+strings.Join(a.Pods, ","))
	}
	if fmt.Sprint(got) != "[a:api-1,api-old b:api-2]" || in.Workload != "Deployment/api" {
		t.Errorf("api alone: arms %v (workload %q)", got, in.Workload)
	}
}

// Without kube_pod_owner a gone pod's workload is unknown: with two
// workloads live, such pods are left out (with a note), and a pod the API
// server lists live in another workload never counts.
func TestFetchPerWorkloadWithoutOwners(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	live := livePodsOf{workloadPod("web-1", "web", "a"), workloadPod("web-2", "web", "b"), workloadPod("api-1", "api", "a")}
	stub := &promStub{t: t, rules: []stubRule{
		{"kube_pod_labels", "[" + series(from, map[string]string{"pod": "web-old", "label_gofit_dev_arm": "b"}, 1, 1, 1) + "," +
			series(from, map[string]string{"pod": "api-1", "label_gofit_dev_arm": "a"}, 1, 1, 1) + "]"},
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "web-1"}, 6, 6, 6) + "]"},
	}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	in, err := Fetch(context.Background(), c, live, Query{Namespace: "shop", Name: "g", Workload: "Deployment/web", From: from, To: from.Add(3 * time.Minute),
		Window: time.Minute, Latency: "x", ErrorMatcher: `code=~"5.."`})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range in.Arms {
		got = append(got, a.Name+":"+strings.Join(a.Pods, ","))
	}
	if fmt.Sprint(got) != "[a:web-1 b:web-2]" {
		t.Errorf("web's arms %v, want [a:web-1 b:web-2]: api's live pod or a gone pod of unknown workload counted", got)
	}
	if !strings.Contains(strings.Join(in.Notes, "\n"), "1 gone pods of experiment g left out") {
		t.Errorf("notes %q: want the gone pod of unknown workload named", in.Notes)
	}
}

func TestOwnerWorkload(t *testing.T) {
	for _, c := range [][3]string{
		{"ReplicaSet", "web-5d8f7c", "Deployment/web"},
		{"ReplicaSet", "web-api-77bb9", "Deployment/web-api"},
		{"ReplicaSet", "my-rs", "ReplicaSet/my-rs"},
		{"ReplicaSet", "cache-primary", "ReplicaSet/cache-primary"},
		{"StatefulSet", "db", "StatefulSet/db"},
		{"<none>", "<none>", NoController},
		{"", "", NoController},
	} {
		if got := ownerWorkload(c[0], c[1]); got != c[2] {
			t.Errorf("ownerWorkload(%s, %s) = %s, want %s", c[0], c[1], got, c[2])
		}
	}
	for _, c := range []struct {
		gone, want string
		same       bool
	}{
		{"Deployment/web", "Deployment/web", true},
		{"Deployment/web", "Rollout/web", true},
		{"Deployment/web", "Rollout/api", false},
		{"Deployment/web", "StatefulSet/web", false},
		{NoController, NoController, true},
	} {
		if got := sameWorkload(c.gone, c.want); got != c.same {
			t.Errorf("sameWorkload(%s, %s) = %v", c.gone, c.want, got)
		}
	}
}

// boundaries is a matrix entry with one value per window boundary, from
// the span's start: what a counter's raw series gives at each step.
func boundaries(from time.Time, labels map[string]string, values ...float64) string {
	lb, _ := json.Marshal(labels)
	var vs []string
	for i, v := range values {
		if math.IsNaN(v) {
			continue
		}
		vs = append(vs, fmt.Sprintf(`[%d,"%g"]`, from.Add(time.Duration(i)*time.Minute).Unix(), v))
	}
	return fmt.Sprintf(`{"metric":%s,"values":[%s]}`, lb, strings.Join(vs, ","))
}

// TestFetchRestartsAreWholeAndOOMKillsKnown is issue 57's second item:
// restarts are the counter's whole increases per window (the guard
// logged increase()'s 10.3 and 11.8), and a restart whose container last
// ended OOMKilled is an OOM kill, as kube-state-metrics says, where the
// guard had logged oom_kills=0 beside ten restarts of an arm growing
// into its limit.
func TestFetchRestartsAreWholeAndOOMKillsKnown(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	nan := math.NaN()
	stub := &promStub{t: t, rules: []stubRule{
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 9, 9, 9) + "]"},
		{"kube_pod_container_status_restarts_total", "[" +
			// b-1 had 2 restarts before the span: 0, then 1, then 2.
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, 2, 2, 3, 5) + "," +
			// a-1's series is new in the second window, with a restart;
			// then its counter is reset to 0 (a reset is never negative).
			boundaries(from, map[string]string{"pod": "a-1", "container": "app"}, nan, nan, 1, 0) + "]"},
		{`kube_pod_container_status_last_terminated_reason{`, "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, 0, 0, 0, 1) + "]"},
	}}
	in := fetchFrom(t, stub, pods{"a": {"a-1"}, "b": {"b-1"}})
	var got [2][3]float64
	var ooms [2][3]float64
	for a := range 2 {
		for i, w := range in.Arms[a].Windows[0] {
			got[a][i], ooms[a][i] = w.Restarts, w.OOMKills
		}
	}
	if got != [2][3]float64{{0, 1, 0}, {0, 1, 2}} || ooms != [2][3]float64{{0, 0, 0}, {0, 0, 2}} {
		t.Errorf("restarts per window %v, OOM kills %v; want [[0 1 0] [0 1 2]] and [[0 0 0] [0 0 2]]", got, ooms)
	}
	if !strings.Contains(in.Sources["restarts"], "whole increases") || !strings.Contains(in.Sources["oom"], "OOMKilled") {
		t.Errorf("sources %v", in.Sources)
	}
	for _, q := range stub.seen {
		if strings.Contains(q, "increase(kube_pod_container_status_restarts_total") || strings.Contains(q, "increase(container_oom_events_total") {
			t.Errorf("an extrapolated count: %s", q)
		}
	}
	// Without kube-state-metrics' reasons, cAdvisor's OOM events, whole.
	stub.rules = append(stub.rules[:1], stubRule{"container_oom_events_total", "[" + boundaries(from, map[string]string{"pod": "b-1"}, 1, 2, 2, 4) + "]"})
	in = fetchFrom(t, stub, pods{"a": {"a-1"}, "b": {"b-1"}})
	for i, want := range []float64{1, 0, 2} {
		if w := in.Arms[1].Windows[0][i]; w.OOMKills != want {
			t.Errorf("cAdvisor: window %d: %v OOM kills, want %v", i, w.OOMKills, want)
		}
	}
	if !strings.HasPrefix(in.Sources["oom"], "container_oom_events_total") {
		t.Errorf("oom source %q", in.Sources["oom"])
	}
}

// TestFetchCountsAnEndWhenFirstSeen: the kubelet counts a restart once it
// has started the next container, after the crash-loop back-off and the
// start, and on the emulated e2e node the guard saw the first restarts
// about 80 s after the first OOM kills (2026-12-07): the stop came 180 s
// after the first death, against issue 57's 3 minutes. Each end, as its
// container's last termination time, counts in the window it is first
// seen; the restart counter that follows adds nothing, and makes up for
// two ends read as one.
func TestFetchCountsAnEndWhenFirstSeen(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	nan := math.NaN()
	const t1, t2, t3 = 1_700_000_030, 1_700_000_100, 1_700_000_110
	stub := &promStub{t: t, rules: []stubRule{
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 9, 9, 9) + "]"},
		// b-1 ends in the first window, restarts in the second; ends
		// twice in the second (read as one end), restarts twice in the
		// third.
		{"kube_pod_container_status_restarts_total", "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, 0, 0, 1, 3) + "," +
			boundaries(from, map[string]string{"pod": "a-1", "container": "app"}, 0, 0, 0, 0) + "]"},
		{"kube_pod_container_status_last_terminated_timestamp", "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, nan, t1, t3, t3) + "," +
			// a-1 ended before the span: not an end in it.
			boundaries(from, map[string]string{"pod": "a-1", "container": "app"}, t2-200, t2-200, t2-200, t2-200) + "]"},
		{`kube_pod_container_status_last_terminated_reason{`, "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, 0, 1, 1, 1) + "]"},
	}}
	in := fetchFrom(t, stub, pods{"a": {"a-1"}, "b": {"b-1"}})
	var got, ooms [2][3]float64
	for a := range 2 {
		for i, w := range in.Arms[a].Windows[0] {
			got[a][i], ooms[a][i] = w.Restarts, w.OOMKills
		}
	}
	if got != [2][3]float64{{0, 0, 0}, {1, 1, 1}} || ooms != [2][3]float64{{0, 0, 0}, {1, 1, 1}} {
		t.Errorf("restarts per window %v, OOM kills %v; want [[0 0 0] [1 1 1]] for both (each end when first seen, 3 in all)", got, ooms)
	}
	if !strings.Contains(in.Sources["restarts"], "last_terminated_timestamp") {
		t.Errorf("restarts' source %q: want the ends named", in.Sources["restarts"])
	}

	// The first end of a container is restarted at once, with no
	// back-off: on a slow node its next container takes minutes to
	// start, and until then it is neither a restart nor a last
	// termination. cAdvisor saw the kernel's OOM kills 2 minutes before
	// (the e2e node, 2026-12-07): the kill counts when seen, as an end
	// and as an OOM kill, and the restart that follows adds nothing.
	stub.rules = []stubRule{stub.rules[0],
		{"kube_pod_container_status_restarts_total", "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, 0, 0, 0, 1) + "," +
			boundaries(from, map[string]string{"pod": "a-1", "container": "app"}, 0, 0, 0, 0) + "]"},
		// One series a container: the first, OOM-killed, and the
		// restarted one, new in the last window.
		{"container_oom_events_total", "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app", "id": "/c1"}, 0, 1, 1, 1) + "," +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app", "id": "/c2"}, nan, nan, nan, 0) + "]"},
	}
	in = fetchFrom(t, stub, pods{"a": {"a-1"}, "b": {"b-1"}})
	for a := range 2 {
		for i, w := range in.Arms[a].Windows[0] {
			got[a][i], ooms[a][i] = w.Restarts, w.OOMKills
		}
	}
	if got != [2][3]float64{{0, 0, 0}, {1, 0, 0}} || ooms != [2][3]float64{{0, 0, 0}, {1, 0, 0}} {
		t.Errorf("with cAdvisor: restarts per window %v, OOM kills %v; want [[0 0 0] [1 0 0]] for both", got, ooms)
	}
	if !strings.HasPrefix(in.Sources["oom"], "container_oom_events_total") || !strings.Contains(in.Sources["restarts"], "container_oom_events_total") {
		t.Errorf("sources %v: want cAdvisor's kills for both", in.Sources)
	}
}

// TestFetchOOMKillsFromBothSources: on the e2e node (2026-12-07, eleventh
// session) the guard logged oom_kills=0 beside 9 restarts of an arm
// whose containers the kernel OOM-killed seconds after each start:
// cAdvisor's series were there, each container's at 0, and went before
// a scrape showed 1, and the guard read OOM kills from cAdvisor alone.
// Each pod's OOM kills are the soonest count of cAdvisor's and of the
// restarts kube-state-metrics says ended OOMKilled.
func TestFetchOOMKillsFromBothSources(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	nan := math.NaN()
	stub := &promStub{t: t, rules: []stubRule{
		{"process_cpu_seconds_total", "[" + series(from, map[string]string{"pod": "a-1"}, 6, 6, 6) + "," + series(from, map[string]string{"pod": "b-1"}, 9, 9, 9) + "]"},
		{"kube_pod_container_status_restarts_total", "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, 0, 1, 2, 3) + "," +
			boundaries(from, map[string]string{"pod": "a-1", "container": "app"}, 0, 0, 0, 0) + "]"},
		{`kube_pod_container_status_last_terminated_reason{`, "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app"}, 0, 1, 1, 1) + "]"},
		// cAdvisor saw b-1's third container's kill, not the first two.
		{"container_oom_events_total", "[" +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app", "id": "/c1"}, 0, nan, nan, nan) + "," +
			boundaries(from, map[string]string{"pod": "b-1", "container": "app", "id": "/c3"}, nan, nan, 0, 1) + "," +
			boundaries(from, map[string]string{"pod": "a-1", "container": "app", "id": "/a1"}, 0, 0, 0, 0) + "]"},
	}}
	in := fetchFrom(t, stub, pods{"a": {"a-1"}, "b": {"b-1"}})
	var ooms [2][3]float64
	for a := range 2 {
		for i, w := range in.Arms[a].Windows[0] {
			ooms[a][i] = w.OOMKills
		}
	}
	if ooms != [2][3]float64{{0, 0, 0}, {1, 1, 1}} {
		t.Errorf("OOM kills per window %v; want [[0 0 0] [1 1 1]]: three restarts that ended OOMKilled, one of them seen by cAdvisor too", ooms)
	}
	if !strings.Contains(in.Sources["oom"], "container_oom_events_total") || !strings.Contains(in.Sources["oom"], "OOMKilled") {
		t.Errorf("oom source %q: want both named", in.Sources["oom"])
	}
}

// mergeEnds alone: the sooner of the two counts, never twice.
func TestMergeEnds(t *testing.T) {
	at := func(vs ...float64) *model.SampleStream {
		s := &model.SampleStream{Metric: model.Metric{"pod": "p", "container": "c"}}
		for i, v := range vs {
			s.Values = append(s.Values, model.SamplePair{Timestamp: model.Time(i+1) * 1000, Value: model.SampleValue(v)})
		}
		return s
	}
	for _, c := range []struct {
		restarts, ends []float64
		want           string
	}{
		{[]float64{0, 1, 1, 0}, []float64{1, 1, 0, 0}, "[1 1 0 0]"}, // ends lead, the counter follows
		{[]float64{0, 0, 2, 0}, []float64{1, 0, 0, 0}, "[1 0 1 0]"}, // two ends read as one: the counter's second
		{[]float64{1, 0, 0, 0}, []float64{0, 0, 0, 0}, "[1 0 0 0]"}, // an end ksm never showed
		{[]float64{0, 0, 0, 1}, []float64{0, 0, 0, 0}, "[0 0 0 1]"}, // the counter alone
	} {
		m := mergeEnds(model.Matrix{at(c.restarts...)}, model.Matrix{at(c.ends...)})
		var got []float64
		for _, p := range m[0].Values {
			got = append(got, float64(p.Value))
		}
		if fmt.Sprint(got) != c.want {
			t.Errorf("restarts %v, ends %v: merged %v, want %s", c.restarts, c.ends, got, c.want)
		}
	}
}

package fleet

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
)

// fakeProm answers the Prometheus HTTP API as a server holding a
// synthetic fleet would, for the queries Fetch sends: n Go containers
// (two pods per Deployment) and nonGo others. Container i's figures follow
// fakeFleet; the answers are written as they are made, so the server's
// own memory stays small next to the client's.
type fakeProm struct {
	n, nonGo int
	// cron: the pods are a CronJob's Jobs' (kube_pod_owner says Job,
	// kube_job_owner CronJob); hpa: web-0 has an HPA on CPU utilisation;
	// old: client_golang before v1.20 (no GOMAXPROCS, GOMEMLIMIT or GOGC
	// gauges); noContainer: pods whose go_info has no container label.
	cron, hpa, old bool
	noContainer    int
	queries        atomic.Int64
	mu             sync.Mutex
	seen           []string
	// hold keeps each range query open that long; inFlight and most
	// count them; failRange fails the range queries that contain it.
	hold           time.Duration
	inFlight, most atomic.Int64
	failRange      string
}

func (f *fakeProm) labels(i int) string {
	return fmt.Sprintf(`"namespace":"ns-%d","pod":"web-%d-abc-%d","container":"app"`, i/2%50, i/2, i)
}

// figures of container i at step time t (seconds): the unfitted ones
// (every third) run GOMAXPROCS 4 at 250m, throttled.
func (f *fakeProm) value(metric string, i int, t float64) float64 {
	day := math.Sin(2 * math.Pi * t / 86400)
	unfitted := i/2%3 == 0
	switch metric {
	case "cpu":
		return 0.1 + 0.05*day + float64(i%7)*0.01
	case "burst":
		return 3 * (0.1 + 0.05*day + float64(i%7)*0.01)
	case "throttled":
		if unfitted {
			return 0.3
		}
		return 0
	case "ws":
		return (120 + 10*day + float64(i%11)) * mib
	case "nonheap":
		return 30 * mib
	case "heapalloc":
		return (40 + 5*day) * mib
	case "goal":
		return 2 * (40 + 5*day) * mib
	case "live":
		return (40 + 5*day) * mib
	case "gc":
		return 0.01
	}
	panic(metric)
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.queries.Add(1)
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	q := r.Form.Get("query")
	f.mu.Lock()
	f.seen = append(f.seen, q)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 1<<16)
	defer bw.Flush()
	if strings.HasSuffix(r.URL.Path, "/query_range") {
		n := f.inFlight.Add(1)
		defer f.inFlight.Add(-1)
		for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
		}
		time.Sleep(f.hold)
		if f.failRange != "" && strings.Contains(q, f.failRange) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			bw.WriteString(`{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}`)
			return
		}
		f.rangeAnswer(bw, q, r.Form)
		return
	}
	t, _ := strconv.ParseFloat(r.Form.Get("time"), 64)
	vec := func(labels func(i int) string, value func(i int) float64) {
		bw.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
		for i := range f.n {
			if i > 0 {
				bw.WriteByte(',')
			}
			fmt.Fprintf(bw, `{"metric":{%s},"value":[%.3f,"%g"]}`, labels(i), t, value(i))
		}
		bw.WriteString(`]}}`)
	}
	plain := func(i int) string { return f.labels(i) }
	switch {
	case strings.HasPrefix(q, "count(") && strings.Contains(q, `container=""`):
		fmt.Fprintf(bw, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[%.3f,"%d"]}]}}`, t, f.noContainer)
	case strings.HasPrefix(q, "count(") && strings.Contains(q, `pod=""`):
		bw.WriteString(`{"status":"success","data":{"resultType":"vector","result":[]}}`)
	case strings.HasPrefix(q, "count("):
		fmt.Fprintf(bw, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[%.3f,"%d"]}]}}`, t, f.nonGo)
	case strings.Contains(q, "kube_replicaset_owner"):
		vec(func(i int) string {
			return fmt.Sprintf(`"namespace":"ns-%d","replicaset":"web-%d-abc","owner_kind":"Deployment","owner_name":"web-%d"`, i/2%50, i/2, i/2)
		}, func(int) float64 { return 1 })
	case strings.Contains(q, "kube_job_owner"):
		if f.cron {
			vec(func(i int) string {
				return fmt.Sprintf(`"namespace":"ns-%d","job_name":"web-%d-abc","owner_kind":"CronJob","owner_name":"web-%d"`, i/2%50, i/2, i/2)
			}, func(int) float64 { return 1 })
		} else {
			bw.WriteString(`{"status":"success","data":{"resultType":"vector","result":[]}}`)
		}
	case strings.Contains(q, "kube_horizontalpodautoscaler_info"):
		if f.hpa {
			fmt.Fprintf(bw, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"ns-0","horizontalpodautoscaler":"web-0-hpa","scaletargetref_kind":"Deployment","scaletargetref_name":"web-0"},"value":[%.3f,"1"]}]}}`, t)
		} else {
			bw.WriteString(`{"status":"success","data":{"resultType":"vector","result":[]}}`)
		}
	case strings.Contains(q, "kube_horizontalpodautoscaler_spec_target_metric"):
		fmt.Fprintf(bw, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"ns-0","horizontalpodautoscaler":"web-0-hpa","metric_name":"cpu"},"value":[%.3f,"80"]}]}}`, t)
	case strings.Contains(q, "kube_pod_created"):
		vec(func(i int) string { return fmt.Sprintf(`"namespace":"ns-%d","pod":"web-%d-abc-%d"`, i/2%50, i/2, i) }, func(i int) float64 { return float64(1.7e9 + i) })
	case f.old && (strings.Contains(q, "go_sched_gomaxprocs_threads") || strings.Contains(q, "go_gc_gomemlimit_bytes") || strings.Contains(q, "go_gc_gogc_percent")):
		bw.WriteString(`{"status":"success","data":{"resultType":"vector","result":[]}}`)
	case strings.Contains(q, "kube_pod_owner"):
		kind := "ReplicaSet"
		if f.cron {
			kind = "Job"
		}
		vec(func(i int) string {
			return fmt.Sprintf(`"namespace":"ns-%d","pod":"web-%d-abc-%d","owner_kind":"%s","owner_name":"web-%d-abc"`, i/2%50, i/2, i, kind, i/2)
		}, func(int) float64 { return 1 })
	case strings.Contains(q, "go_sched_gomaxprocs_threads"):
		vec(plain, func(i int) float64 { return map[bool]float64{true: 4, false: 1}[i/2%3 == 0] })
	case strings.Contains(q, "go_gc_gomemlimit_bytes"):
		vec(plain, func(i int) float64 {
			if i/2%3 == 0 {
				return math.MaxInt64
			}
			return 230 * mib
		})
	case strings.Contains(q, "go_gc_gogc_percent"):
		vec(plain, func(int) float64 { return 100 })
	case strings.Contains(q, "kube_pod_container_resource_"):
		bw.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
		for i := range f.n {
			if i > 0 {
				bw.WriteByte(',')
			}
			fmt.Fprintf(bw, `{"metric":{%s,"resource":"cpu"},"value":[%.3f,"0.25"]},{"metric":{%s,"resource":"memory"},"value":[%.3f,"%d"]}`,
				f.labels(i), t, f.labels(i), t, 256<<20)
		}
		bw.WriteString(`]}}`)
	case strings.Contains(q, "restarts_total"), strings.Contains(q, "container_oom_events_total"):
		vec(plain, func(int) float64 { return 0 })
	case strings.Contains(q, "go_info"):
		vec(func(i int) string { return f.labels(i) + `,"version":"go1.24.4"` }, func(int) float64 { return 1 })
	default:
		bw.WriteString(`{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}
}

func (f *fakeProm) rangeAnswer(bw *bufio.Writer, q string, form map[string][]string) {
	get := func(k string) float64 { v, _ := strconv.ParseFloat(form[k][0], 64); return v }
	start, end := get("start"), get("end")
	step, _ := time.ParseDuration(form["step"][0] + "s")
	if step == 0 {
		step = time.Duration(get("step") * float64(time.Second))
	}
	metric := ""
	for _, m := range []struct{ sub, name string }{
		{":30s])", "burst"},
		{"container_cpu_cfs_throttled_periods_total", "throttled"},
		{"container_cpu_usage_seconds_total", "cpu"},
		{"avg_over_time(container_memory_working_set_bytes", "nonheap"},
		{"container_memory_working_set_bytes", "ws"},
		{"min_over_time(go_memstats_heap_alloc_bytes", "heapalloc"},
		{"max_over_time(go_memstats_next_gc_bytes", "goal"},
		{"go_gc_heap_live_bytes", "live"},
		{"go_cpu_classes_gc_total_cpu_seconds_total", "gc"},
	} {
		if strings.Contains(q, m.sub) {
			metric = m.name
			break
		}
	}
	bw.WriteString(`{"status":"success","data":{"resultType":"matrix","result":[`)
	if metric != "" {
		for i := range f.n {
			if i > 0 {
				bw.WriteByte(',')
			}
			fmt.Fprintf(bw, `{"metric":{%s},"values":[`, f.labels(i))
			first := true
			for t := start; t <= end+1e-6; t += step.Seconds() {
				if !first {
					bw.WriteByte(',')
				}
				first = false
				bw.WriteByte('[')
				bw.WriteString(strconv.FormatFloat(t, 'f', 3, 64))
				bw.WriteString(`,"`)
				bw.WriteString(strconv.FormatFloat(f.value(metric, i, t), 'g', 6, 64))
				bw.WriteString(`"]`)
			}
			bw.WriteString(`]}`)
		}
	}
	bw.WriteString(`]}}`)
}

func fakeAPI(t testing.TB, f *fakeProm) api.Client {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFetchFake(t *testing.T) {
	f := &fakeProm{n: 6, nonGo: 4}
	end := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	var found [2]int
	in, err := Fetch(context.Background(), fakeAPI(t, f), Query{From: end.Add(-3 * 24 * time.Hour), To: end, Step: 10 * time.Minute, Namespace: "ns-1",
		Found: func(n, steps int) {
			if len(f.seen) == 0 || strings.Contains(strings.Join(f.seen, "\n"), "rate(") {
				t.Errorf("Found told after a series was read, or before the containers were known: %q", f.seen)
			}
			found = [2]int{n, steps}
		}})
	if err != nil {
		t.Fatal(err)
	}
	// gofit fleet sizes its heap before any series is read: 6 containers
	// of 432 steps each (3 days of 10 minutes; their pods are older than
	// the window).
	if found != [2]int{6, 6 * 432} {
		t.Errorf("Found(%d, %d), want 6 containers of 432 steps each", found[0], found[1])
	}
	// 5,000 containers over 7 days at 5-minute steps: their 8 series
	// (323 MB) and a quarter more, and 64 MiB: about 450 MiB.
	if g := HeapGoal(5000*2016, 1); g < 430<<20 || g > 470<<20 {
		t.Errorf("HeapGoal(5000 × 2016 steps, 1) = %d MiB, want about 450", g>>20)
	}
	if g, g1 := HeapGoal(5000*2016, 2), HeapGoal(5000*2016, 1); g-g1 != 64<<20 {
		t.Errorf("HeapGoal with 2 chunks in flight = %d MiB, want 64 MiB more than with one (%d MiB)", g>>20, g1>>20)
	}
	if in.NonGo != 4 || len(in.Groups) != 3 {
		t.Fatalf("non-Go %d, groups %d: %+v", in.NonGo, len(in.Groups), in.Sources)
	}
	// Pods group by their ReplicaSet's Deployment.
	g := in.Groups[0]
	if g.Workload != (Workload{Namespace: "ns-0", Kind: "Deployment", Name: "web-0"}) || len(g.Pods) != 2 || g.Container != "app" {
		t.Errorf("first group %+v with %d pods", g.Workload, len(g.Pods))
	}
	for _, q := range f.seen {
		if !strings.Contains(q, `namespace="ns-1"`) {
			t.Errorf("query without the namespace: %s", q)
		}
		if strings.Contains(q, "rate(") && !strings.Contains(q, "and on (cluster, namespace, pod, container) (group by (cluster, namespace, pod, container) (go_info") {
			t.Errorf("range query not limited to Go containers: %s", q)
		}
	}
	// 3 days of 10-minute steps go in chunks of a day.
	if got := strings.Count(strings.Join(f.seen, "\n"), "container_cpu_usage_seconds_total{") - 1; got != 3 {
		t.Errorf("%d CPU range queries, want 3 day chunks", got)
	}
	r := Analyze(in, Options{})
	c := r.Containers[0]
	if got := codes(c); !slicesEqual(got, []string{CodeGOMAXPROCSAboveLimit, CodeGOMEMLIMITUnset, CodeThrottledByGOMAXPROCS}) {
		t.Errorf("web-0 findings %q", got)
	}
	if c.Gofit.GOMAXPROCS != 1 || !c.Gofit.Enough() || c.Observed.Samples != 2*3*24*6 {
		t.Errorf("web-0: %+v samples %d", c.Gofit, c.Observed.Samples)
	}
}

// TestFetchCoverage: a CronJob's Jobs' pods group by the CronJob, an
// HPA on CPU utilisation leaves CPU alone, pods are ordered by
// kube_pod_created, and what could not be read is counted and said:
// series without a container label, and GOGC, GOMEMLIMIT and GOMAXPROCS
// where client_golang before v1.20 does not export them.
// TestFetchConcurrent: range queries in flight at once read exactly what
// one at a time reads, no more than Concurrency of them are open, and a
// failed one fails the fetch with its own error, not the others'
// cancellation.
func TestFetchConcurrent(t *testing.T) {
	end := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	q := Query{From: end.Add(-3 * 24 * time.Hour), To: end, Step: 10 * time.Minute}
	var got [2]Input
	for k, c := range []int{1, 4} {
		f := &fakeProm{n: 12, nonGo: 2, hold: 30 * time.Millisecond}
		q.Concurrency = c
		in, err := Fetch(context.Background(), fakeAPI(t, f), q)
		if err != nil {
			t.Fatal(err)
		}
		if m := f.most.Load(); m > int64(c) || (c > 1 && m < 2) {
			t.Errorf("Concurrency %d: %d range queries in flight at most", c, m)
		}
		got[k] = in
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("4 range queries at once read otherwise than one at a time:\n%+v\n%+v", got[1].Sources, got[0].Sources)
	}
	f := &fakeProm{n: 12, nonGo: 2, hold: 30 * time.Millisecond, failRange: "go_gc_heap_live_bytes"}
	q.Concurrency = 4
	_, err := Fetch(context.Background(), fakeAPI(t, f), q)
	if err == nil || !strings.Contains(err.Error(), "go_gc_heap_live_bytes") || !strings.Contains(err.Error(), "too many samples") {
		t.Errorf("a failed range query among 4: %v, want its own query and the server's reason", err)
	}
}

// TestFetchChunks: the series read in chunks of any size (a day's, one
// for the whole window, or 100 steps with a last partial chunk) are the
// same, step for step; only the count of queries tells them apart.
func TestFetchChunks(t *testing.T) {
	end := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	var want Input
	for _, c := range []struct{ steps, queries int }{{0, 3}, {432, 1}, {100, 5}} {
		f := &fakeProm{n: 4}
		in, err := Fetch(context.Background(), fakeAPI(t, f), Query{From: end.Add(-3 * 24 * time.Hour), To: end, Step: 10 * time.Minute, ChunkSteps: c.steps})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(strings.Join(f.seen, "\n"), "container_cpu_usage_seconds_total{") - 1; got != c.queries {
			t.Errorf("chunks of %d steps: %d CPU range queries, want %d", c.steps, got, c.queries)
		}
		delete(in.Sources, "queries")
		if c.steps == 0 {
			want = in
		} else if !reflect.DeepEqual(in, want) {
			t.Errorf("chunks of %d steps read otherwise than a day's", c.steps)
		}
	}
	if p := want.Groups[0].Pods[0].CPU; p.From != 0 || len(p.V) != 432 || !p.Any() {
		t.Errorf("CPU from step %d, %d steps", p.From, len(p.V))
	}
}

func TestFetchCoverage(t *testing.T) {
	f := &fakeProm{n: 6, nonGo: 4, cron: true, hpa: false, old: true, noContainer: 3}
	end := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	q := Query{From: end.Add(-3 * 24 * time.Hour), To: end, Step: 10 * time.Minute}
	in, err := Fetch(context.Background(), fakeAPI(t, f), q)
	if err != nil {
		t.Fatal(err)
	}
	g := in.Groups[0]
	if g.Workload != (Workload{Namespace: "ns-0", Kind: "CronJob", Name: "web-0"}) || len(g.Pods) != 2 || g.Pods[0].Created != 1.7e9 {
		t.Errorf("first group %+v, pods %+v", g.Workload, len(g.Pods))
	}
	if in.Unread[UnreadNoContainer] != 3 {
		t.Errorf("unread %v, want 3 without a container label", in.Unread)
	}
	r := Analyze(in, Options{})
	if r.Unread[UnreadNoContainer] != 3 || r.Gaps[GapGOGCUnknown] != 3 || r.Gaps[GapGOMEMLIMITUnknown] != 3 {
		t.Errorf("unread %v gaps %v", r.Unread, r.Gaps)
	}
	c := r.Containers[0]
	if why := strings.Join(c.Gofit.Reasons, "\n"); !strings.Contains(why, "GOGC assumed 100") {
		t.Errorf("GOGC assumed without a word:\n%s", why)
	}
	var tab strings.Builder
	WriteTable(&tab, r)
	for _, want := range []string{"3 " + UnreadNoContainer, "GOGC unknown"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}

	f = &fakeProm{n: 6, hpa: true}
	in, err = Fetch(context.Background(), fakeAPI(t, f), q)
	if err != nil {
		t.Fatal(err)
	}
	if h := in.Groups[0].HPA; h == nil || h.Name != "web-0-hpa" || !h.CPU || h.Memory {
		t.Fatalf("HPA %+v", h)
	}
	if in.Sources["cpu_burst"] != "" {
		t.Errorf("burst series read without CPUBurst: %q", in.Sources["cpu_burst"])
	}
	r = Analyze(in, Options{})
	c = r.Containers[0]
	if c.Gofit.CPURequest.Valid() || !c.Gofit.Memory.Valid() || c.KRR.CPURequest.Valid() || r.Gaps[GapHPA] != 1 {
		t.Errorf("under an HPA on CPU: gofit %v/%v KRR %v, gaps %v", c.Gofit.CPURequest, c.Gofit.Memory, c.KRR.CPURequest, r.Gaps)
	}
	if r2 := Analyze(in, Options{AllowHPA: true}); !r2.Containers[0].Gofit.CPURequest.Valid() {
		t.Errorf("AllowHPA: no CPU request")
	}

	// --cpu-limit burst reads each step's highest minute.
	q.CPUBurst = true
	in, err = Fetch(context.Background(), fakeAPI(t, f), q)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(in.Sources["cpu_burst"], "highest 1m rate") || !in.Groups[1].Pods[0].CPUPeak.Any() {
		t.Errorf("burst series: %q", in.Sources["cpu_burst"])
	}
	b := Analyze(in, Options{CPULimit: CPULimitBurst}).Containers[1].Gofit
	m := Analyze(in, Options{}).Containers[1].Gofit
	if !(float64(b.CPULimit) > 2*float64(m.CPULimit)) {
		t.Errorf("burst limit %v, mean limit %v: want the bursts' (3× the means)", b.CPULimit, m.CPULimit)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// BenchmarkFleet5000 reads a synthetic Prometheus of 5,000 Go containers
// over 7 days at 5-minute steps (the defaults) and analyses them,
// reporting the peak heap (the fake server's answers are streamed, so
// almost all of it is the client's). Goals: under 60 s and 500 MiB.
func BenchmarkFleet5000(b *testing.B) {
	f := &fakeProm{n: 5000, nonGo: 3000}
	prom := fakeAPI(b, f)
	end := time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		runtime.GC()
		var peak atomic.Uint64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			for {
				metrics.Read(s)
				if v := s[0].Value.Uint64(); v > peak.Load() {
					peak.Store(v)
				}
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		// As gofit fleet does: a soft memory limit of what the series need.
		old := debug.SetMemoryLimit(-1)
		in, err := Fetch(context.Background(), prom, Query{From: end.Add(-7 * 24 * time.Hour), To: end, Step: 5 * time.Minute,
			Found: func(_, steps int) { debug.SetMemoryLimit(HeapGoal(steps, 1)) }})
		if err != nil {
			b.Fatal(err)
		}
		r := Analyze(in, Options{})
		close(stop)
		<-done
		debug.SetMemoryLimit(old)
		if len(r.Containers) != 2500 {
			b.Fatalf("%d workload containers", len(r.Containers))
		}
		b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
	}
}

package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
)

// rangeStub answers range queries over the range each asks for, as
// Prometheus does: the first rule whose substring the query contains
// gives its series, each point a function of the evaluation time (NaN:
// no point then; a series without points is left out). It counts the
// requests by rule.
type rangeStub struct {
	rules []rangeRule
	mu    sync.Mutex
	asked map[string]int
}

type rangeRule struct {
	contains string
	series   []stubSeries
}

type stubSeries struct {
	labels map[string]string
	at     func(t float64) float64
}

func (p *rangeStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	num := func(k string) float64 { v, _ := strconv.ParseFloat(r.Form.Get(k), 64); return v }
	q, start, end, step := r.Form.Get("query"), num("start"), num("end"), num("step")
	var out []string
	for _, rule := range p.rules {
		if !strings.Contains(q, rule.contains) {
			continue
		}
		p.mu.Lock()
		p.asked[rule.contains]++
		p.mu.Unlock()
		for _, s := range rule.series {
			var vs []string
			for t := start; t <= end+1e-9; t += step {
				if v := s.at(t); !math.IsNaN(v) {
					vs = append(vs, fmt.Sprintf(`[%s,"%s"]`, strconv.FormatFloat(t, 'f', -1, 64), strconv.FormatFloat(v, 'g', -1, 64)))
				}
			}
			if len(vs) > 0 {
				lb, _ := json.Marshal(s.labels)
				out = append(out, fmt.Sprintf(`{"metric":%s,"values":[%s]}`, lb, strings.Join(vs, ",")))
			}
		}
		break
	}
	fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[%s]}}`, strings.Join(out, ","))
}

// TestFetchChunked (issue 54): a long report goes in chunks of a day,
// and reads the same series, to the same figures, as one query a series:
// the counters' whole increases carry over a chunk's boundary, and a
// series first seen in a later chunk (a new container) counts from 0.
func TestFetchChunked(t *testing.T) {
	from := time.Unix(1_700_000_000, 0)
	t0 := float64(from.Unix())
	day := 86400.0
	wave := func(base float64) func(t float64) float64 {
		return func(t float64) float64 { return base + math.Round(10*math.Sin(t/3600)) }
	}
	bucket := func(pod, le string, base float64, until float64) stubSeries {
		return stubSeries{map[string]string{"pod": pod, "le": le}, func(t float64) float64 {
			if t > until {
				return math.NaN()
			}
			return wave(base)(t)
		}}
	}
	var buckets []stubSeries
	for _, p := range []struct {
		pod   string
		until float64
	}{{"a-1", math.Inf(1)}, {"b-1", math.Inf(1)}, {"b-old", t0 + day/2}} {
		buckets = append(buckets, bucket(p.pod, "0.01", 50, p.until), bucket(p.pod, "0.1", 90, p.until), bucket(p.pod, "+Inf", 100, p.until))
	}
	stub := &rangeStub{asked: map[string]int{}, rules: []rangeRule{
		{"kube_pod_labels", []stubSeries{{map[string]string{"pod": "b-old", "label_gofit_dev_arm": "b"}, func(t float64) float64 {
			return map[bool]float64{true: 1, false: math.NaN()}[t <= t0+day/2]
		}}}},
		{"http_request_duration_seconds_bucket", buckets},
		{`http_request_duration_seconds_count{namespace="shop"`, []stubSeries{{map[string]string{"pod": "b-1"}, func(t float64) float64 { return math.Mod(t/60, 3) }}}},
		{"container_cpu_usage_seconds_total", []stubSeries{
			{map[string]string{"pod": "a-1"}, func(t float64) float64 { return 6 + math.Sin(t/7200) }},
			{map[string]string{"pod": "b-1"}, func(t float64) float64 { return 9 + math.Cos(t/5400) }},
		}},
		// a-1's restarts every 2 hours, its counter reset at a day and a
		// half; b-1's container seen from the second day, killed every
		// 10 hours; b-1's last end every 5 hours.
		{"kube_pod_container_status_restarts_total", []stubSeries{{map[string]string{"pod": "a-1", "container": "app"}, func(t float64) float64 {
			if t >= t0+1.5*day {
				return math.Floor((t - t0 - 1.5*day) / 7200)
			}
			return 3 + math.Floor((t-t0)/7200)
		}}}},
		{"container_oom_events_total", []stubSeries{{map[string]string{"pod": "b-1", "container": "app", "id": "/c2"}, func(t float64) float64 {
			if t < t0+day+3600 {
				return math.NaN()
			}
			return 1 + math.Floor((t-t0-day)/36000)
		}}}},
		{"kube_pod_container_status_last_terminated_timestamp", []stubSeries{{map[string]string{"pod": "b-1", "container": "app"}, func(t float64) float64 {
			return t0 - 100 + 18000*math.Floor((t-t0)/18000)
		}}}},
	}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	c, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	q := Query{Namespace: "shop", Name: "g", From: from, To: from.Add(3 * 24 * time.Hour), Window: time.Minute,
		Latency: "http_request_duration_seconds", ErrorMatcher: `code=~"5.."`}
	var got []Input
	for _, chunk := range []int{0, 1000, 5000} {
		clear(stub.asked)
		q.chunkSteps = chunk
		in, err := Fetch(context.Background(), c, pods{"a": {"a-1"}, "b": {"b-1"}}, q)
		if err != nil {
			t.Fatal(err)
		}
		// 4,320 windows: their ends in 3 chunks of a day by default, 5 of
		// 1,000 or one; the boundaries (4,321) one more where 4,320
		// fill the last chunk.
		want := map[int][2]int{0: {3, 4}, 1000: {5, 5}, 5000: {1, 1}}[chunk]
		if n, b := stub.asked["container_cpu_usage_seconds_total"], stub.asked["kube_pod_container_status_restarts_total"]; n != want[0] || b != want[1] {
			t.Errorf("chunks of %d: %d CPU queries, %d of the restarts at the boundaries; want %v", chunk, n, b, want)
		}
		got = append(got, in)
	}
	in := got[0]
	restarts := func(arm, pod int) (n float64) {
		for _, w := range in.Arms[arm].Windows[pod] {
			n += w.Restarts
		}
		return n
	}
	if !in.Have["latency"] || !in.Have["cpu"] || !in.Have["oom"] || len(in.Arms) != 2 || len(in.Arms[1].Pods) != 2 {
		t.Fatalf("arms %d, have %v, sources %v", len(in.Arms), in.Have, in.Sources)
	}
	// a-1: 17 restarts in the first day and a half and 18 after the
	// reset, across the chunks' boundaries; b-1: its kills (a container
	// first seen in the second chunk, counted from 0) and its ends.
	if a, b := restarts(0, 0), restarts(1, 0); a != 35 || b < 14 {
		t.Errorf("restarts a-1 %v, b-1 %v; want 35, and at least 14", a, b)
	}
	for k := 1; k < len(got); k++ {
		if !reflect.DeepEqual(got[k], in) {
			t.Errorf("read in chunks of %d: not what the default chunks read", []int{0, 1000, 5000}[k])
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/fleet"
)

func TestFleetFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--prometheus is required"},
		{[]string{"--prometheus", "http://p", "--since", "3x"}, "-since: want a duration such as 7d"},
		{[]string{"--prometheus", "http://p", "--step", "8d"}, "--step 8d: want at least 1s and at most --since 1w"},
		{[]string{"--prometheus", "http://p", "--since", "30d", "--step", "10s"}, "want at most 100000 (raise --step)"},
		{[]string{"--prometheus", "http://p", "--fail-on", "gomaxprocs_above_limit,slow"}, `"slow" is not a finding code`},
		{[]string{"--prometheus", "http://p", "--selector", "app in (a,b)"}, "--selector: selector term"},
		{[]string{"--prometheus", "http://p", "--header", "novalue"}, "-header: want NAME=VALUE"},
		{[]string{"--prometheus", "localhost:9090"}, `prometheus URL "localhost:9090"`},
		{[]string{"--prometheus", "http://p", "--bearer-token-file", "/nonexistent/token"}, "prometheus bearer token file: open /nonexistent/token"},
		{[]string{"--prometheus", "http://p", "--end", "yesterday"}, "--end:"},
		{[]string{"--prometheus", "http://p", "--memory-percentile", "0"}, "--memory-percentile 0: want more than 0 and at most 1"},
		{[]string{"--prometheus", "http://p", "--cpu-request-percentile", "95"}, "--cpu-request-percentile 95: want more than 0 and at most 1"},
		{[]string{"--prometheus", "http://p", "--cpu-limit-percentile", "0.9", "--cpu-request-percentile", "0.95"}, "--cpu-limit-percentile 0.9: want at least --cpu-request-percentile 0.95"},
		{[]string{"--prometheus", "http://p", "--cpu-limit", "spiky"}, `--cpu-limit "spiky": want percentile, burst, none or keep`},
		{[]string{"--prometheus", "http://p", "--prometheus-concurrency", "0"}, "--prometheus-concurrency 0: want 1 to 16"},
		{[]string{"--prometheus", "http://p", "--prometheus-concurrency", "64"}, "--prometheus-concurrency 64: want 1 to 16"},
	} {
		var o, e bytes.Buffer
		code := Main(append([]string{"fleet"}, tc.args...), &o, &e)
		if code != 2 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("gofit fleet %q: exit %d, stderr %q; want 2 and %q", tc.args, code, e.String(), tc.want)
		}
	}
}

// fakeFleetProm answers the Prometheus HTTP API's instant queries that
// `gofit fleet` sends as a server holding two Go pods of namespace shop
// would: web-0 runs GOMAXPROCS 4 under a 1-core limit (a
// gomaxprocs_above_limit finding), api-0 GOMAXPROCS 1; both have
// GOMEMLIMIT 200Mi under a 256Mi limit. Range queries get no series, so
// both also lack the data for a recommendation (not_enough_data).
func fakeFleetProm(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/query_range") {
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
			return
		}
		q, ts := r.Form.Get("query"), r.Form.Get("time")
		var series []string
		each := func(extra string, web, api float64) {
			for _, p := range []struct {
				pod string
				v   float64
			}{{"web-0", web}, {"api-0", api}} {
				series = append(series, fmt.Sprintf(`{"metric":{"namespace":"shop","pod":%q,"container":"app"%s},"value":[%s,"%g"]}`, p.pod, extra, ts, p.v))
			}
		}
		switch {
		case strings.HasPrefix(q, "count("):
			series = append(series, fmt.Sprintf(`{"metric":{},"value":[%s,"0"]}`, ts))
		case strings.Contains(q, "go_info"):
			each(`,"version":"go1.24.4"`, 1, 1)
		case strings.Contains(q, "go_sched_gomaxprocs_threads"):
			each("", 4, 1)
		case strings.Contains(q, "go_gc_gomemlimit_bytes"):
			each("", 200<<20, 200<<20)
		case strings.Contains(q, "go_gc_gogc_percent"):
			each("", 100, 100)
		case strings.Contains(q, "kube_pod_container_resource_"):
			each(`,"resource":"cpu"`, 1, 1)
			each(`,"resource":"memory"`, 256<<20, 256<<20)
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, strings.Join(series, ","))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestFleetFailOn: --fail-on exits 3 and names each container with a
// finding of one of the codes, and exits 0 when none has one.
func TestFleetFailOn(t *testing.T) {
	prom := fakeFleetProm(t)
	for _, tc := range []struct {
		failOn string
		code   int
		want   []string // in stderr
	}{
		{"gomaxprocs_above_limit", 3, []string{"gofit fleet: --fail-on gomaxprocs_above_limit: shop/Pod/web-0 app: gomaxprocs_above_limit\n"}},
		{"oom_killed, gomaxprocs_above_limit", 3, []string{"shop/Pod/web-0 app: gomaxprocs_above_limit"}},
		{"oom_killed,gomemlimit_unset,gomemlimit_at_limit", 0, nil},
		{"", 0, nil},
	} {
		var o, e bytes.Buffer
		args := []string{"fleet", "--prometheus", prom, "--end", "2026-11-08T00:00:00Z", "--since", "1d", "--step", "1h"}
		if tc.failOn != "" {
			args = append(args, "--fail-on", tc.failOn)
		}
		code := Main(args, &o, &e)
		if code != tc.code {
			t.Errorf("--fail-on %q: exit %d, want %d; stderr %q", tc.failOn, code, tc.code, e.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(e.String(), w) {
				t.Errorf("--fail-on %q: stderr %q lacks %q", tc.failOn, e.String(), w)
			}
		}
		if strings.Contains(e.String(), "api-0") || (tc.code == 0 && e.Len() > 0) {
			t.Errorf("--fail-on %q: stderr %q", tc.failOn, e.String())
		}
		if !strings.Contains(o.String(), "gofit fleet: 2 Go containers in 2 workload containers") {
			t.Errorf("--fail-on %q: no table on stdout:\n%s", tc.failOn, o.String())
		}
	}
}

// TestFleetJSON: --json prints results.json, and only it, to stdout.
func TestFleetJSON(t *testing.T) {
	var o, e bytes.Buffer
	code := Main([]string{"fleet", "--prometheus", fakeFleetProm(t), "--end", "2026-11-08T00:00:00Z", "--since", "1d", "--step", "1h", "--json"}, &o, &e)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e.String())
	}
	var r fleet.Results
	dec := json.NewDecoder(bytes.NewReader(o.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("stdout is not results.json: %v\n%s", err, o.String())
	}
	if dec.More() {
		t.Errorf("more than results.json on stdout:\n%s", o.String())
	}
	if r.StepSeconds != 3600 || !r.End.Equal(time.Date(2026, 11, 8, 0, 0, 0, 0, time.UTC)) || len(r.Containers) != 2 {
		t.Fatalf("results: step %v, end %v, %d containers", r.StepSeconds, r.End, len(r.Containers))
	}
	got := map[string][]string{}
	for _, c := range r.Containers {
		for _, f := range c.Findings {
			got[c.Workload.String()+" "+c.Container] = append(got[c.Workload.String()+" "+c.Container], f.Code)
		}
	}
	if want := "map[shop/Pod/api-0 app:[not_enough_data] shop/Pod/web-0 app:[gomaxprocs_above_limit not_enough_data]]"; fmt.Sprint(got) != want {
		t.Errorf("findings %v, want %s", got, want)
	}
	if c := r.Containers[1]; c.Observed.GOMAXPROCS != 4 || c.Observed.Limits.CPU != 1 || c.Observed.GoVersion != "go1.24.4" {
		t.Errorf("web-0 observed %+v", c.Observed)
	}
}

//go:build !nokube

package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestExperimentReportFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"experiment"}, 2, "want `gofit experiment report [flags]`"},
		{[]string{"experiment", "load"}, 2, "want at least one URL"},
		{[]string{"experiment", "load", "--rps", "0", "http://a"}, 2, "--rps 0"},
		{[]string{"experiment", "load", "--every", "1ms", "http://a"}, 2, "--every 1ms"},
		{[]string{"experiment", "load", "--duration", "-1s", "http://a"}, 2, "--duration -1s"},
		{[]string{"experiment", "load", "10.0.0.1:8080/work"}, 2, `URL "10.0.0.1:8080/work"`},
		{[]string{"experiment", "report"}, 2, "--prometheus is required"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--name", "x"}, 2, "--namespace and --name are required"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--workload", "web"}, 2, `--workload "web": want KIND/NAME`},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--fail-on", "harmful,wrose"}, 2, `"wrose" is not harmful`},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--from", "2026-01-01T00:00:00Z"}, 2, "--from and --to go together"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--window", "10ms"}, 2, "--window 10ms"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--from", "yesterday", "--to", "now"}, 2, "--from"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--match", "cluster"}, 2, "want LABEL=VALUE"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--header", "X-Scope-OrgID"}, 2, "want NAME=VALUE"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--ca-file", "/nonexistent/ca.pem"}, 2, "prometheus CA file"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--planned", "1m"}, 2, "--planned"},
		{[]string{"experiment", "guard"}, 2, "--prometheus is required"},
		{[]string{"experiment", "guard", "--prometheus", "http://p:9090", "--interval", "10s"}, 2, "--interval 10s: want at least --window"},
		{[]string{"experiment", "guard", "--prometheus", "http://p:9090", "--alpha", "0.7"}, 2, "--alpha"},
		{[]string{"experiment", "guard", "--prometheus", "http://p:9090", "--namespaces", "shop,Web"}, 2, `--namespaces: "Web" is not a namespace name`},
	} {
		var out, errb bytes.Buffer
		code := Main(c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("gofit %s: exit %d, stderr %q; want %d and %q", strings.Join(c.args, " "), code, errb.String(), c.code, c.want)
		}
	}
}

// TestExperimentLoad: the load goes to every URL, evenly (within one
// request per URL a window), and a line of figures is printed per window.
func TestExperimentLoad(t *testing.T) {
	var a, b atomic.Int64
	srv := func(n *atomic.Int64) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
		t.Cleanup(s.Close)
		return s
	}
	sa, sb := srv(&a), srv(&b)
	var out, errb bytes.Buffer
	code := Main([]string{"experiment", "load", "--rps", "40", "--duration", "1s", "--every", "500ms", sa.URL + "/work", sb.URL + "/work?n=1"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if a.Load() == 0 || b.Load() == 0 || a.Load()-b.Load() > 2 || b.Load()-a.Load() > 2 {
		t.Errorf("requests: %d to the first URL, %d to the second; want both, evenly", a.Load(), b.Load())
	}
	if n := strings.Count(out.String(), " requests "); n < 1 {
		t.Errorf("no line of figures:\n%s", out.String())
	}
	t.Logf("%d and %d requests; output:\n%s", a.Load(), b.Load(), out.String())
}

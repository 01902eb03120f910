package monitoring

import (
	"regexp"
	"strings"
	"testing"
)

// relabel applies rules to labels as Prometheus does for action
// replace: the joined source labels must match the anchored regex.
func relabel(rules []Relabel, labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		out[k] = v
	}
	for _, r := range rules {
		vals := make([]string, len(r.SourceLabels))
		for i, l := range r.SourceLabels {
			vals[i] = out[l]
		}
		re := regexp.MustCompile("^(?:" + r.Regex + ")$")
		joined := strings.Join(vals, r.Separator)
		m := re.FindStringSubmatchIndex(joined)
		if m == nil {
			continue
		}
		out[r.TargetLabel] = string(re.ExpandString(nil, r.Replacement, joined, m))
	}
	return out
}

// The workload label names the owner a person would: a Deployment's pods
// (through their ReplicaSet), a StatefulSet's, a DaemonSet's, a Job's, and
// a bare pod's own name.
func TestWorkloadLabel(t *testing.T) {
	for _, c := range []struct{ kind, controller, pod, want string }{
		{"ReplicaSet", "api-7d9f8c6b5", "api-7d9f8c6b5-x2x9q", "api"},
		{"ReplicaSet", "shop-api-v2-5c8b7d", "shop-api-v2-5c8b7d-abcde", "shop-api-v2"},
		{"StatefulSet", "db", "db-0", "db"},
		{"DaemonSet", "gofit-node", "gofit-node-7xk2p", "gofit-node"},
		{"Job", "backup-28391", "backup-28391-q8w7e", "backup-28391"},
		{"", "", "debug", "debug"},
	} {
		got := relabel(targetLabels, map[string]string{
			"__meta_kubernetes_pod_controller_kind": c.kind,
			"__meta_kubernetes_pod_controller_name": c.controller,
			"__meta_kubernetes_pod_name":            c.pod,
			"__meta_kubernetes_pod_node_name":       "n1",
		})
		if got["workload"] != c.want || got["node"] != "n1" {
			t.Errorf("%s %s pod %s: workload %q node %q, want %q n1", c.kind, c.controller, c.pod, got["workload"], got["node"], c.want)
		}
	}
}

func TestResolve(t *testing.T) {
	got := Resolve(`rate(${latency_metric}_bucket{namespace="$namespace", pod=~"$pod"}[$__rate_interval])`, map[string]string{"namespace": "shop", "pod": ".*"})
	if want := `rate(http_request_duration_seconds_bucket{namespace="shop", pod=~".*"}[1m])`; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

// The latency panel's legends name the quantiles as people say them:
// p50, p90, p99 and p99.9 (they once read p5, p9, p99 and p999).
func TestLatencyLegends(t *testing.T) {
	var got []string
	for _, d := range Dashboards(Default()) {
		for _, p := range d.Panels {
			if strings.HasPrefix(p.Title, "Latency percentiles") {
				for _, tg := range p.Targets {
					got = append(got, tg.LegendFormat)
				}
			}
		}
	}
	if want := []string{"p50", "p90", "p99", "p99.9"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("latency legends %q, want %q", got, want)
	}
}

// grafanaUnits are the unit IDs Grafana's unit picker offers that a
// dashboard of rates, shares, sizes and durations has use for, as
// grafana/grafana packages/grafana-data/src/valueFormats/categories.ts
// spells them. A unit Grafana does not know ("cores") is shown as a
// bare suffix and is not scaled.
var grafanaUnits = map[string]bool{
	"none": true, "short": true, "percent": true, "percentunit": true,
	"bytes": true, "decbytes": true, "bits": true, "Bps": true,
	"ns": true, "µs": true, "ms": true, "s": true, "m": true, "h": true, "d": true,
	"dtdurations": true, "dtdurationms": true, "dateTimeAsIso": true, "dateTimeFromNow": true,
	"cps": true, "ops": true, "reqps": true, "rps": true, "wps": true, "iops": true, "hertz": true,
}

// Every panel's unit is one of Grafana's unit IDs: the workload
// dashboard's CPU panel once said "cores", which Grafana does not know.
func TestDashboardUnits(t *testing.T) {
	for _, p := range []Params{Default(), func() Params { p := Default(); p.ClusterLabel = "k8s_cluster"; return p }()} {
		for _, d := range Dashboards(p) {
			for _, pn := range d.Panels {
				if u := pn.FieldConfig.Defaults.Unit; u != "" && !grafanaUnits[u] {
					t.Errorf("%s: panel %q has unit %q, not one of Grafana's unit IDs", d.Title, pn.Title, u)
				}
			}
		}
	}
}

package monitoring

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gofit-dev/gofit/tools/promtest"
)

const (
	deployDir = "../../deploy/monitoring"
	chartDir  = "../../charts/gofit/files/monitoring"
)

// TestCheckedIn fails when deploy/monitoring or the chart's copy of its
// objects is not what the generator writes now.
func TestCheckedIn(t *testing.T) {
	for _, c := range []struct {
		dir   string
		files func(Params) (map[string][]byte, error)
	}{{deployDir, Files}, {chartDir, ChartFiles}} {
		files, err := c.files(Default())
		if err != nil {
			t.Fatal(err)
		}
		stale, err := Stale(c.dir, files)
		if err != nil {
			t.Fatal(err)
		}
		if len(stale) > 0 {
			t.Errorf("%s is stale (%s): run `go run ./kube/monitoring/gen` from the repository root", strings.TrimPrefix(c.dir, "../../"), strings.Join(stale, ", "))
		}
	}
}

// TestWriteRemovesStale: Write leaves exactly the generated files.
func TestWriteRemovesStale(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "dashboards"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dashboards", "old.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, Default()); err != nil {
		t.Fatal(err)
	}
	files, _ := Files(Default())
	if stale, err := Stale(dir, files); err != nil || len(stale) > 0 {
		t.Errorf("after Write: stale %v, %v", stale, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dashboards", "old.json")); !os.IsNotExist(err) {
		t.Errorf("old.json left: %v", err)
	}
}

func TestParams(t *testing.T) {
	for name, mod := range map[string]func(*Params){
		"ThrottledShare":    func(p *Params) { p.ThrottledShare = 0 },
		"GCCPUShare":        func(p *Params) { p.GCCPUShare = 1.5 },
		"GOMEMLIMITShare":   func(p *Params) { p.GOMEMLIMITShare = -1 },
		"Window":            func(p *Params) { p.Window = 0 },
		"RunbookURL":        func(p *Params) { p.RunbookURL = "docs/monitoring.md" },
		"WebhookTimeout":    func(p *Params) { p.WebhookTimeoutSeconds = 0 },
		"ClusterLabel":      func(p *Params) { p.ClusterLabel = "k8s-cluster" },
		"CAdvisorSelector":  func(p *Params) { p.CAdvisorSelector = `job=kubelet` },
		"KubeStateSelector": func(p *Params) { p.KubeStateSelector = `job="ksm", namespace` },
		"WebhookName":       func(p *Params) { p.WebhookName = "" },
	} {
		p := Default()
		mod(&p)
		if _, err := Files(p); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(name, "Timeout")) {
			t.Errorf("%s out of range: %v", name, err)
		}
	}
	gs, err := Groups(Default().Fast(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alertRules(gs) {
		if r.For != "" && r.For != "5s" {
			t.Errorf("Fast(5s): %s has for %s", r.Alert, r.For)
		}
	}
	if p := Default(); p.Fast(time.Second).ThrottledShare != p.ThrottledShare {
		t.Error("Fast changed a threshold")
	}
}

// alertRules are the alerts of gs.
func alertRules(gs []Group) []Rule {
	var out []Rule
	for _, g := range gs {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// TestSelectors: the selectors and the cluster label are in one place:
// other values reach every rule that reads those exporters, and every
// aggregation and join of the rules keeps the cluster label.
func TestSelectors(t *testing.T) {
	p := Default()
	p.CAdvisorSelector, p.KubeStateSelector, p.APIServerSelector = `job="cadvisor"`, `job="ksm", cluster=~".+"`, `job="kube-apiserver"`
	p.ClusterLabel = "k8s_cluster"
	gs, err := Groups(p)
	if err != nil {
		t.Fatal(err)
	}
	by := regexp.MustCompile(`\b(by|on) \(([^)]*)\)`)
	for _, g := range gs {
		for _, r := range g.Rules {
			name := r.Record + r.Alert
			for _, m := range regexp.MustCompile(`\b(container_[a-z_]+|kube_[a-z_]+|apiserver_[a-z_]+)\{([^}]*)\}`).FindAllStringSubmatch(r.Expr, -1) {
				want := map[string]string{"container": p.CAdvisorSelector, "kube": p.KubeStateSelector, "apiserver": p.APIServerSelector}[strings.SplitN(m[1], "_", 2)[0]]
				if !strings.HasPrefix(m[2], want) {
					t.Errorf("%s: %s{%s} without the selector %s", name, m[1], m[2], want)
				}
			}
			for _, m := range by.FindAllStringSubmatch(r.Expr, -1) {
				if m[2] != "" && !strings.HasPrefix(m[2], "k8s_cluster") {
					t.Errorf("%s: %s (%s) without the cluster label", name, m[1], m[2])
				}
			}
			for _, bad := range []string{`job="kubelet"`, `job="kube-state-metrics"`, `job="apiserver"`, "(cluster"} {
				if strings.Contains(r.Expr, bad) {
					t.Errorf("%s: %s left in\n%s", name, bad, r.Expr)
				}
			}
		}
	}
	for _, d := range Dashboards(p) {
		for _, pn := range d.Panels {
			for _, tg := range pn.Targets {
				for _, m := range by.FindAllStringSubmatch(tg.Expr, -1) {
					if m[2] != "" && !strings.Contains(m[2], "k8s_cluster") && !strings.HasPrefix(m[2], "le") && strings.Contains(m[2], "namespace") {
						t.Errorf("%s / %s: %s (%s) across clusters", d.Title, pn.Title, m[1], m[2])
					}
				}
			}
		}
		found := false
		for _, v := range d.Templating.List {
			found = found || v.Name == "cluster" && strings.Contains(fmt.Sprint(v.Query), "k8s_cluster")
		}
		if !found {
			t.Errorf("%s: no cluster variable over k8s_cluster", d.Title)
		}
	}
}

// TestPromtool runs promtool check rules on the rule file, promtool test
// rules on testdata (for every alert a case where it fires and one where
// it stays silent), and promtool check config on the plain scrape configs.
func TestPromtool(t *testing.T) {
	b := promtest.Need(t)
	dir := t.TempDir()
	if err := Write(dir, Default()); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("testdata/rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := b.RunPromtool(ctx, dir, "check", "rules", "rules.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check rules:\n%s", out)
	}
	out, err = b.RunPromtool(ctx, dir, "test", "rules", "rules_test.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("promtool test rules:\n%s", out)

	// The plain scrape configs, with the rule file, make a valid
	// prometheus.yml. Debian's Prometheus is built without Kubernetes
	// discovery, so each job's kubernetes_sd_configs is swapped for a
	// static target: what is checked is everything else, the relabelling
	// above all.
	scrape, err := os.ReadFile(filepath.Join(dir, "scrape-configs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sc struct {
		Jobs []map[string]any `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(scrape, &sc); err != nil || len(sc.Jobs) != len(scrapeTargets) {
		t.Fatalf("scrape-configs.yaml: %d jobs, %v", len(sc.Jobs), err)
	}
	for _, j := range sc.Jobs {
		if j["kubernetes_sd_configs"] == nil {
			t.Errorf("job %v without kubernetes_sd_configs", j["job_name"])
		}
		delete(j, "kubernetes_sd_configs")
		j["static_configs"] = []any{map[string]any{"targets": []string{"127.0.0.1:9"}}}
		// The pod's token path, which promtool checks exists: a file of
		// the test's in its place.
		if a, ok := j["authorization"].(map[string]any); ok {
			if a["credentials_file"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
				t.Errorf("job %v: authorization %v, want Prometheus's own ServiceAccount token", j["job_name"], a)
			}
			tok := filepath.Join(dir, "token")
			if err := os.WriteFile(tok, []byte("t"), 0o600); err != nil {
				t.Fatal(err)
			}
			a["credentials_file"] = tok
		}
	}
	conf, err := yaml.Marshal(map[string]any{"rule_files": []string{"rules.yaml"}, "scrape_configs": sc.Jobs})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := b.RunPromtool(ctx, dir, "check", "config", "prometheus.yml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// Every alert is tested, firing and silent.
	names, err := Alerts(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(string(tests), "alertname: "+n+"\n") {
			t.Errorf("testdata/rules_test.yaml does not test %s", n)
		}
	}
}

// TestPromtoolCeil: a Go container with GOMAXPROCS 2 at a 1.5-core limit,
// throttled in half its periods, is what gofit's webhook plans with
// policy.ceil: GoGOMAXPROCSAboveCPULimit stays silent for it when the
// rules follow ceil (CeilGOMAXPROCS) and fires when they follow floor.
func TestPromtoolCeil(t *testing.T) {
	b := promtest.Need(t)
	series := `
      - series: 'container_cpu_cfs_periods_total{job="kubelet", metrics_path="/metrics/cadvisor", namespace="shop", pod="api-1", container="app"}'
        values: '0+600x30'
      - series: 'container_cpu_cfs_throttled_periods_total{job="kubelet", metrics_path="/metrics/cadvisor", namespace="shop", pod="api-1", container="app"}'
        values: '0+300x30'
      - series: 'go_sched_gomaxprocs_threads{job="shop/api", namespace="shop", pod="api-1", container="app"}'
        values: '2x30'
      - series: 'kube_pod_container_resource_limits{job="kube-state-metrics", namespace="shop", pod="api-1", container="app", resource="cpu", unit="core"}'
        values: '1.5x30'`
	for _, c := range []struct {
		ceil   bool
		firing int
	}{{true, 0}, {false, 1}} {
		dir := t.TempDir()
		p := Default()
		p.CeilGOMAXPROCS = c.ceil
		if err := Write(dir, p); err != nil {
			t.Fatal(err)
		}
		test := "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:" + series +
			"\n    promql_expr_test:\n      - expr: count(ALERTS{alertname=\"GoGOMAXPROCSAboveCPULimit\", alertstate=\"firing\", pod=\"api-1\"}) or vector(0)" +
			"\n        eval_time: 20m\n        exp_samples:\n          - labels: '{}'\n            value: " + fmt.Sprint(c.firing) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "ceil_test.yaml"), []byte(test), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := b.RunPromtool(ctx, dir, "test", "rules", "ceil_test.yaml")
		cancel()
		if err != nil {
			t.Errorf("ceil %v: %v\n%s", c.ceil, err, out)
		}
	}
}

package monitoring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/gofit-dev/gofit/tools/promtest"
)

// stackRulesDir holds kubernetes-mixin's rules as a pinned
// kube-prometheus-stack release renders them (its README says which and
// how).
const stackRulesDir = "testdata/kube-prometheus-stack"

// stackGroups reads the PrometheusRule objects helm template wrote into
// stackRulesDir and returns their groups, as the Prometheus Operator
// hands them to Prometheus.
func stackGroups(t *testing.T) []Group {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(stackRulesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rendered rules in %s: %v", stackRulesDir, err)
	}
	var out []Group
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o struct {
				Kind string `yaml:"kind"`
				Spec struct {
					Groups []Group `yaml:"groups"`
				} `yaml:"spec"`
			}
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "PrometheusRule" {
				out = append(out, o.Spec.Groups...)
			}
		}
	}
	return out
}

// recordedBy maps each recorded name to the groups (file:group) that
// record it.
func recordedBy(sets map[string][]Group) map[string][]string {
	by := map[string][]string{}
	for _, file := range slices.Sorted(maps.Keys(sets)) {
		for _, g := range sets[file] {
			for _, r := range g.Rules {
				if r.Record == "" {
					continue
				}
				where := file + ":" + g.Name
				if !slices.Contains(by[r.Record], where) {
					by[r.Record] = append(by[r.Record], where)
				}
			}
		}
	}
	return by
}

// TestBesideKubernetesMixin loads gofit's rules and kubernetes-mixin's,
// as kube-prometheus-stack ships them, into one real Prometheus:
//   - no two groups record the same name (two groups writing one series
//     make it flap between writers, or lose samples as out of order);
//     nor does a gofit alert take a name of the stack's;
//   - fed kube-state-metrics' and client_golang's series for a few pods,
//     every rule of both sets evaluates without error, and no recorded
//     series gets more samples than one writer evaluating every interval
//     gives it.
//
// gofit once recorded the mixin's own namespace_workload_pod:
// kube_pod_owner:relabel: the first check named it, and its series took
// two samples an interval.
func TestBesideKubernetesMixin(t *testing.T) {
	stack := stackGroups(t)
	ours, err := Groups(Default())
	if err != nil {
		t.Fatal(err)
	}
	dups := 0
	by := recordedBy(map[string][]Group{"gofit": ours, "kube-prometheus-stack": stack})
	for _, name := range slices.Sorted(maps.Keys(by)) {
		if len(by[name]) > 1 {
			dups++
			t.Errorf("%s is recorded by %d groups: %s", name, len(by[name]), strings.Join(by[name], ", "))
		}
	}
	stackAlerts := map[string]bool{}
	nStack := 0
	for _, g := range stack {
		for _, r := range g.Rules {
			nStack++
			stackAlerts[r.Alert] = r.Alert != ""
		}
	}
	for _, r := range alertRules(ours) {
		if stackAlerts[r.Alert] {
			t.Errorf("gofit's alert %s has the name of one of kube-prometheus-stack's", r.Alert)
		}
	}
	if nStack < 100 || by["namespace_workload_pod:kube_pod_owner:relabel"] == nil {
		t.Fatalf("%d rules in %s, without the mixin's owner rule: not the stack's rules", nStack, stackRulesDir)
	}

	bins := promtest.Need(t)
	dir := t.TempDir()
	if err := Write(dir, Default()); err != nil {
		t.Fatal(err)
	}
	stackFile := filepath.Join(dir, "kube-prometheus-stack.yaml")
	b, err := yaml.Marshal(map[string][]Group{"groups": stack})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stackFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := bins.RunPromtool(ctx, dir, "check", "rules", "rules.yaml", "kube-prometheus-stack.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// kube-state-metrics' series for the test's pods, and each pod's Go
	// runtime series (this process's, under each pod's labels).
	ksm := httptest.NewServer(kubeStateMetrics(t, testPods()))
	t.Cleanup(ksm.Close)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	goSrv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(goSrv.Close)
	targets := []promtest.Target{{Job: "kube-state-metrics", Addr: strings.TrimPrefix(ksm.URL, "http://")}}
	for _, p := range testPods() {
		targets = append(targets, promtest.Target{Job: p.Namespace + "/" + p.Name, Addr: strings.TrimPrefix(goSrv.URL, "http://"),
			Labels: map[string]string{"namespace": p.Namespace, "pod": p.Name, "container": p.Spec.Containers[0].Name}})
	}
	const interval = time.Second
	prom := promtest.Start(t, bins, promtest.Config{Interval: interval, RuleFiles: []string{filepath.Join(dir, "rules.yaml"), stackFile}, Targets: targets})

	// Both owner rules have series, and every rule has been evaluated.
	var rules []promtest.RuleState
	for {
		if rules, err = prom.Rules(ctx); err != nil {
			t.Fatal(err)
		}
		ready := len(rules) > nStack
		for _, r := range rules {
			ready = ready && r.Health != "unknown"
		}
		owners := 0
		for _, q := range []string{recOwner, "namespace_workload_pod:kube_pod_owner:relabel"} {
			s, err := prom.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(s) > 0 {
				owners++
			}
		}
		if ready && owners == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("rules not all evaluated, or the owner rules without series (%d of 2), after 2 minutes", owners)
		}
		time.Sleep(interval)
	}
	for _, r := range rules {
		if r.Health != "ok" || r.LastError != "" {
			t.Errorf("%s (%s in %s): health %s: %s", r.Name, r.Group, filepath.Base(r.File), r.Health, r.LastError)
		}
	}

	// One writer evaluating every interval gives a series at most
	// window/interval + 1 samples in a window; two writers give about
	// twice that. Slowness can only lower the count.
	time.Sleep(12 * interval)
	const window = 10 * time.Second
	limit := float64(window/interval) + 1
	for _, name := range slices.Sorted(maps.Keys(by)) {
		series, err := prom.Query(ctx, fmt.Sprintf(`count_over_time({__name__=%q}[%s]) > %v`, name, promDuration(window), limit))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range series {
			t.Errorf("%s %v has %v samples in %v, more than one writer gives (%v)", name, s.Labels, s.Value, window, limit)
		}
	}
	if log, err := os.ReadFile(prom.LogFile); err == nil {
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "out-of-order") || strings.Contains(l, "out of order") || strings.Contains(l, "duplicate sample") {
				t.Errorf("prometheus refused a rule's result: %s", l)
			}
		}
	}
	t.Logf("%d rules (gofit's and kube-prometheus-stack's) evaluated without error; %d names recorded by more than one group", len(rules), dups)
}

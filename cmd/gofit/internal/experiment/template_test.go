package experiment

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/tools/promtest"
)

// TestFlaggerTemplateFailsWithoutTheGuard is issue 53's Flagger item,
// on a real Prometheus's PromQL (promtool's rule tests evaluate the
// shipped query as Flagger would send it): it passes (0) only while the
// guard is scraped, has looked within 15 minutes and stopped no arm of
// the experiment; it fails (1) on a stopped arm, scraped as a pod
// (exported_namespace) or with honor_labels (namespace); and it gives no
// value, a failed check, when the guard's series are absent or stale.
// The template's "or vector(0)" passed without the guard, and its
// namespace matcher matched nothing as scraped.
func TestFlaggerTemplateFailsWithoutTheGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: runs promtool")
	}
	bins := promtest.Need(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "rollouts", "flagger-metrictemplate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var mt struct{ Spec struct{ Query string } }
	if err := yaml.Unmarshal(b, &mt); err != nil {
		t.Fatalf("flagger-metrictemplate.yaml: %v", err)
	}
	q := strings.NewReplacer("{{ namespace }}", "shop", "{{ target }}", "web").Replace(mt.Spec.Query)
	q = strings.Join(strings.Fields(q), " ")
	const stopped = `gofit_experiment_arm_stopped{namespace="gofit-system", exported_namespace="shop", experiment="web", workload="Deployment/web", arm="b", pod="guard-1"}`
	const honored = `gofit_experiment_arm_stopped{namespace="shop", experiment="web", workload="Deployment/web", arm="b", pod="guard-1"}`
	const other = `gofit_experiment_arm_stopped{namespace="gofit-system", exported_namespace="shop", experiment="api", workload="Deployment/api", arm="b", pod="guard-1"}`
	const look = `gofit_experiment_guard_last_look_success_timestamp_seconds{namespace="gofit-system", pod="guard-1"}`
	for _, tc := range []struct {
		name   string
		series string // promtool input_series, YAML
		want   string // exp_samples, YAML
	}{
		// At 20m: the guard looked at 19m (1140 s).
		{"guard looking, nothing stopped", "- {series: '" + look + "', values: '0+60x20'}\n- {series: '" + other + "', values: '1x20'}", "- {labels: '{}', value: 0}"},
		{"an arm stopped, scraped as a pod", "- {series: '" + look + "', values: '0+60x20'}\n- {series: '" + stopped + "', values: '1x20'}", "- {labels: '{}', value: 1}"},
		{"an arm stopped, honor_labels", "- {series: '" + look + "', values: '0+60x20'}\n- {series: '" + honored + "', values: '1x20'}", "- {labels: '{}', value: 1}"},
		{"an arm stopped, the guard stale", "- {series: '" + look + "', values: '0x20'}\n- {series: '" + stopped + "', values: '1x20'}", "- {labels: '{}', value: 1}"},
		{"the guard not scraped", "- {series: 'up{job=\"other\"}', values: '1x20'}", "[]"},
		{"the guard's looks stale", "- {series: '" + look + "', values: '0x20'}", "[]"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte("groups: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		test := "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n" + indent(tc.series, "      ") +
			"\n    promql_expr_test:\n      - expr: '" + strings.ReplaceAll(q, "'", "''") + "'\n        eval_time: 20m\n        exp_samples:\n" + indent(tc.want, "          ") + "\n"
		if tc.want == "[]" {
			test = strings.Replace(test, "exp_samples:\n          []", "exp_samples: []", 1)
		}
		if err := os.WriteFile(filepath.Join(dir, "test.yaml"), []byte(test), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(context.Background(), bins.Promtool, "test", "rules", "test.yaml")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s\n%s", tc.name, err, out, test)
		}
	}
}

func indent(s, by string) string { return by + strings.ReplaceAll(s, "\n", "\n"+by) }

package monitoring

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestChartValues: the chart's monitoring.selectors, monitoring.clusterLabel
// and webhook.policy.ceil reach every rule and dashboard exactly as the
// generator writes them for those Params: helm template's PrometheusRule
// and dashboard ConfigMaps equal Files(p).
func TestChartValues(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds helm on first use (-short)")
	}
	p := Default()
	p.CAdvisorSelector = `job="kubelet-cadvisor", metrics_path=~"/metrics/cadvisor|/cadvisor"`
	p.KubeStateSelector = `job="ksm", service="kube-state-metrics"`
	p.APIServerSelector = `job="kube-apiserver"`
	p.ClusterLabel = "k8s_cluster"
	p.CeilGOMAXPROCS = true
	out := helmTemplate(t, "--set", "monitoring.enabled=true", "--set", "webhook.policy.ceil=true",
		"--set", "monitoring.clusterLabel="+p.ClusterLabel,
		"--set-string", "monitoring.selectors.cadvisor="+strings.ReplaceAll(p.CAdvisorSelector, ",", `\,`),
		"--set-string", "monitoring.selectors.kubeStateMetrics="+strings.ReplaceAll(p.KubeStateSelector, ",", `\,`),
		"--set-string", "monitoring.selectors.apiserver="+p.APIServerSelector)
	files, err := Files(p)
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Groups []Group `yaml:"groups"`
	}
	if err := yaml.Unmarshal(files["rules.yaml"], &want); err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	seen := 0
	for {
		var o struct {
			Kind     string                `yaml:"kind"`
			Metadata struct{ Name string } `yaml:"metadata"`
			Spec     struct {
				Groups []Group `yaml:"groups"`
			} `yaml:"spec"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch {
		case o.Kind == "PrometheusRule":
			seen++
			g, _ := yaml.Marshal(o.Spec.Groups)
			w, _ := yaml.Marshal(want.Groups)
			if !bytes.Equal(g, w) {
				t.Errorf("the chart's PrometheusRule differs from Groups(p):\n%s", firstDiff(string(g), string(w)))
			}
		case o.Kind == "ConfigMap" && strings.HasSuffix(o.Metadata.Name, "-dashboard"):
			for name, j := range o.Data {
				seen++
				if w := string(files[filepath.Join("dashboards", name)]); j != w {
					t.Errorf("the chart's %s differs from Files(p):\n%s", name, firstDiff(j, w))
				}
			}
		}
	}
	if seen != 3 {
		t.Errorf("found %d of the PrometheusRule and the 2 dashboards", seen)
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, g[i], w[i])
		}
	}
	return "lengths differ"
}

// TestChartLeavesOutAlertsOfDisabledParts: without the webhook or the
// node agent, the chart's PrometheusRule has none of its alerts (they
// would fire by design: no target is up).
func TestChartLeavesOutAlertsOfDisabledParts(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds helm on first use (-short)")
	}
	for _, c := range []struct{ set, gone, kept string }{
		{"webhook.enabled=false", "GofitWebhook", "GofitNodeAgent"},
		{"node.enabled=false", "GofitNodeAgent", "GofitWebhook"},
	} {
		out := string(helmTemplate(t, "--set", "monitoring.enabled=true", "--set", c.set))
		if strings.Contains(out, "alert: "+c.gone) || !strings.Contains(out, "alert: "+c.kept) || !strings.Contains(out, "alert: GoGOMAXPROCSAboveCPULimit") {
			t.Errorf("%s: alerts %s left in, or %s or the Go alerts left out", c.set, c.gone, c.kept)
		}
	}
}

// helmTemplate renders the chart with args, by the helm kube/hack/helm.sh
// builds (once, cached by version) or GOFIT_HELM names.
func helmTemplate(t *testing.T, args ...string) []byte {
	t.Helper()
	h := os.Getenv("GOFIT_HELM")
	if h == "" {
		cmd := exec.Command("bash", "../hack/helm.sh")
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("build helm: %v\n%s", err, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		h = lines[len(lines)-1]
	}
	cmd := exec.Command(h, append([]string{"template", "gofit", "../../charts/gofit"}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return out.Bytes()
}

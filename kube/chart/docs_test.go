package chart

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// opaque values are taken whole (a Kubernetes field, a map of names):
// their keys are the user's, not the chart's.
var opaque = []string{"resources", "nodeSelector", "affinity", "env", "podAnnotations", "podLabels", "namespaceSelector", "objectSelector", "labels",
	"securityContext", "podSecurityContext", "commonLabels"}

// leaves lists the dotted paths of values.yaml's settings.
func leaves(m map[string]any, prefix string, out *[]string) {
	for k, v := range m {
		p := prefix + k
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !slices.Contains(opaque, k) {
			leaves(sub, p+".", out)
			continue
		}
		*out = append(*out, p)
	}
}

// TestInstallDocValues: docs/install.md's table names every value of the
// chart by its full path, so an operator reading it sees each setting
// values.yaml has (a new value without a line there fails here).
func TestInstallDocValues(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	var paths []string
	leaves(values, "", &paths)
	sort.Strings(paths)
	doc, err := os.ReadFile(filepath.Join(root(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if !strings.Contains(string(doc), "`"+p+"`") {
			t.Errorf("docs/install.md does not name `%s`", p)
		}
	}
	if len(paths) < 60 {
		t.Errorf("only %d values found in values.yaml", len(paths))
	}
}

// TestNotes: NOTES.txt (helm install prints it) says how to check each
// part that is installed, and what an operator must know of it: the
// namespace label LSR/LSE pods need, that uninstall resets the nodes,
// where the monitoring objects are and by which labels to select them.
func TestNotes(t *testing.T) {
	for _, tc := range []struct {
		values    string
		want, not []string
	}{
		{`{}`, []string{"rollout status deployment/gofit-webhook", "caBundle", "gofit.dev/inject=enabled", "rollout status daemonset/gofit-node",
			"gofit.dev/qos-class-lsr=allowed", "On helm uninstall each agent writes the kernel defaults back"}, []string{"podmonitors"}},
		{`{"webhook":{"certificates":"cert-manager"},"node":{"qosClassPolicy":{"enabled":false}}}`,
			[]string{"get certificate gofit-webhook"}, []string{"caBundle", "qos-class-lsr"}},
		{`{"node":{"enabled":false},"monitoring":{"enabled":true,"labels":{"release":"prom"}}}`,
			[]string{"Monitoring objects in gofit-system", "by release=prom", "get podmonitors,prometheusrules,configmaps -l app.kubernetes.io/component=monitoring"},
			[]string{"daemonset/gofit-node", "uninstall each agent"}},
	} {
		f := filepath.Join(t.TempDir(), "values.json")
		if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, "install", "gofit", chartDir(), "-n", "gofit-system", "--dry-run=client", "-f", f)
		if err != nil {
			t.Fatal(err)
		}
		notes := string(out)
		if i := strings.Index(notes, "\nNOTES:\n"); i >= 0 {
			notes = notes[i:]
		} else {
			t.Fatalf("values %s: no NOTES in\n%s", tc.values, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(notes, w) {
				t.Errorf("values %s: NOTES lack %q:\n%s", tc.values, w, notes)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(notes, w) {
				t.Errorf("values %s: NOTES say %q:\n%s", tc.values, w, notes)
			}
		}
	}
}

// TestReadme: helm show readme (and Artifact Hub) shows the chart's
// README: how to install, upgrade and uninstall, and where the values are.
func TestReadme(t *testing.T) {
	out, err := run(t, "show", "readme", chartDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"helm install gofit", "--create-namespace", "helm upgrade", "helm uninstall", "docs/install.md", "monitoring.enabled"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("helm show readme lacks %q:\n%s", w, out)
		}
	}
}

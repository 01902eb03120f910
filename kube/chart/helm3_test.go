package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gofit-dev/gofit/kube/kubetest"
)

// helm3Version is the Helm 3 the chart is tested with besides Helm 4:
// most clusters are still managed with Helm 3 (3.18 or later).
const helm3Version = "3.22.0"

var helm3Build = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("GOFIT_HELM3"); p != "" {
		return p, nil
	}
	cmd := exec.Command("bash", filepath.Join(root(), "kube", "hack", "helm.sh"))
	cmd.Env = append(os.Environ(), "HELM_VERSION="+helm3Version)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1], nil
})

// runWith runs the helm binary h with args, as run does.
func runWith(t *testing.T, h string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(h, args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes(), nil
}

// TestHelm3: Helm 3 (helm3Version, built from its module by
// kube/hack/helm.sh) lints the chart, renders every render of TestDryRun's
// matrix to the same objects Helm 4 does, refuses what Helm 4 refuses,
// and prints the same NOTES.
func TestHelm3(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds Helm 3 on first use (-short)")
	}
	h3, err := helm3Build()
	if err != nil {
		t.Fatalf("build helm %s: %v", helm3Version, err)
	}
	if out, err := runWith(t, h3, "version", "--short"); err != nil || !strings.HasPrefix(string(out), "v3.") {
		t.Fatalf("helm 3: %s %v", out, err)
	}
	if out, err := runWith(t, h3, "lint", "--strict", chartDir()); err != nil {
		t.Fatalf("helm 3 lint: %v\n%s", err, out)
	}
	values := func(v string) string {
		f := filepath.Join(t.TempDir(), "values.json")
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range matrix {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "gofit", chartDir(), "--namespace", "gofit-system", "-f", values(tc.values)}
			out3, err := runWith(t, h3, args...)
			if err != nil {
				t.Fatal(err)
			}
			out4, err := run(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			want, got := map[string]string{}, map[string]string{}
			for _, o := range decode(t, out4) {
				want[key(o)] = normal(t, o)
			}
			for _, o := range decode(t, out3) {
				got[key(o)] = normal(t, o)
			}
			if len(got) == 0 {
				t.Fatal("helm 3 rendered nothing")
			}
			compare(t, "helm 4", want, "helm 3", got)
		})
	}
	// What Helm 4 refuses (the schema, the chart's own checks), Helm 3 does.
	for _, v := range []string{`{"webhook":{"replicas":1}}`, `{"webhook":{"pdb":{"maxUnavailable":0}}}`, `{"webhook":{"failurePolicy":"Sometimes"}}`} {
		if _, err := run(t, "template", "gofit", chartDir(), "-f", values(v)); err == nil {
			t.Fatalf("%s: helm 4 renders it", v)
		}
		if _, err := runWith(t, h3, "template", "gofit", chartDir(), "-f", values(v)); err == nil {
			t.Errorf("%s: helm 3 renders what helm 4 refuses", v)
		}
	}
	// Helm 3's install --dry-run=client still asks a cluster for its
	// version: envtest's API server.
	kc := kubeconfig(t, kubetest.Start(t, nil))
	notes := func(h string) string {
		out, err := runWith(t, h, "install", "gofit", chartDir(), "--dry-run=client", "--namespace", "platform", "--set", "fullnameOverride=acme", "--kubeconfig", kc)
		if err != nil {
			t.Fatal(err)
		}
		_, n, _ := strings.Cut(string(out), "NOTES:")
		return strings.TrimSpace(n)
	}
	if n3, n4 := notes(h3), notes(helm(t)); n3 != n4 || n3 == "" {
		t.Errorf("NOTES differ:\nhelm 3:\n%s\nhelm 4:\n%s", n3, n4)
	}
}

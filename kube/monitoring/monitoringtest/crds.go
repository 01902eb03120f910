// Package monitoringtest gives tests the Prometheus Operator's CRDs, from
// the operator's own Go module, so that deploy/monitoring (kube/monitoring)
// and the chart's monitoring objects (kube/chart) are dry-run against the
// same schemas.
package monitoringtest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// OperatorVersion is the Prometheus Operator whose CRDs the dry runs
// install, taken from its Go module (example/prometheus-operator-crd).
const OperatorVersion = "v0.85.0"

// OperatorCRDs downloads the Prometheus Operator's module into the module
// cache (once; go mod download is a no-op after) and returns the CRD files
// of the kinds gofit ships: PodMonitor, ServiceMonitor, PrometheusRule.
func OperatorCRDs(t testing.TB) []string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "mod", "download", "-json", "github.com/prometheus-operator/prometheus-operator@"+OperatorVersion)
	cmd.Dir = t.TempDir() // outside any module: nothing is added to go.mod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download prometheus-operator@%s: %v\n%s%s", OperatorVersion, err, out, stderr.Bytes())
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download prometheus-operator@%s: %v %s: %s", OperatorVersion, err, mod.Error, out)
	}
	var files []string
	for _, kind := range []string{"podmonitors", "servicemonitors", "prometheusrules"} {
		f := filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+kind+".yaml")
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("prometheus-operator@%s: %v", OperatorVersion, err)
		}
		files = append(files, f)
	}
	return files
}

// Package monitoringtest gives tests the Prometheus Operator's CRDs, from
// the operator's own Go module, so that deploy/monitoring (kube/monitoring)
// and the chart's monitoring objects (kube/chart) are dry-run against the
// same schemas.
package monitoringtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gofit-dev/gofit/kube/kubetest"
)

// OperatorVersion is the Prometheus Operator whose CRDs the dry runs
// install, taken from its Go module (example/prometheus-operator-crd).
const OperatorVersion = "v0.85.0"

// OperatorCRDs downloads the Prometheus Operator's module into the module
// cache (once; go mod download is a no-op after) and returns the CRD files
// of the kinds gofit ships: PodMonitor, ServiceMonitor, PrometheusRule.
func OperatorCRDs(t testing.TB) []string {
	t.Helper()
	dir := kubetest.ModuleDir(t, "github.com/prometheus-operator/prometheus-operator", OperatorVersion)
	var files []string
	for _, kind := range []string{"podmonitors", "servicemonitors", "prometheusrules"} {
		f := filepath.Join(dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+kind+".yaml")
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("prometheus-operator@%s: %v", OperatorVersion, err)
		}
		files = append(files, f)
	}
	return files
}

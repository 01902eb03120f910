package monitoring

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/kube/kubetest"
	"github.com/gofit-dev/gofit/kube/monitoring/monitoringtest"
)

// TestServerSideDryRun: every object of the kustomization's resources
// (PrometheusRule, PodMonitors, dashboard ConfigMaps) passes a server-side dry run, with
// strict field validation, against a real kube-apiserver with the
// Prometheus Operator's CRDs installed.
func TestServerSideDryRun(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts kube-apiserver and etcd (-short)")
	}
	crds := monitoringtest.OperatorCRDs(t)
	cfg := kubetest.Start(t, &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]string{"PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules", "ConfigMap": "configmaps",
		"ServiceAccount": "serviceaccounts", "Secret": "secrets", "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
	kinds := map[string]int{}
	kb, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kust struct {
		Resources []string `json:"resources"`
	}
	if err := sigsyaml.Unmarshal(kb, &kust); err != nil || len(kust.Resources) == 0 {
		t.Fatalf("kustomization.yaml: resources %v, %v", kust.Resources, err)
	}
	for _, name := range kust.Resources {
		kubetest.CreateFile(ctx, t, dyn, filepath.Join(deployDir, name), Namespace, resources,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}, kinds)
	}
	// PodMonitors: the webhook, the agent, gofit-services and the experiment
	// guard.
	// And the agent's metrics reader: its account, token, role and binding.
	if want := fmt.Sprint(map[string]int{"ClusterRole": 1, "ClusterRoleBinding": 1, "ConfigMap": 2, "PodMonitor": 4, "PrometheusRule": 1, "Secret": 1, "ServiceAccount": 1}); fmt.Sprint(kinds) != want {
		t.Errorf("objects dry-run: %v, want %s", kinds, want)
	}
	// Dry run means nothing stays.
	list, err := dyn.Resource(schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "podmonitors"}).Namespace(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("after the dry run: %v podmonitors, %v", len(list.Items), err)
	}
}

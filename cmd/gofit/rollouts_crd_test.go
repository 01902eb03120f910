//go:build !nokube

package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gofit-dev/gofit/kube/kubetest"
)

// The Argo Rollouts and Flagger releases whose CRDs deploy/rollouts'
// templates are created against, from their Go modules.
const (
	argoRolloutsVersion = "v1.8.3"
	flaggerVersion      = "v1.36.1"
)

// TestRolloutTemplatesOnTheirCRDs (issue 53): every object in
// deploy/rollouts is created, with strict field validation, on a real
// kube-apiserver holding Argo Rollouts' and Flagger's own CRDs: a field
// the tools do not have (a misspelt inconclusiveLimit, a jsonPath in the
// wrong place) is refused here, not by the user's cluster.
func TestRolloutTemplatesOnTheirCRDs(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: starts kube-apiserver and etcd (-short)")
	}
	argo := filepath.Join(kubetest.ModuleDir(t, "github.com/argoproj/argo-rollouts", argoRolloutsVersion), "manifests", "crds", "analysis-template-crd.yaml")
	flagger := filepath.Join(kubetest.ModuleDir(t, "github.com/fluxcd/flagger", flaggerVersion), "artifacts", "flagger", "crd.yaml")
	cfg := kubetest.Start(t, &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{Paths: []string{argo, flagger}, ErrorIfPathMissing: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	resources := map[string]string{"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
		"AnalysisTemplate": "analysistemplates", "MetricTemplate": "metrictemplates"}
	kinds := map[string]int{}
	for _, name := range []string{"argo-analysistemplate.yaml", "flagger-metrictemplate.yaml"} {
		kubetest.CreateFile(ctx, t, dyn, filepath.Join("..", "..", "deploy", "rollouts", name), "shop", resources,
			metav1.CreateOptions{FieldValidation: "Strict"}, kinds)
	}
	if kinds["AnalysisTemplate"] != 2 || kinds["MetricTemplate"] != 1 {
		t.Errorf("created %v: want both AnalysisTemplates and the MetricTemplate", kinds)
	}
}

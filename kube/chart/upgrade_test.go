package chart

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gofit-dev/gofit/kube/agent"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// previousChart is the chart as it was at 5b7c727, the last commit
// before this chart stopped making its namespaces by default and put the
// agent in the release's namespace (issue 43): gofit-system and
// gofit-node were chart objects, the webhook in the first, the agent in
// the second. Made with
//
//	git archive 5b7c727 charts/gofit | tar -x -C DIR && tar -czf gofit-5b7c727.tgz -C DIR/charts gofit
const previousChart = "testdata/gofit-5b7c727.tgz"

// TestHelmUpgradeFromPrevious upgrades a release of the previous chart to
// this one as docs/install.md says (helm upgrade --reset-then-reuse-values),
// then rolls it back, against a real kube-apiserver, and checks that
// neither step moves or deletes what holds the node's protection:
//   - the namespaces the previous chart made (gofit-system, with Helm's
//     own record in it, and gofit-node) are not deleted;
//   - the agent's DaemonSet and the webhook's Deployment stay the same
//     objects (same UID): a DaemonSet deleted or moved to another
//     namespace is an uninstall to its agents, which reset every pod's
//     memory.min on their way out;
//   - the agent, asking as its own ServiceAccount, takes neither step for
//     an uninstall.
//
// The e2e node's chart-upgrade step measures the same on real cgroups
// (docs/e2e.md).
func TestHelmUpgradeFromPrevious(t *testing.T) {
	cfg := kubetest.Start(t, &envtest.Environment{})
	kc := kubeconfig(t, cfg)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agentCS := serviceAccount(t, cfg, "gofit-node", "gofit-node")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	helmRun := func(args ...string) {
		t.Helper()
		if out, err := run(t, append(args, "--kubeconfig", kc)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	prev, err := filepath.Abs(previousChart)
	if err != nil {
		t.Fatal(err)
	}

	// As the previous docs/install.md said.
	helmRun("install", "gofit", prev, "-n", "gofit-system", "--create-namespace")
	ds, err := cs.AppsV1().DaemonSets("gofit-node").Get(ctx, "gofit-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the previous chart's agent: %v", err)
	}
	dep, err := cs.AppsV1().Deployments("gofit-system").Get(ctx, "gofit-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the previous chart's webhook: %v", err)
	}
	check := func(step string) {
		t.Helper()
		for _, ns := range []string{"gofit-system", "gofit-node"} {
			n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil || n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating {
				t.Errorf("%s deleted namespace %s: %v", step, ns, err)
			}
		}
		sameUID(t, step, "DaemonSet gofit-node/gofit-node", ds.UID, func() (types.UID, error) {
			d, err := cs.AppsV1().DaemonSets("gofit-node").Get(ctx, "gofit-node", metav1.GetOptions{})
			if err != nil || d.DeletionTimestamp != nil {
				return "", err
			}
			return d.UID, nil
		})
		sameUID(t, step, "Deployment gofit-system/gofit-webhook", dep.UID, func() (types.UID, error) {
			d, err := cs.AppsV1().Deployments("gofit-system").Get(ctx, "gofit-webhook", metav1.GetOptions{})
			if err != nil || d.DeletionTimestamp != nil {
				return "", err
			}
			return d.UID, nil
		})
		if _, err := cs.AppsV1().DaemonSets("gofit-system").Get(ctx, "gofit-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s put a second agent DaemonSet in gofit-system: %v", step, err)
		}
		if yes, why := agent.Uninstalling(ctx, agentCS, "gofit-node", "gofit-node", ds.UID); yes {
			t.Errorf("%s is an uninstall to the agent, which would reset its node: %s", step, why)
		}
	}
	helmRun("upgrade", "gofit", chartDir(), "-n", "gofit-system", "--reset-then-reuse-values")
	check("the upgrade")
	helmRun("rollback", "gofit", "1", "-n", "gofit-system")
	check("the rollback")
	helmRun("upgrade", "gofit", chartDir(), "-n", "gofit-system", "--reset-then-reuse-values")
	check("the upgrade after the rollback")
}

func sameUID(t *testing.T, step, what string, want types.UID, get func() (types.UID, error)) {
	t.Helper()
	got, err := get()
	switch {
	case err != nil:
		t.Errorf("after %s: %s: %v", step, what, err)
	case got == "":
		t.Errorf("after %s: %s is being deleted", step, what)
	case got != want:
		t.Errorf("after %s: %s was made again (UID %s, was %s)", step, what, got, want)
	}
}

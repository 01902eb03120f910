package chart

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gofit-dev/gofit/kube/agent"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// kubeconfig writes a kubeconfig for cfg (envtest's admin) for helm.
func kubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	c.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	c.CurrentContext = "envtest"
	f := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*c, f); err != nil {
		t.Fatal(err)
	}
	return f
}

// serviceAccount is a client that asks as ServiceAccount ns/name does.
func serviceAccount(t *testing.T, cfg *rest.Config, ns, name string) kubernetes.Interface {
	t.Helper()
	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	cs, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestHelmLifecycle installs, upgrades and uninstalls the chart with helm
// against a real kube-apiserver (envtest), as an operator would, and
// checks what each step leaves:
//   - the release lives in the namespace `helm install -n gofit-system
//     --create-namespace` makes, as cert-manager's and Kyverno's do, the
//     webhook and the agent with it; the namespace is Helm's, not the
//     chart's, and helm uninstall leaves it;
//   - NOTES.txt is printed;
//   - an upgrade keeps what the running webhook wrote (the CA bundle, the
//     certificate Secret) and is not an uninstall to the node agent;
//   - an uninstall is one: the agent, asking the API server as its own
//     ServiceAccount on SIGTERM (agent.Uninstalling), resets its node.
//
// envtest runs no controllers, so no pod starts: what the kubelet would
// do is the e2e node's part (docs/e2e.md).
func TestHelmLifecycle(t *testing.T) {
	cfg := kubetest.Start(t, &envtest.Environment{})
	kc := kubeconfig(t, cfg)
	// The chart itself, kubeVersion included: envtest-assets.sh stamps
	// the API server's version, which helm install checks.
	chart := chartDir()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The agent's view: its ServiceAccount's RBAC, nothing more.
	agentCS := serviceAccount(t, cfg, "gofit-system", "gofit-node")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	helmRun := func(args ...string) (string, error) {
		out, err := run(t, append(args, "--kubeconfig", kc)...)
		return string(out), err
	}

	// As cert-manager and Kyverno are installed: the release in a
	// namespace Helm creates first, the chart's objects in it.
	out, err := helmRun("install", "gofit", chart, "-n", "gofit-system", "--create-namespace")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"rollout status deployment/gofit-webhook", "rollout status daemonset/gofit-node", "gofit.dev/inject=enabled"} {
		if !strings.Contains(out, w) {
			t.Errorf("helm install's NOTES lack %q:\n%s", w, out)
		}
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "gofit-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the default install made namespace gofit-node: %v", err)
	}
	ds, err := cs.AppsV1().DaemonSets("gofit-system").Get(ctx, "gofit-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if yes, why := agent.Uninstalling(ctx, agentCS, "gofit-system", "gofit-node", ds.UID); yes {
		t.Errorf("after install the agent would reset: %s", why)
	}

	// What the running webhook writes (self-managed certificates): the CA
	// into the webhook configuration, the certificate into its Secret.
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gofit-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = []byte("CA")
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{FieldManager: "gofit-webhook"}); err != nil {
		t.Fatal(err)
	}
	sec, err := cs.CoreV1().Secrets("gofit-system").Get(ctx, "gofit-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{"tls.crt": []byte("crt"), "tls.key": []byte("key"), "ca.crt": []byte("CA")}
	if _, err := cs.CoreV1().Secrets("gofit-system").Update(ctx, sec, metav1.UpdateOptions{FieldManager: "gofit-webhook"}); err != nil {
		t.Fatal(err)
	}

	if out, err := helmRun("upgrade", "gofit", chart, "-n", "gofit-system", "--set", "webhook.replicas=4", "--set", "node.interval=20s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dep, err := cs.AppsV1().Deployments("gofit-system").Get(ctx, "gofit-webhook", metav1.GetOptions{})
	if err != nil || *dep.Spec.Replicas != 4 {
		t.Errorf("after the upgrade: webhook %v replicas, %v", dep.Spec.Replicas, err)
	}
	ds2, err := cs.AppsV1().DaemonSets("gofit-system").Get(ctx, "gofit-node", metav1.GetOptions{})
	if err != nil || ds2.UID != ds.UID || !strings.Contains(strings.Join(ds2.Spec.Template.Spec.Containers[0].Args, " "), "--interval=20s") {
		t.Errorf("after the upgrade: DaemonSet %v (UID %s, was %s), %v", ds2.Spec.Template.Spec.Containers[0].Args, ds2.UID, ds.UID, err)
	}
	if yes, why := agent.Uninstalling(ctx, agentCS, "gofit-system", "gofit-node", ds.UID); yes {
		t.Errorf("an upgrade would make the agent reset: %s", why)
	}
	if mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gofit-webhook", metav1.GetOptions{}); err != nil ||
		string(mwc.Webhooks[0].ClientConfig.CABundle) != "CA" {
		t.Errorf("the upgrade dropped the webhook's CA bundle: %v", err)
	}
	if sec, err := cs.CoreV1().Secrets("gofit-system").Get(ctx, "gofit-webhook-tls", metav1.GetOptions{}); err != nil || string(sec.Data["tls.crt"]) != "crt" {
		t.Errorf("the upgrade dropped the webhook's certificate: %v", err)
	}

	if out, err := helmRun("uninstall", "gofit", "-n", "gofit-system"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gofit-webhook", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after uninstall the webhook configuration is still there: %v", err)
	}
	if yes, why := agent.Uninstalling(ctx, agentCS, "gofit-system", "gofit-node", ds.UID); !yes {
		t.Errorf("after helm uninstall the agent would keep its values: %s", why)
	} else {
		t.Logf("after helm uninstall the agent resets: %s", why)
	}
	// The namespace is Helm's (--create-namespace), not the chart's:
	// uninstall leaves it, with nothing of the chart's in it.
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "gofit-system", metav1.GetOptions{})
	if err != nil || ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
		t.Errorf("helm uninstall deleted namespace gofit-system: %v", err)
	}
	for _, what := range []func() error{
		func() error {
			_, err := cs.AppsV1().Deployments("gofit-system").Get(ctx, "gofit-webhook", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.AppsV1().DaemonSets("gofit-system").Get(ctx, "gofit-node", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Secrets("gofit-system").Get(ctx, "gofit-webhook-tls", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts("gofit-system").Get(ctx, "gofit-node", metav1.GetOptions{})
			return err
		},
	} {
		if err := what(); !apierrors.IsNotFound(err) {
			t.Errorf("helm uninstall left an object of the chart in gofit-system: %v", err)
		}
	}
}

package webhook

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// deployDir is deploy/webhook in this checkout.
func deployDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "webhook")
}

// render builds a kustomize overlay of deploy/webhook with the kustomize
// library kubectl embeds.
func render(t testing.TB, overlay string) []*unstructured.Unstructured {
	t.Helper()
	return renderDir(t, filepath.Join(deployDir(), overlay))
}

// renderDir builds the kustomization in dir.
func renderDir(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string, into any) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if into != nil {
				if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
					t.Fatalf("%s %s: %v", kind, name, err)
				}
			}
			return o
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

// The manifests say what the issue asks of a production webhook.
func TestManifests(t *testing.T) {
	for _, overlay := range []string{"cert-manager", "self-managed"} {
		t.Run(overlay, func(t *testing.T) {
			objs := render(t, overlay)

			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			find(t, objs, "MutatingWebhookConfiguration", "gofit-webhook", &mwc)
			if len(mwc.Webhooks) != 1 {
				t.Fatalf("%d webhooks", len(mwc.Webhooks))
			}
			w := mwc.Webhooks[0]
			if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.TimeoutSeconds != 2 || *w.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun ||
				*w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
				t.Errorf("webhook policy %+v", w)
			}
			sel := w.NamespaceSelector.MatchExpressions
			if len(sel) != 2 || sel[0].Key != "gofit.dev/inject" || sel[0].Values[0] != "enabled" ||
				sel[1].Key != "kubernetes.io/metadata.name" || sel[1].Operator != "NotIn" || !slices.Equal(sel[1].Values, []string{"gofit-system", "kube-system"}) {
				t.Errorf("namespaceSelector %+v", sel)
			}
			if s := w.ClientConfig.Service; s == nil || s.Namespace != "gofit-system" || *s.Path != "/mutate" {
				t.Errorf("clientConfig %+v", w.ClientConfig)
			}
			if ops := []string{string(w.Rules[0].Operations[0]), w.Rules[0].Resources[0], string(w.Rules[1].Operations[0]), w.Rules[1].Resources[0]}; !slices.Equal(ops, []string{"CREATE", "pods", "UPDATE", "pods/resize"}) {
				t.Errorf("rules %v", ops)
			}

			var d appsv1.Deployment
			find(t, objs, "Deployment", "gofit-webhook", &d)
			pod := d.Spec.Template.Spec
			c := pod.Containers[0]
			if *d.Spec.Replicas != 3 || pod.PriorityClassName != "gofit-webhook" || pod.Affinity.PodAntiAffinity == nil || !*pod.SecurityContext.RunAsNonRoot ||
				!*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation {
				t.Errorf("deployment %+v", d.Spec)
			}
			find(t, objs, "PodDisruptionBudget", "gofit-webhook", nil)
			find(t, objs, "PriorityClass", "gofit-webhook", nil)
			find(t, objs, "Service", "gofit-webhook", nil)

			switch overlay {
			case "cert-manager":
				if mwc.Annotations["cert-manager.io/inject-ca-from"] != "gofit-system/gofit-webhook" {
					t.Errorf("no CA injection annotation: %v", mwc.Annotations)
				}
				cert := find(t, objs, "Certificate", "gofit-webhook", nil)
				dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
				secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
				if !slices.Contains(dns, "gofit-webhook.gofit-system.svc") || secret != "gofit-webhook-tls" {
					t.Errorf("certificate %v", cert.Object["spec"])
				}
				if *pod.AutomountServiceAccountToken {
					t.Error("cert-manager mode mounts an API token it does not need")
				}
				for _, o := range objs {
					if k := o.GetKind(); k == "Role" || k == "ClusterRole" {
						t.Errorf("cert-manager mode grants %s %s", k, o.GetName())
					}
				}
			case "self-managed":
				want := []string{"--self-managed-secret=gofit-system/gofit-webhook-tls", "--webhook-config=gofit-webhook", "--service-dns=gofit-webhook.gofit-system.svc"}
				for _, a := range want {
					if !slices.Contains(c.Args, a) {
						t.Errorf("args %v lack %s", c.Args, a)
					}
				}
				find(t, objs, "Secret", "gofit-webhook-tls", nil)
				// Least privilege: every write names its object.
				var cr rbacv1.ClusterRole
				var r rbacv1.Role
				find(t, objs, "ClusterRole", "gofit-webhook", &cr)
				find(t, objs, "Role", "gofit-webhook", &r)
				for _, rule := range append(cr.Rules, r.Rules...) {
					for _, v := range rule.Verbs {
						write := v == "update" || v == "patch" || v == "delete"
						if write && len(rule.ResourceNames) == 0 && rule.Resources[0] != "events" {
							t.Errorf("rule %+v writes without resourceNames", rule)
						}
						if v == "*" || rule.Resources[0] == "*" {
							t.Errorf("wildcard rule %+v", rule)
						}
					}
				}
			}
			b, _ := yaml.Marshal(mwc)
			t.Logf("%s webhook configuration:\n%s", overlay, b)
		})
	}
}

// The webhook's NetworkPolicy opens only its HTTPS port and no egress,
// except the API server for the self-managed rotator; the components that
// narrow ingress to the API server render over either overlay.
func TestNetworkPolicy(t *testing.T) {
	for overlay, egress := range map[string][]int32{"cert-manager": nil, "self-managed": {443, 6443}} {
		var np networkingv1.NetworkPolicy
		find(t, render(t, overlay), "NetworkPolicy", "gofit-webhook", &np)
		if np.Namespace != "gofit-system" || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "gofit-webhook" ||
			len(np.Spec.PolicyTypes) != 2 {
			t.Errorf("%s: policy %+v", overlay, np.Spec)
		}
		if in := np.Spec.Ingress; len(in) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.IntValue() != 8443 || len(in[0].From) != 0 {
			t.Errorf("%s: ingress %+v", overlay, in)
		}
		var ports []int32
		for _, r := range np.Spec.Egress {
			for _, p := range r.Ports {
				ports = append(ports, int32(p.Port.IntValue()))
			}
		}
		if !slices.Equal(ports, egress) {
			t.Errorf("%s: egress ports %v, want %v", overlay, ports, egress)
		}
	}

	// An operator's overlay with each component.
	for comp, check := range map[string]func([]*unstructured.Unstructured){
		"apiserver-cidr": func(objs []*unstructured.Unstructured) {
			var np networkingv1.NetworkPolicy
			find(t, objs, "NetworkPolicy", "gofit-webhook", &np)
			if from := np.Spec.Ingress[0].From; len(from) != 2 || from[0].IPBlock == nil || from[1].IPBlock == nil {
				t.Errorf("apiserver-cidr: ingress from %+v", from)
			}
		},
		"cilium": func(objs []*unstructured.Unstructured) {
			cnp := find(t, objs, "CiliumNetworkPolicy", "gofit-webhook-apiserver-only", nil)
			ents, _, _ := unstructured.NestedSlice(cnp.Object, "spec", "ingress")
			if len(ents) != 1 || !strings.Contains(fmt.Sprint(ents[0]), "kube-apiserver") {
				t.Errorf("cilium: ingress %v", ents)
			}
		},
	} {
		dir := t.TempDir()
		// kustomize takes relative paths only.
		base, err1 := filepath.Rel(dir, filepath.Join(deployDir(), "cert-manager"))
		c, err2 := filepath.Rel(dir, filepath.Join(deployDir(), comp))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		k := fmt.Sprintf("resources: [%s]\ncomponents: [%s]\n", base, c)
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
			t.Fatal(err)
		}
		objs := renderDir(t, dir)
		check(objs)
	}
}

package webhook

import (
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
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
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(deployDir(), overlay))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", overlay, err)
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
			if *w.FailurePolicy != admissionregistrationv1.Ignore || *w.TimeoutSeconds != 2 || *w.SideEffects != admissionregistrationv1.SideEffectClassNone ||
				*w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
				t.Errorf("webhook policy %+v", w)
			}
			sel := w.NamespaceSelector.MatchExpressions
			if len(sel) != 2 || sel[0].Key != "gofit.dev/inject" || sel[0].Values[0] != "enabled" ||
				sel[1].Key != "kubernetes.io/metadata.name" || sel[1].Operator != "NotIn" || sel[1].Values[0] != "gofit-system" {
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
			if *d.Spec.Replicas != 2 || pod.Affinity.PodAntiAffinity == nil || !*pod.SecurityContext.RunAsNonRoot ||
				!*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation {
				t.Errorf("deployment %+v", d.Spec)
			}
			find(t, objs, "PodDisruptionBudget", "gofit-webhook", nil)
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

package webhook

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestExperimentsComponent renders an overlay with the experiments
// component: the webhook gets --experiments, its token and exactly the
// rights arm assignment uses.
func TestExperimentsComponent(t *testing.T) {
	dir := t.TempDir()
	rel := func(name string) string {
		r, err := filepath.Rel(dir, filepath.Join(deployDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "resources: [" + rel("cert-manager") + "]\ncomponents: [" + rel("experiments") + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := renderDir(t, dir)
	var d appsv1.Deployment
	find(t, objs, "Deployment", "gofit-webhook", &d)
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--experiments") {
		t.Errorf("args %v", d.Spec.Template.Spec.Containers[0].Args)
	}
	if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || !*a {
		t.Error("no service account token: the assigner cannot reach the API server")
	}
	if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--experiment-namespaces=default") {
		t.Errorf("args %v: experiments not kept to the namespace the Role is in", d.Spec.Template.Spec.Containers[0].Args)
	}
	// Per namespace, never cluster-wide (issue 37): no ClusterRole of
	// experiments at all.
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == "gofit-webhook-experiments" {
			t.Error("a ClusterRole for experiments")
		}
	}
	var r rbacv1.Role
	find(t, objs, "Role", "gofit-webhook-experiments", &r)
	got := map[string][]string{}
	for _, rule := range r.Rules {
		for _, res := range rule.Resources {
			got[res] = rule.Verbs
		}
	}
	if r.Namespace != "default" || !slices.Equal(got["pods"], []string{"list", "watch"}) || !slices.Equal(got["leases"], []string{"get", "create", "update"}) ||
		// The pod's controller, checked before anything is written (issue 51, item 1).
		!slices.Equal(got["replicasets"], []string{"get"}) || !slices.Equal(got["statefulsets"], []string{"get"}) ||
		!slices.Equal(got["daemonsets"], []string{"get"}) || !slices.Equal(got["jobs"], []string{"get"}) ||
		// Whether a ReplicaSet's Deployment is Flagger's primary (issue 53).
		!slices.Equal(got["deployments"], []string{"get"}) || len(got) != 7 {
		t.Errorf("Role in %q: rules %v", r.Namespace, got)
	}
	var rb rbacv1.RoleBinding
	find(t, objs, "RoleBinding", "gofit-webhook-experiments", &rb)
	if s := rb.Subjects; len(s) != 1 || s[0].Name != "gofit-webhook" || s[0].Namespace != "gofit-system" || rb.RoleRef.Kind != "Role" {
		t.Errorf("subjects %+v, role %+v", s, rb.RoleRef)
	}
	find(t, objs, "ValidatingAdmissionPolicy", "gofit-webhook-leases", nil)
	find(t, objs, "ValidatingAdmissionPolicyBinding", "gofit-webhook-leases", nil)
}

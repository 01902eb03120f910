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
	var cr rbacv1.ClusterRole
	find(t, objs, "ClusterRole", "gofit-webhook-experiments", &cr)
	got := map[string][]string{}
	for _, r := range cr.Rules {
		for _, res := range r.Resources {
			got[res] = r.Verbs
		}
	}
	if !slices.Equal(got["pods"], []string{"list"}) || !slices.Equal(got["leases"], []string{"get", "create", "update"}) || len(got) != 2 {
		t.Errorf("rules %v", got)
	}
	var crb rbacv1.ClusterRoleBinding
	find(t, objs, "ClusterRoleBinding", "gofit-webhook-experiments", &crb)
	if s := crb.Subjects; len(s) != 1 || s[0].Name != "gofit-webhook" || s[0].Namespace != "gofit-system" {
		t.Errorf("subjects %+v", s)
	}
}

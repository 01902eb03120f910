package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestDeployTogether renders deploy/webhook/self-managed and deploy/node
// with an image-only overlay each, as TestGuest applies them, and checks
// that they can live on one cluster: no object in both, the agent outside
// the webhook's restricted namespace in a privileged one of its own, and
// both running the overridden image.
func TestDeployTogether(t *testing.T) {
	root := repoRoot(t)
	type key struct{ kind, ns, name string }
	seen := map[key]string{}
	images := map[string]string{}
	nsLabels := map[string]map[string]string{}
	for _, base := range []string{"deploy/webhook/self-managed", "deploy/node"} {
		dir := t.TempDir()
		rel, err := filepath.Rel(dir, filepath.Join(root, base))
		if err != nil {
			t.Fatal(err)
		}
		// kustomize takes a base by relative path only.
		k := "resources:\n  - " + rel + "\nimages:\n  - name: ghcr.io/gofit-dev/gofit\n    newTag: e2e\n"
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build of an overlay on %s: %v", base, err)
		}
		for _, r := range m.Resources() {
			id := key{r.GetKind(), r.GetNamespace(), r.GetName()}
			if other, dup := seen[id]; dup {
				t.Errorf("%s %s/%s is in both %s and %s: applying one changes the other's", id.kind, id.ns, id.name, other, base)
			}
			seen[id] = base
			if id.kind == "Namespace" {
				nsLabels[id.name] = r.GetLabels()
			}
			if id.kind == "Deployment" || id.kind == "DaemonSet" {
				obj, _ := r.Map()
				spec := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
				for _, c := range spec["containers"].([]any) {
					images[id.kind+"/"+id.name] = c.(map[string]any)["image"].(string)
				}
				if id.kind == "DaemonSet" && id.ns == "gofit-system" {
					t.Errorf("the node agent runs in gofit-system, whose restricted profile forbids its hostPath")
				}
			}
		}
	}
	if got := nsLabels["gofit-system"]["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("gofit-system enforces %q, want restricted", got)
	}
	if got := nsLabels["gofit-node"]["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("gofit-node enforces %q, want privileged", got)
	}
	for _, w := range []string{"Deployment/gofit-webhook", "DaemonSet/gofit-node"} {
		if images[w] != gofitImage {
			t.Errorf("%s runs %q, want the overridden %s", w, images[w], gofitImage)
		}
	}
}

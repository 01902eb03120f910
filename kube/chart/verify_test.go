package chart

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gofit-dev/gofit/kube/kubetest"
)

// yamlBlocks returns the yaml code blocks of docs/install.md's section
// title, in order.
func yamlBlocks(t *testing.T, title string) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n### "+title+"\n")
	if !ok {
		t.Fatalf("docs/install.md has no section %q", title)
	}
	if i := strings.Index(sec, "\n### "); i >= 0 {
		sec = sec[:i]
	}
	var out []string
	for {
		_, rest, ok := strings.Cut(sec, "```yaml\n")
		if !ok {
			return out
		}
		block, after, _ := strings.Cut(rest, "```")
		out, sec = append(out, block), after
	}
}

// TestPolicyEngineSamples: docs/install.md's Kyverno ClusterPolicy and
// Flux OCIRepository (with its key Secret) are valid against those
// projects' own CRDs (testdata/crds) in a real API server, by server-side
// dry run with strict field validation, and carry the repository's
// cosign.pub, the project's key.
func TestPolicyEngineSamples(t *testing.T) {
	blocks := yamlBlocks(t, "Policy engines: Kyverno and Flux")
	if len(blocks) != 2 {
		t.Fatalf("%d yaml blocks, want the Kyverno policy and the Flux source", len(blocks))
	}
	anchor, err := os.ReadFile(filepath.Join(root(), "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(anchor))

	crds := t.TempDir()
	for _, f := range []string{"kyverno.io_clusterpolicies.yaml.gz", "source.toolkit.fluxcd.io_ocirepositories.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", "crds", f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
			f = strings.TrimSuffix(f, ".gz")
		}
		if err := os.WriteFile(filepath.Join(crds, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := kubetest.Start(t, &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{Paths: []string{crds}, ErrorIfPathMissing: true}})
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]*unstructured.Unstructured{}
	for _, b := range blocks {
		for _, o := range decode(t, []byte(b)) {
			// Patch writes the API server's answer into o (stringData
			// becomes data): keep the sample as written.
			kinds[o.GetKind()] = o.DeepCopy()
			if err := cl.Patch(ctx, o, client.Apply, client.DryRunAll, client.FieldOwner("gofit-docs-test"), client.ForceOwnership,
				client.FieldValidation("Strict")); err != nil {
				t.Errorf("%s: %v", key(o), err)
			}
		}
	}
	policy, source, secret := kinds["ClusterPolicy"], kinds["OCIRepository"], kinds["Secret"]
	if policy == nil || source == nil || secret == nil {
		t.Fatalf("want a ClusterPolicy, an OCIRepository and a Secret: %v", kinds)
	}
	rules, _, _ := unstructured.NestedSlice(policy.Object, "spec", "rules")
	vi := rules[0].(map[string]any)["verifyImages"].([]any)[0].(map[string]any)
	entry := vi["attestors"].([]any)[0].(map[string]any)["entries"].([]any)[0].(map[string]any)
	got, _, _ := unstructured.NestedString(entry, "keys", "publicKeys")
	if strings.TrimSpace(got) != want {
		t.Errorf("the Kyverno policy's key is not the repository's cosign.pub:\n%s", got)
	}
	if refs, _ := vi["imageReferences"].([]any); len(refs) != 1 || refs[0] != "ghcr.io/gofit-dev/gofit*" {
		t.Errorf("the Kyverno policy checks %v, want gofit's image", refs)
	}
	ref, _, _ := unstructured.NestedString(source.Object, "spec", "verify", "secretRef", "name")
	if ref != secret.GetName() || secret.GetNamespace() != source.GetNamespace() {
		t.Errorf("the OCIRepository verifies with Secret %q, the sample's is %s", ref, secret.GetNamespace()+"/"+secret.GetName())
	}
	if pub, _, _ := unstructured.NestedString(secret.Object, "stringData", "cosign.pub"); strings.TrimSpace(pub) != want {
		t.Errorf("the Flux Secret's key is not the repository's cosign.pub:\n%s", pub)
	}
	if u, _, _ := unstructured.NestedString(source.Object, "spec", "url"); u != "oci://ghcr.io/gofit-dev/charts/gofit" {
		t.Errorf("the OCIRepository pulls %s, not gofit's chart", u)
	}
}

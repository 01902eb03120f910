package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestPinChart pins a copy of this checkout's chart values as make
// release does: image.repository and image.digest are the release's, and
// every other value and comment is as it was.
func TestPinChart(t *testing.T) {
	orig, err := os.ReadFile(filepath.Join("..", "..", "charts", "gofit", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write(t, filepath.Join(dir, "values.yaml"), orig)
	if err := PinChart(dir, "registry.example/gofit", testDigest); err != nil {
		t.Fatal(err)
	}
	pinned, _ := os.ReadFile(filepath.Join(dir, "values.yaml"))
	var got, was map[string]any
	if err := yaml.Unmarshal(pinned, &got); err != nil {
		t.Fatal(err)
	}
	yaml.Unmarshal(orig, &was)
	img := got["image"].(map[string]any)
	if img["repository"] != "registry.example/gofit" || img["digest"] != testDigest {
		t.Errorf("pinned image values %v", img)
	}
	img["repository"], img["digest"] = was["image"].(map[string]any)["repository"], was["image"].(map[string]any)["digest"]
	a, _ := yaml.Marshal(got)
	b, _ := yaml.Marshal(was)
	if string(a) != string(b) {
		t.Error("pinning changed values other than image.repository and image.digest")
	}
	if strings.Count(string(pinned), "\n") != strings.Count(string(orig), "\n") {
		t.Error("pinning added or dropped lines")
	}
	if _, err := PinValues([]byte("image:\n  tag: x\n"), "r", testDigest); err == nil {
		t.Error("PinValues without a digest line succeeded")
	}
	if _, err := PinValues(orig, "r", "sha256:abc"); err == nil {
		t.Error("PinValues took a short digest")
	}
}

// TestPinDeploy pins a copy of this checkout's deploy/: every images:
// entry names the release's repository, tag and digest, and a second pin
// replaces the first.
func TestPinDeploy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "deploy")
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	other := "sha256:" + strings.Repeat("f", 64)
	if err := PinDeploy(dir, "registry.example/gofit", "v9.8.7", other); err != nil {
		t.Fatal(err)
	}
	if err := PinDeploy(dir, "registry.example/gofit", "v9.8.7", testDigest); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range []string{"webhook/base", "node"} {
		b, err := os.ReadFile(filepath.Join(dir, k, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var kz struct {
			Images []struct{ Name, NewName, NewTag, Digest string }
		}
		if err := yaml.Unmarshal(b, &kz); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		for _, im := range kz.Images {
			n++
			if im.NewName != "registry.example/gofit" || im.NewTag != "v9.8.7" || im.Digest != testDigest {
				t.Errorf("%s: image %+v", k, im)
			}
		}
	}
	if n < 2 {
		t.Errorf("%d images pinned, want the webhook's and the agent's", n)
	}
	// Nothing the release ships names gofit's image by tag alone: the
	// rollouts' AnalysisTemplate once kept ghcr.io/gofit-dev/gofit:v0.1.0.
	refs := 0
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(p, ".yaml") || info.Name() == "kustomization.yaml" {
			return err
		}
		b, _ := os.ReadFile(p)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, SourceImage) || strings.Contains(l, "registry.example/gofit") {
				refs++
				if !strings.HasSuffix(strings.TrimSpace(l), "registry.example/gofit:v9.8.7@"+testDigest) {
					t.Errorf("%s: %q is not pinned to the release's digest", p, strings.TrimSpace(l))
				}
			}
		}
		return nil
	})
	if refs == 0 {
		t.Error("no full image reference under deploy/ (deploy/rollouts names one)")
	}
	if out, pinned, err := PinImageRefs([]byte("image: ghcr.io/gofit-dev/gofit-other:v1\nimage: docker.io/library/busybox:1\n"), "r", "v1", testDigest); err != nil || pinned || !strings.Contains(string(out), "gofit-other:v1") {
		t.Errorf("PinImageRefs pinned another image: %q %v %v", out, pinned, err)
	}
	if err := PinDeploy(t.TempDir(), "r", "v1", testDigest); err == nil {
		t.Error("PinDeploy of a directory without kustomizations succeeded")
	}
}

package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

func untar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
}

type descriptor struct {
	MediaType    string
	Digest       string
	Size         int64
	ArtifactType string
	Annotations  map[string]string
	Platform     *struct{ OS, Architecture string }
}

// TestWriteReadsBack writes a two-platform image and checks it as an
// importer would: every blob's name is its digest; index.json names the
// image index (containerd's and image-spec's annotations) and lists one
// SBOM referrer per platform whose subject is that platform's manifest;
// the image index has one manifest per platform, each config saying its
// architecture; manifest.json (docker load) names the chosen platform's
// config and layer; the config's diff_id is the uncompressed layer's
// digest; the layer holds the files with their parents.
func TestWriteReadsBack(t *testing.T) {
	created := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	img := Image{Ref: "localhost:5000/gofit/test:v1", User: NonRoot, Entrypoint: []string{"/app"}, Files: Base([]byte("CERTS")),
		Platforms: []Platform{
			{Arch: "amd64", Files: []File{{Path: "/app", Mode: 0o755, Data: []byte("#!amd64")}}, SBOM: []byte(`{"amd64":1}`)},
			{Arch: "arm64", Files: []File{{Path: "/app", Mode: 0o755, Data: []byte("#!arm64")}}, SBOM: []byte(`{"arm64":1}`)},
		},
		Annotations: map[string]string{"org.opencontainers.image.version": "v1"}, Created: created, DockerArch: "arm64"}
	var buf bytes.Buffer
	digest, err := Write(&buf, img)
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, bytes.NewReader(buf.Bytes()))
	for name, b := range files {
		if hexd, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexd != "" {
			if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != hexd {
				t.Errorf("blob %s has digest %x", name, s)
			}
		}
	}
	if string(files["oci-layout"]) == "" {
		t.Error("no oci-layout file")
	}
	var layout struct{ Manifests []descriptor }
	mustJSON(t, files["index.json"], &layout)
	if len(layout.Manifests) != 3 || layout.Manifests[0].Digest != digest.String() ||
		layout.Manifests[0].Annotations["io.containerd.image.name"] != img.Ref ||
		layout.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1" {
		t.Fatalf("index.json (index digest %s) = %s", digest, files["index.json"])
	}
	var index struct {
		MediaType   string
		Manifests   []descriptor
		Annotations map[string]string
	}
	mustJSON(t, files[blobPath(digest.String())], &index)
	if index.MediaType != "application/vnd.oci.image.index.v1+json" || len(index.Manifests) != 2 || index.Annotations["org.opencontainers.image.version"] != "v1" {
		t.Fatalf("image index = %s", files[blobPath(digest.String())])
	}
	byArch := map[string]string{}
	for _, m := range index.Manifests {
		var man struct {
			Config      struct{ Digest string }
			Layers      []struct{ Digest, MediaType string }
			Annotations map[string]string
		}
		mustJSON(t, files[blobPath(m.Digest)], &man)
		var cfg struct {
			Architecture, OS, Created string
			Config                    struct {
				User       string
				Entrypoint []string
			}
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			}
		}
		mustJSON(t, files[blobPath(man.Config.Digest)], &cfg)
		if m.Platform == nil || m.Platform.OS != "linux" || cfg.Architecture != m.Platform.Architecture || cfg.OS != "linux" ||
			cfg.Created != "2026-11-26T12:00:00Z" || cfg.Config.User != NonRoot || cfg.Config.Entrypoint[0] != "/app" ||
			man.Annotations["org.opencontainers.image.version"] != "v1" || len(man.Layers) != 1 ||
			man.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("manifest %+v config %+v platform %+v", man, cfg, m.Platform)
			continue
		}
		byArch[cfg.Architecture] = m.Digest
		zr, err := gzip.NewReader(bytes.NewReader(files[blobPath(man.Layers[0].Digest)]))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(zr)
		if s := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(s[:]) != cfg.RootFS.DiffIDs[0] {
			t.Errorf("diff_id %s is not the layer's digest %x", cfg.RootFS.DiffIDs[0], s)
		}
		var names []string
		lr := tar.NewReader(bytes.NewReader(raw))
		for {
			h, err := lr.Next()
			if err != nil {
				break
			}
			names = append(names, h.Name)
			if h.Name == "tmp/" && h.Mode != 0o1777 {
				t.Errorf("/tmp mode %o, want 1777", h.Mode)
			}
			if h.Name == "app" {
				b, _ := io.ReadAll(lr)
				if string(b) != "#!"+cfg.Architecture {
					t.Errorf("%s image's /app is %q", cfg.Architecture, b)
				}
			}
			if !h.ModTime.Equal(created) {
				t.Errorf("%s: time %v, want %v", h.Name, h.ModTime, created)
			}
		}
		want := "app etc/ etc/group etc/passwd etc/ssl/ etc/ssl/certs/ etc/ssl/certs/ca-certificates.crt home/ home/nonroot/ tmp/"
		if got := strings.Join(names, " "); got != want {
			t.Errorf("layer holds %s, want %s", got, want)
		}
		if cfg.Architecture == "arm64" {
			var docker []struct {
				Config   string
				RepoTags []string
				Layers   []string
			}
			mustJSON(t, files["manifest.json"], &docker)
			if len(docker) != 1 || docker[0].Config != blobPath(man.Config.Digest) || docker[0].RepoTags[0] != img.Ref ||
				len(docker[0].Layers) != 1 || docker[0].Layers[0] != blobPath(man.Layers[0].Digest) {
				t.Errorf("manifest.json %s does not name the arm64 image %+v", files["manifest.json"], man)
			}
		}
	}
	for _, ref := range layout.Manifests[1:] {
		var art struct {
			ArtifactType string
			Subject      descriptor
			Layers       []descriptor
		}
		mustJSON(t, files[blobPath(ref.Digest)], &art)
		if ref.ArtifactType != SBOMType || art.ArtifactType != SBOMType || len(art.Layers) != 1 {
			t.Errorf("referrer %s = %s", ref.Digest, files[blobPath(ref.Digest)])
			continue
		}
		arch := ""
		for a, d := range byArch {
			if d == art.Subject.Digest {
				arch = a
			}
		}
		if got := string(files[blobPath(art.Layers[0].Digest)]); arch == "" || got != `{"`+arch+`":1}` {
			t.Errorf("referrer of %s (%q) holds %s", art.Subject.Digest, arch, got)
		}
	}

	// Same inputs, same bytes; another time, another digest.
	var again bytes.Buffer
	if d2, err := Write(&again, img); err != nil || d2 != digest || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("two writes of the same image differ: %v %v", d2, err)
	}
	img.Created = created.Add(time.Second)
	if d3, err := Write(io.Discard, img); err != nil || d3 == digest {
		t.Errorf("another SOURCE_DATE_EPOCH, same digest %v (%v)", d3, err)
	}
}

func TestWriteErrors(t *testing.T) {
	one := []Platform{{Arch: "amd64"}}
	for _, tc := range []struct {
		img  Image
		want string
	}{
		{Image{Ref: "gofit", Platforms: one}, "needs a name and a tag"},
		{Image{Ref: "localhost:5000/gofit", Platforms: one}, "needs a name and a tag"},
		{Image{Ref: "ghcr.io/gofit-dev/gofit:latest", Platforms: one}, "not latest"},
		{Image{Ref: "gofit:1"}, "no platforms"},
		{Image{Ref: "gofit:1", Platforms: []Platform{{Arch: "amd64"}, {Arch: "amd64"}}}, `"amd64": empty or given twice`},
		{Image{Ref: "gofit:1", Platforms: one, DockerArch: "s390x"}, `docker platform "s390x"`},
		{Image{Ref: "gofit:1", Platforms: one, Files: []File{{Path: "rel", Mode: 0o644}}}, `"rel": want an absolute path`},
		{Image{Ref: "gofit:1", Platforms: one, Files: []File{{Path: "/a", Mode: 0o644}, {Path: "/a/", Mode: 0o644}}}, `"/a" given twice`},
	} {
		_, err := Write(io.Discard, tc.img)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%+v) = %v, want %q", tc.img, err, tc.want)
		}
	}
	if _, err := Write(io.Discard, Image{Ref: "x", Platforms: one}); !errors.Is(err, ErrBadRef) {
		t.Errorf("want ErrBadRef, got %v", err)
	}
}

// TestSBOM reads mkimage's build info (a test binary records no modules):
// its modules, with their package URLs, are in the bill of materials.
func TestSBOM(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "mkimage")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", exe, "./mkimage").CombinedOutput(); err != nil {
		t.Fatalf("build mkimage: %v\n%s", err, out)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1764158400, 0)
	raw, err := SBOM(b, created)
	if err != nil {
		t.Fatal(err)
	}
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(raw), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	if bom.SpecVersion != cdx.SpecVersion1_6 || bom.Metadata == nil || bom.Metadata.Timestamp != "2025-11-26T12:00:00Z" || bom.Metadata.Component == nil {
		t.Fatalf("metadata: %+v", bom.Metadata)
	}
	found := ""
	if bom.Components == nil {
		t.Fatal("no components")
	}
	for _, c := range *bom.Components {
		if c.Name == "github.com/google/go-containerregistry" {
			found = c.PackageURL
		}
	}
	if !strings.HasPrefix(found, "pkg:golang/github.com/google/go-containerregistry@v0.") {
		t.Errorf("no go-containerregistry component with its purl among %d (found %q)", len(*bom.Components), found)
	}
	if again, _ := SBOM(b, created); !bytes.Equal(raw, again) {
		t.Error("two SBOMs of one binary differ")
	}
	if _, err := SBOM([]byte("#!/bin/sh\n"), created); err == nil {
		t.Error("an SBOM of a shell script")
	}
	// A release's SBOM names the release: the build info of a binary
	// built in the workspace says only (devel).
	if v := bom.Metadata.Component.Version; v != "(devel)" && v != "" {
		t.Logf("the build info records version %q", v)
	}
	raw, err = SBOMVersion(b, created, "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	var rel cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(raw), cdx.BOMFileFormatJSON).Decode(&rel); err != nil {
		t.Fatal(err)
	}
	if c := rel.Metadata.Component; c.Version != "v1.2.3" || c.PackageURL != "pkg:golang/github.com/gofit-dev/gofit/tools@v1.2.3" || c.BOMRef != c.PackageURL {
		t.Errorf("with version v1.2.3: component %s %s %s", c.Version, c.PackageURL, c.BOMRef)
	}

	// Built in a git checkout with VCS stamping (the go command's default
	// where git is installed, unless GOFLAGS says -buildvcs=false), Go
	// stamps a pseudo-version of its own; the release's version still
	// names the component, and the stamped one is kept.
	if err := exec.Command("git", "rev-parse", "--git-dir").Run(); err != nil {
		t.Logf("not in a git checkout (%v): the VCS-stamped case is TestMainVersion's alone", err)
		return
	}
	stamped := filepath.Join(t.TempDir(), "mkimage")
	if out, err := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-o", stamped, "./mkimage").CombinedOutput(); err != nil {
		t.Fatalf("build mkimage -buildvcs=true: %v\n%s", err, out)
	}
	if b, err = os.ReadFile(stamped); err != nil {
		t.Fatal(err)
	}
	if raw, err = SBOMVersion(b, created, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	rel = cdx.BOM{}
	if err := cdx.NewBOMDecoder(bytes.NewReader(raw), cdx.BOMFileFormatJSON).Decode(&rel); err != nil {
		t.Fatal(err)
	}
	c := rel.Metadata.Component
	var kept string
	if c.Properties != nil {
		for _, p := range *c.Properties {
			if p.Name == "go.main.version" {
				kept = p.Value
			}
		}
	}
	if c.Version != "v1.2.3" || c.PackageURL != "pkg:golang/github.com/gofit-dev/gofit/tools@v1.2.3" || !strings.HasPrefix(kept, "v") {
		t.Errorf("VCS-stamped build with version v1.2.3: component %s %s, go.main.version %q", c.Version, c.PackageURL, kept)
	}
}

// TestMainVersion: which version an SBOM names for the main module.
func TestMainVersion(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "79423932bb31"}}
	for _, c := range []struct {
		name, built, given string
		settings           []debug.BuildSetting
		want               string
	}{
		{"workspace build, no release", "(devel)", "", nil, "(devel)"},
		{"workspace build, release", "(devel)", "v1.2.3", nil, "v1.2.3"},
		{"no version recorded, release", "", "v1.2.3", nil, "v1.2.3"},
		{"VCS pseudo-version, release", "v0.0.0-20261129072925-79423932bb31", "v1.2.3", vcs, "v1.2.3"},
		{"VCS dirty tree, release", "v1.2.2+dirty", "v1.2.3", vcs, "v1.2.3"},
		{"VCS pseudo-version, no release", "v0.0.0-20261129072925-79423932bb31", "", vcs, "v0.0.0-20261129072925-79423932bb31"},
		{"module at a version (go install PATH@VERSION)", "v1.2.0", "v1.2.3", nil, "v1.2.0"},
	} {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/gofit-dev/gofit/cmd/gofit", Version: c.built}, Settings: c.settings}
		if got := mainVersion(bi, c.given); got != c.want {
			t.Errorf("%s: mainVersion(%q, %q) = %q, want %q", c.name, c.built, c.given, got, c.want)
		}
	}
}

// TestReproducible builds a program twice for both platforms, in two
// directories, as make image does (-trimpath, CGO_ENABLED=0), and writes
// the image of each build: the index digests are equal.
func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping four go builds in -short mode")
	}
	digests := []string{}
	for build := range 2 {
		dir := t.TempDir()
		img := Image{Ref: "localhost/pause:v1", Files: Base([]byte("CERTS")), Entrypoint: []string{"/app"}, User: NonRoot,
			Created: time.Unix(1764158400, 0)}
		for _, arch := range []string{"amd64", "arm64"} {
			exe := filepath.Join(dir, arch, "app")
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", exe, "./pause")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("build %d for %s: %v\n%s", build, arch, err, out)
			}
			b, err := os.ReadFile(exe)
			if err != nil {
				t.Fatal(err)
			}
			sbom, err := SBOM(b, img.Created)
			if err != nil {
				t.Fatal(err)
			}
			img.Platforms = append(img.Platforms, Platform{Arch: arch, Files: []File{{Path: "/app", Mode: 0o755, Data: b}}, SBOM: sbom})
		}
		d, err := Write(io.Discard, img)
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d.String())
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of one source, two index digests: %v", digests)
	}
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}

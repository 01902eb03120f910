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
	"strings"
	"testing"
)

// TestWriteReadsBack writes an image and checks it as an importer would:
// every blob's name is its digest, index.json and manifest.json point at
// the same manifest and config, the config's diff_id is the uncompressed
// layer's digest, and the layer holds the files with their parents.
func TestWriteReadsBack(t *testing.T) {
	img := Image{Ref: "localhost:5000/gofit/test:v1", User: NonRoot, Entrypoint: []string{"/app"},
		Files: append(Base([]byte("CERTS")), File{Path: "/app", Mode: 0o755, Data: []byte("#!binary")})}
	var buf bytes.Buffer
	if err := Write(&buf, img); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	for name, b := range files {
		if hexd, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexd != "" {
			if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != hexd {
				t.Errorf("blob %s has digest %x", name, s)
			}
		}
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	mustJSON(t, files["index.json"], &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != img.Ref ||
		index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v1" {
		t.Fatalf("index.json = %s", files["index.json"])
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest, MediaType string }
	}
	mustJSON(t, files[blobPath(index.Manifests[0].Digest)], &manifest)
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	mustJSON(t, files["manifest.json"], &docker)
	if len(docker) != 1 || docker[0].Config != blobPath(manifest.Config.Digest) || docker[0].RepoTags[0] != img.Ref ||
		len(manifest.Layers) != 1 || docker[0].Layers[0] != blobPath(manifest.Layers[0].Digest) {
		t.Fatalf("manifest.json %s does not match the OCI manifest %+v", files["manifest.json"], manifest)
	}
	var config struct {
		Config struct {
			User       string
			Entrypoint []string
		}
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	mustJSON(t, files[docker[0].Config], &config)
	if config.Config.User != NonRoot || config.Config.Entrypoint[0] != "/app" {
		t.Errorf("config = %+v", config.Config)
	}
	zr, err := gzip.NewReader(bytes.NewReader(files[docker[0].Layers[0]]))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(zr)
	if s := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(s[:]) != config.RootFS.DiffIDs[0] {
		t.Errorf("diff_id %s is not the layer's digest %x", config.RootFS.DiffIDs[0], s)
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
	}
	want := "app etc/ etc/group etc/passwd etc/ssl/ etc/ssl/certs/ etc/ssl/certs/ca-certificates.crt home/ home/nonroot/ tmp/"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("layer holds %s, want %s", got, want)
	}

	// Same inputs, same bytes: the digest does not depend on when it ran.
	var again bytes.Buffer
	if err := Write(&again, img); err != nil {
		t.Fatal(err)
	}
	var first bytes.Buffer
	Write(&first, img)
	if !bytes.Equal(first.Bytes(), again.Bytes()) {
		t.Error("two writes of the same image differ")
	}
}

func TestWriteErrors(t *testing.T) {
	for _, tc := range []struct {
		img  Image
		want string
	}{
		{Image{Ref: "gofit"}, "needs a name and a tag"},
		{Image{Ref: "localhost:5000/gofit"}, "needs a name and a tag"},
		{Image{Ref: "gofit:1", Files: []File{{Path: "rel", Mode: 0o644}}}, `"rel": want an absolute path`},
		{Image{Ref: "gofit:1", Files: []File{{Path: "/a", Mode: 0o644}, {Path: "/a/", Mode: 0o644}}}, `"/a" given twice`},
	} {
		err := Write(io.Discard, tc.img)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Write(%+v) = %v, want %q", tc.img, err, tc.want)
		}
	}
	if err := Write(io.Discard, Image{Ref: "x"}); !errors.Is(err, ErrBadRef) {
		t.Errorf("want ErrBadRef, got %v", err)
	}
}

func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
}

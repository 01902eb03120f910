// Package ociimage writes a single-layer container image as a tarball that
// both `docker load` and `ctr images import` accept, without a Docker
// daemon: an OCI image layout (oci-layout, index.json, blobs/sha256/...)
// plus the manifest.json that `docker save` writes, both naming the same
// blobs. The layer holds the files given and nothing else, with fixed
// modification times and owners, so the same inputs give the same image
// digest on every machine.
//
// The formats: https://github.com/opencontainers/image-spec (image-layout.md,
// manifest.md, config.md) and Docker's "Combined Image JSON + Filesystem
// Changeset Format" for manifest.json.
package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// File is one regular file or directory in the image's only layer.
type File struct {
	Path string      // absolute path in the image, e.g. "/gofit"
	Mode os.FileMode // permission bits, plus os.ModeDir for a directory
	Data []byte      // contents (nil for a directory)
	UID  int
	GID  int
}

// Image is what goes into the tarball.
type Image struct {
	// Ref is the full reference the image is imported as, e.g.
	// "ghcr.io/gofit-dev/gofit:dev" (a tag is required: an untagged or
	// :latest image makes the kubelet try to pull).
	Ref        string
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string // "65532:65532"; empty runs as root
	WorkingDir string
	Labels     map[string]string
}

// epoch is the fixed modification time of every file and the creation time
// of the image: reproducible digests, as ko and distroless do.
var epoch = time.Unix(0, 0).UTC()

// ErrBadRef means the reference has no tag or an empty name.
var ErrBadRef = errors.New("image reference needs a name and a tag (name:tag)")

// splitRef splits "registry/name:tag" into name and tag; the tag is after
// the last colon that follows the last slash (a registry may have a port).
func splitRef(ref string) (name, tag string, err error) {
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash || colon == len(ref)-1 || colon == 0 {
		return "", "", fmt.Errorf("%q: %w", ref, ErrBadRef)
	}
	return ref[:colon], ref[colon+1:], nil
}

// Write writes the image tarball to w.
func Write(w io.Writer, img Image) error {
	_, tag, err := splitRef(img.Ref)
	if err != nil {
		return err
	}
	layerTar, err := layer(img.Files)
	if err != nil {
		return err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.ModTime = epoch
	if _, err := zw.Write(layerTar); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	diffID := digest(layerTar)
	layerBlob := gz.Bytes()

	type cfg struct {
		User       string            `json:"User,omitempty"`
		Env        []string          `json:"Env,omitempty"`
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Cmd        []string          `json:"Cmd,omitempty"`
		WorkingDir string            `json:"WorkingDir,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	}
	config, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": "amd64",
		"os":           "linux",
		"config": cfg{User: img.User, Env: img.Env, Entrypoint: img.Entrypoint, Cmd: img.Cmd,
			WorkingDir: img.WorkingDir, Labels: img.Labels},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]string{{"created": epoch.Format(time.RFC3339), "created_by": "gofit tools/ociimage"}},
	})
	if err != nil {
		return err
	}
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        desc{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digest(config), Size: len(config)},
		"layers":        []desc{{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: digest(layerBlob), Size: len(layerBlob)}},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []desc{{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: digest(manifest), Size: len(manifest),
			// containerd names the image from the first, image-spec tools
			// from the second (a tag there, by convention).
			Annotations: map[string]string{"io.containerd.image.name": img.Ref, "org.opencontainers.image.ref.name": tag}}},
	})
	if err != nil {
		return err
	}
	blob := func(b []byte) string { return "blobs/sha256/" + strings.TrimPrefix(digest(b), "sha256:") }
	dockerManifest, err := json.Marshal([]map[string]any{{
		"Config": blob(config), "RepoTags": []string{img.Ref}, "Layers": []string{blob(layerBlob)},
	}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{blob(config), config},
		{blob(layerBlob), layerBlob},
		{blob(manifest), manifest},
		{"index.json", index},
		{"manifest.json", dockerManifest},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layer is the uncompressed layer tar: the files sorted by path, each
// parent directory before its children (created when not given).
func layer(files []File) ([]byte, error) {
	byPath := map[string]File{}
	for _, f := range files {
		p := path.Clean(f.Path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("image file %q: want an absolute path below /", f.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("image file %q given twice", p)
		}
		f.Path = p
		byPath[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Mode: os.ModeDir | 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		f := byPath[p]
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: int64(f.Mode.Perm()), ModTime: epoch,
			Uid: f.UID, Gid: f.GID, Format: tar.FormatPAX}
		if f.Mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.Mode.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// NonRoot is the user distroless's :nonroot images run as; Base gives the
// files that make it a user (passwd, group) and the usual /tmp.
const NonRoot = "65532:65532"

// Base is the minimal filesystem a static Go binary expects: /etc/passwd
// and /etc/group naming root and nonroot (65532, as distroless does), a
// sticky /tmp, and the CA bundle given (nil leaves it out).
func Base(caCerts []byte) []File {
	fs := []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:65532:\n")},
		{Path: "/home/nonroot", Mode: os.ModeDir | 0o700, UID: 65532, GID: 65532},
		{Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777},
	}
	if caCerts != nil {
		fs = append(fs, File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: caCerts})
	}
	return fs
}

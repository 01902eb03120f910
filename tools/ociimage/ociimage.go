// Package ociimage writes a multi-platform container image as one tarball
// that both `docker load` and `ctr images import` accept, without a Docker
// daemon. go-containerregistry builds the images, the image index and the
// OCI image layout (oci-layout, index.json, blobs/sha256/...); this package
// adds what it does not do: a layer made only of the files given, with
// fixed times and owners; an SBOM per platform, attached as an OCI 1.1
// referrer (an artifact manifest whose subject is the platform's image
// manifest) listed in the layout's index.json; and docker save's
// manifest.json, naming one platform's blobs, for `docker load`.
//
// The same inputs give the same bytes, hence the same index digest, on
// every machine: every time in the tarball is Image.Created.
package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one regular file or directory in an image's only layer.
type File struct {
	Path string      // absolute path in the image, e.g. "/gofit"
	Mode os.FileMode // permission bits, plus os.ModeDir for a directory
	Data []byte      // contents (nil for a directory)
	UID  int
	GID  int
}

// Platform is one linux/ARCH image of the index.
type Platform struct {
	Arch  string // GOARCH: amd64, arm64
	Files []File // this platform's files, added to Image.Files
	// SBOM, when not nil, is attached to the platform's image as a
	// referrer of type SBOMType.
	SBOM []byte
}

// SBOMType is the artifact type of the attached SBOMs.
const SBOMType = "application/vnd.cyclonedx+json"

// Image is what goes into the tarball.
type Image struct {
	// Ref is the full reference the image is imported as, e.g.
	// "ghcr.io/gofit-dev/gofit:v0.3.0" (a tag is required: an untagged or
	// :latest image makes the kubelet try to pull).
	Ref       string
	Platforms []Platform
	// Files are in every platform's image (Base, say).
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string // "65532:65532"; empty runs as root
	WorkingDir string
	Labels     map[string]string
	// Annotations go on the index and on each image manifest
	// (org.opencontainers.image.source, .revision, .version, .created).
	Annotations map[string]string
	// Created is the time of every file, history entry and config (from
	// SOURCE_DATE_EPOCH); zero means the Unix epoch.
	Created time.Time
	// DockerArch is the platform `docker load` gets (docker save's
	// manifest.json names one image per tag); empty means the first.
	DockerArch string
}

// ErrBadRef means the reference has no tag or is not a valid reference.
var ErrBadRef = errors.New("image reference needs a name and a tag (name:tag)")

// Write writes the image tarball to w and returns the index's digest.
func Write(w io.Writer, img Image) (v1.Hash, error) {
	tag, err := name.NewTag(img.Ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%q: %w: %v", img.Ref, ErrBadRef, err)
	}
	if !strings.HasSuffix(img.Ref, ":"+tag.TagStr()) {
		return v1.Hash{}, fmt.Errorf("%q: %w", img.Ref, ErrBadRef)
	}
	if tag.TagStr() == "latest" {
		return v1.Hash{}, fmt.Errorf("%q: %w, not latest: the kubelet pulls :latest on every start", img.Ref, ErrBadRef)
	}
	if len(img.Platforms) == 0 {
		return v1.Hash{}, errors.New("image has no platforms")
	}
	created := img.Created.UTC()
	if img.Created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}
	dir, err := os.MkdirTemp("", "gofit-image-*")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	images := map[string]v1.Image{}
	dockerArch := img.DockerArch
	for i, p := range img.Platforms {
		if dockerArch == "" && i == 0 {
			dockerArch = p.Arch
		}
		if _, dup := images[p.Arch]; dup || p.Arch == "" {
			return v1.Hash{}, fmt.Errorf("platform %q: empty or given twice", p.Arch)
		}
		one, err := platformImage(img, p, created)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("linux/%s: %w", p.Arch, err)
		}
		images[p.Arch] = one
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: one,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: p.Arch}}})
	}
	if images[dockerArch] == nil {
		return v1.Hash{}, fmt.Errorf("docker platform %q is not among the platforms", dockerArch)
	}
	if len(img.Annotations) > 0 {
		idx = mutate.Annotations(idx, img.Annotations).(v1.ImageIndex)
	}
	// containerd names the image from the first annotation, image-spec
	// tools from the second (a tag there, by convention).
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name": img.Ref, "org.opencontainers.image.ref.name": tag.TagStr()})); err != nil {
		return v1.Hash{}, err
	}
	for _, p := range img.Platforms {
		if p.SBOM != nil {
			if err := attachSBOM(lp, images[p.Arch], p.SBOM, created); err != nil {
				return v1.Hash{}, fmt.Errorf("linux/%s SBOM: %w", p.Arch, err)
			}
		}
	}
	if err := dockerManifest(lp, images[dockerArch], img.Ref); err != nil {
		return v1.Hash{}, err
	}
	if err := tarDir(w, dir, created); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

func platformImage(img Image, p Platform, created time.Time) (v1.Image, error) {
	raw, err := layer(append(append([]File(nil), img.Files...), p.Files...), created)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	one, err := mutate.Append(base, mutate.Addendum{Layer: l,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "gofit tools/ociimage"}})
	if err != nil {
		return nil, err
	}
	cfg, err := one.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Created = "linux", p.Arch, v1.Time{Time: created}
	cfg.Config = v1.Config{User: img.User, Env: img.Env, Entrypoint: img.Entrypoint, Cmd: img.Cmd,
		WorkingDir: img.WorkingDir, Labels: img.Labels}
	one, err = mutate.ConfigFile(one, cfg)
	if err != nil {
		return nil, err
	}
	if len(img.Annotations) > 0 {
		one = mutate.Annotations(one, img.Annotations).(v1.Image)
	}
	return one, nil
}

// emptyConfig is the OCI 1.1 empty descriptor's content, the config of an
// artifact manifest.
var emptyConfig = []byte("{}")

// attachSBOM writes an artifact manifest whose subject is img and whose
// one layer is the SBOM, and lists it in the layout's index.json, where
// OCI 1.1 keeps referrers in a layout (no name: importers leave it be).
func attachSBOM(lp layout.Path, img v1.Image, sbom []byte, created time.Time) error {
	subject, err := describe(img)
	if err != nil {
		return err
	}
	cfgHash, cfgSize, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return err
	}
	sbomHash, sbomSize, err := v1.SHA256(bytes.NewReader(sbom))
	if err != nil {
		return err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  SBOMType,
		Config:        v1.Descriptor{MediaType: "application/vnd.oci.empty.v1+json", Digest: cfgHash, Size: cfgSize, Data: emptyConfig},
		Layers: []v1.Descriptor{{MediaType: SBOMType, Digest: sbomHash, Size: sbomSize,
			Annotations: map[string]string{"org.opencontainers.image.title": "sbom.cdx.json"}}},
		Subject:     &subject,
		Annotations: map[string]string{"org.opencontainers.image.created": created.Format(time.RFC3339)},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	mHash, mSize, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	for _, b := range []struct {
		h v1.Hash
		d []byte
	}{{cfgHash, emptyConfig}, {sbomHash, sbom}, {mHash, raw}} {
		if err := lp.WriteBlob(b.h, io.NopCloser(bytes.NewReader(b.d))); err != nil {
			return err
		}
	}
	return lp.AppendDescriptor(v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: mHash, Size: mSize, ArtifactType: SBOMType})
}

func describe(img v1.Image) (v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	n, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: n}, nil
}

// dockerManifest writes docker save's manifest.json for one image of the
// layout: `docker load` reads it (and ignores index.json before Docker 25).
func dockerManifest(lp layout.Path, img v1.Image, ref string) error {
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	var layers []string
	for _, l := range m.Layers {
		layers = append(layers, blob(l.Digest))
	}
	raw, err := json.Marshal([]map[string]any{{"Config": blob(cfg), "RepoTags": []string{ref}, "Layers": layers}})
	if err != nil {
		return err
	}
	return lp.WriteFile("manifest.json", raw, 0o644)
}

// tarDir writes the layout directory as a tar, in name order, with one
// time and owner for every entry.
func tarDir(w io.Writer, dir string, created time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		if st.IsDir() {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: n + "/", Mode: 0o755, ModTime: created}); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(b)), ModTime: created}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	return tw.Close()
}

// layer is the uncompressed layer tar: the files sorted by path, each
// parent directory before its children (created when not given).
func layer(files []File, created time.Time) ([]byte, error) {
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
		h := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: int64(f.Mode.Perm()), ModTime: created,
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

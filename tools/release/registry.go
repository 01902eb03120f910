package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gofit-dev/gofit/tools/archive"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"sigs.k8s.io/yaml"
)

// cosign's formats: the simple-signing layer of a .sig image, the DSSE
// layer of an .att image and the annotation that carries the signature.
const (
	SimpleSigningType = "application/vnd.dev.cosign.simplesigning.v1+json"
	DSSEType          = "application/vnd.dsse.envelope.v1+json"
	SigAnnotation     = "dev.cosignproject.cosign/signature"
)

// Helm's OCI media types (helm push).
const (
	HelmConfigType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
)

// Layout is an OCI image layout unpacked from an image tarball
// (tools/ociimage): its image index and the referrers (SBOMs) beside it.
type Layout struct {
	Index     v1.ImageIndex
	Referrers []v1.Image
	dir       string
}

// Close removes the unpacked layout.
func (l *Layout) Close() error { return os.RemoveAll(l.dir) }

// OpenImageTar unpacks an image tarball that make image wrote.
func OpenImageTar(path string) (*Layout, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir, err := os.MkdirTemp("", "gofit-release-layout-*")
	if err != nil {
		return nil, err
	}
	l := &Layout{dir: dir}
	if err := archive.Unpack(f, dir); err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, d := range m.Manifests {
		switch {
		case d.Annotations["io.containerd.image.name"] != "":
			if l.Index != nil {
				l.Close()
				return nil, fmt.Errorf("%s: more than one named image index", path)
			}
			if l.Index, err = root.ImageIndex(d.Digest); err != nil {
				l.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		case d.MediaType == types.OCIManifestSchema1:
			img, err := root.Image(d.Digest)
			if err != nil {
				l.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			l.Referrers = append(l.Referrers, img)
		}
	}
	if l.Index == nil {
		l.Close()
		return nil, fmt.Errorf("%s: no image index named by io.containerd.image.name", path)
	}
	return l, nil
}

// Platforms maps each linux/ARCH of the index to its image manifest digest.
func Platforms(idx v1.ImageIndex) (map[string]v1.Hash, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Hash{}
	for _, d := range m.Manifests {
		if d.Platform != nil {
			out[d.Platform.OS+"/"+d.Platform.Architecture] = d.Digest
		}
	}
	return out, nil
}

// Chart is a packaged chart as an OCI artifact, as helm push makes it.
type Chart struct {
	Name, Version string
	manifest      []byte
	config, tgz   []byte
}

// NewChart reads a chart package (.tgz) and builds its artifact: the
// config is Chart.yaml as JSON, the one layer the package itself.
func NewChart(tgz []byte) (*Chart, error) {
	meta, err := chartYAML(tgz)
	if err != nil {
		return nil, err
	}
	var md struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	cfg, err := yaml.YAMLToJSON(meta)
	if err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if err := json.Unmarshal(cfg, &md); err != nil || md.Name == "" || md.Version == "" {
		return nil, fmt.Errorf("Chart.yaml: want name and version (%v)", err)
	}
	desc := func(mt types.MediaType, b []byte) v1.Descriptor {
		h, n, _ := v1.SHA256(bytes.NewReader(b))
		return v1.Descriptor{MediaType: mt, Digest: h, Size: n}
	}
	layer := desc(HelmChartType, tgz)
	layer.Annotations = map[string]string{"org.opencontainers.image.title": md.Name + "-" + md.Version + ".tgz"}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: desc(HelmConfigType, cfg), Layers: []v1.Descriptor{layer},
		Annotations: map[string]string{"org.opencontainers.image.title": md.Name, "org.opencontainers.image.version": md.Version}}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &Chart{Name: md.Name, Version: md.Version, manifest: raw, config: cfg, tgz: tgz}, nil
}

// chartYAML finds NAME/Chart.yaml in a chart package.
func chartYAML(tgz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("chart package: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, errors.New("chart package: no Chart.yaml")
		}
		if err != nil {
			return nil, fmt.Errorf("chart package: %w", err)
		}
		if parts := strings.Split(h.Name, "/"); len(parts) == 2 && parts[1] == "Chart.yaml" {
			return io.ReadAll(io.LimitReader(tr, 1<<20))
		}
	}
}

// Digest is the artifact manifest's digest.
func (c *Chart) Digest() v1.Hash {
	h, _, _ := v1.SHA256(bytes.NewReader(c.manifest))
	return h
}

// RawManifest makes a Chart a remote.Taggable.
func (c *Chart) RawManifest() ([]byte, error) { return c.manifest, nil }

// MediaType is the Content-Type the manifest is pushed with: remote.Put
// says Docker's v2 schema without it, and helm (oras) then finds no OCI
// manifest to pull.
func (c *Chart) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// Push writes the chart's blobs and manifest to repo:VERSION and returns
// its digest reference.
func (c *Chart) Push(repo name.Repository, opts ...remote.Option) (name.Digest, error) {
	for _, b := range []struct {
		mt   types.MediaType
		data []byte
	}{{HelmConfigType, c.config}, {HelmChartType, c.tgz}} {
		if err := remote.WriteLayer(repo, static.NewLayer(b.data, b.mt), opts...); err != nil {
			return name.Digest{}, fmt.Errorf("push chart to %s: %w", repo, err)
		}
	}
	if err := remote.Put(repo.Tag(c.Version), c, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("push chart to %s: %w", repo, err)
	}
	return repo.Digest(c.Digest().String()), nil
}

// PullChart fetches the chart package of the artifact at ref (by digest).
func PullChart(ref name.Reference, opts ...remote.Option) ([]byte, error) {
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, err
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if m.Config.MediaType != HelmConfigType || len(m.Layers) != 1 || m.Layers[0].MediaType != HelmChartType {
		return nil, fmt.Errorf("%s: not a helm chart artifact", ref)
	}
	l, err := remote.Layer(ref.Context().Digest(m.Layers[0].Digest.String()), opts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	if h, _, _ := v1.SHA256(bytes.NewReader(b)); h != m.Layers[0].Digest {
		return nil, fmt.Errorf("%w: %s: chart layer digest %s, want %s", ErrVerify, ref, h, m.Layers[0].Digest)
	}
	return b, nil
}

// PushImage writes the index (and its images) to tag, and each referrer
// (the SBOM artifacts) by digest, and returns the index's digest reference.
func PushImage(l *Layout, tag name.Tag, opts ...remote.Option) (name.Digest, error) {
	if err := remote.WriteIndex(tag, l.Index, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("push %s: %w", tag, err)
	}
	for _, r := range l.Referrers {
		d, err := r.Digest()
		if err != nil {
			return name.Digest{}, err
		}
		if err := remote.Write(tag.Context().Digest(d.String()), r, opts...); err != nil {
			return name.Digest{}, fmt.Errorf("push referrer %s: %w", d, err)
		}
	}
	d, err := l.Index.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return tag.Context().Digest(d.String()), nil
}

// cosignTag is where cosign keeps a digest's signatures or attestations.
func cosignTag(d name.Digest, suffix string) (name.Tag, error) {
	h, err := v1.NewHash(d.DigestStr())
	if err != nil {
		return name.Tag{}, err
	}
	return d.Context().Tag(h.Algorithm + "-" + h.Hex + "." + suffix), nil
}

// signatureImage is the image cosign stores signatures and attestations in.
func signatureImage(layers ...mutate.Addendum) (v1.Image, error) {
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(base, layers...)
}

// SignImage signs the manifest at d as cosign sign --key does: a simple
// signing payload naming d's repository and digest, its signature in the
// layer's annotation, at d's .sig tag (replacing what was there).
func SignImage(s signature.Signer, d name.Digest, opts ...remote.Option) error {
	p, err := payload.Cosign{Image: d}.MarshalJSON()
	if err != nil {
		return err
	}
	sig, err := SignBlob(s, p)
	if err != nil {
		return err
	}
	img, err := signatureImage(mutate.Addendum{Layer: static.NewLayer(p, SimpleSigningType),
		Annotations: map[string]string{SigAnnotation: string(sig)}})
	if err != nil {
		return err
	}
	t, err := cosignTag(d, "sig")
	if err != nil {
		return err
	}
	if err := remote.Write(t, img, opts...); err != nil {
		return fmt.Errorf("push signature %s: %w", t, err)
	}
	return nil
}

// Attachment is one signed attestation for an image's .att tag.
type Attachment struct {
	PredicateType string
	Envelope      []byte // a DSSE envelope (Attest)
}

// AttachAttestations writes the envelopes as d's .att image, as cosign
// attest --key does (one DSSE layer each, predicateType annotated).
func AttachAttestations(d name.Digest, atts []Attachment, opts ...remote.Option) error {
	var layers []mutate.Addendum
	for _, a := range atts {
		layers = append(layers, mutate.Addendum{Layer: static.NewLayer(a.Envelope, DSSEType),
			Annotations: map[string]string{SigAnnotation: "", "predicateType": a.PredicateType}})
	}
	img, err := signatureImage(layers...)
	if err != nil {
		return err
	}
	t, err := cosignTag(d, "att")
	if err != nil {
		return err
	}
	if err := remote.Write(t, img, opts...); err != nil {
		return fmt.Errorf("push attestations %s: %w", t, err)
	}
	return nil
}

// VerifyImage checks that some signature at ref's .sig tag verifies with
// v and names ref's digest (resolving a tag first) and repository; it
// returns the digest verified. Errors wrap ErrVerify.
func VerifyImage(v signature.Verifier, ref name.Reference, opts ...remote.Option) (name.Digest, error) {
	d, err := resolve(ref, opts...)
	if err != nil {
		return name.Digest{}, err
	}
	layers, err := cosignLayers(d, "sig", SimpleSigningType, opts...)
	if err != nil {
		return name.Digest{}, err
	}
	var errs []error
	for _, l := range layers {
		if err := VerifyBlob(v, l.data, []byte(l.annotations[SigAnnotation])); err != nil {
			errs = append(errs, err)
			continue
		}
		var p payload.SimpleContainerImage
		if err := json.Unmarshal(l.data, &p); err != nil {
			errs = append(errs, err)
			continue
		}
		if p.Critical.Image.DockerManifestDigest != d.DigestStr() {
			errs = append(errs, fmt.Errorf("signed digest %s, not %s", p.Critical.Image.DockerManifestDigest, d.DigestStr()))
			continue
		}
		if p.Critical.Identity.DockerReference != d.Context().Name() {
			errs = append(errs, fmt.Errorf("signed for %s, not %s", p.Critical.Identity.DockerReference, d.Context().Name()))
			continue
		}
		return d, nil
	}
	return name.Digest{}, fmt.Errorf("%w: %s: no valid signature: %v", ErrVerify, d, errors.Join(errs...))
}

// VerifyImageAttestations returns the statements of predicateType at
// ref's .att tag that verify with v and name ref's digest as a subject.
// Errors (none found) wrap ErrVerify.
func VerifyImageAttestations(v signature.Verifier, ref name.Reference, predicateType string, opts ...remote.Option) ([]Statement, error) {
	d, err := resolve(ref, opts...)
	if err != nil {
		return nil, err
	}
	layers, err := cosignLayers(d, "att", DSSEType, opts...)
	if err != nil {
		return nil, err
	}
	h, err := v1.NewHash(d.DigestStr())
	if err != nil {
		return nil, err
	}
	var out []Statement
	var errs []error
	for _, l := range layers {
		if l.annotations["predicateType"] != predicateType {
			continue
		}
		st, err := VerifyAttestation(v, l.data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.PredicateType != predicateType || !st.Has(h.Hex) {
			errs = append(errs, fmt.Errorf("statement of %s about other subjects", st.PredicateType))
			continue
		}
		out = append(out, st)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s: no valid %s attestation: %v", ErrVerify, d, predicateType, errors.Join(errs...))
	}
	return out, nil
}

func resolve(ref name.Reference, opts ...remote.Option) (name.Digest, error) {
	if d, ok := ref.(name.Digest); ok {
		return d, nil
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		return name.Digest{}, err
	}
	return ref.Context().Digest(desc.Digest.String()), nil
}

type cosignLayer struct {
	data        []byte
	annotations map[string]string
}

func cosignLayers(d name.Digest, suffix string, mt types.MediaType, opts ...remote.Option) ([]cosignLayer, error) {
	t, err := cosignTag(d, suffix)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(t, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrVerify, t, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrVerify, t, err)
	}
	var out []cosignLayer
	for _, ld := range m.Layers {
		if ld.MediaType != mt {
			continue
		}
		l, err := img.LayerByDigest(ld.Digest)
		if err != nil {
			return nil, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
		rc.Close()
		if err != nil {
			return nil, err
		}
		// The registry served what the manifest names, or nothing.
		if h, _, _ := v1.SHA256(bytes.NewReader(b)); h != ld.Digest {
			return nil, fmt.Errorf("%w: %s: layer %s has digest %s", ErrVerify, t, ld.Digest, h)
		}
		out = append(out, cosignLayer{data: b, annotations: ld.Annotations})
	}
	return out, nil
}

package release

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"
)

// The files a release directory (dist/) holds besides its artifacts.
const (
	SumsFile       = "sha256sums"
	SumsSigFile    = "sha256sums.sig"
	ProvenanceFile = "provenance.intoto.jsonl"
	PublicKeyFile  = "cosign.pub"
	ImageFile      = "gofit-image.tar"
)

// sbomEnvelopeFile is the SBOM attestation of linux/ARCH's image.
func sbomEnvelopeFile(arch string) string { return "sbom-linux-" + arch + ".intoto.jsonl" }

// Release names a release directory and where its image and chart live.
type Release struct {
	Dir       string
	ImageRepo name.Repository // e.g. ghcr.io/gofit-dev/gofit
	ChartRepo name.Repository // e.g. ghcr.io/gofit-dev/charts/gofit
}

// Signed is what Sign made: the digests and the envelopes to attach.
type Signed struct {
	Index      name.Digest
	Platforms  map[string]name.Digest // linux/ARCH
	Chart      name.Digest
	Provenance []byte            // DSSE envelope
	SBOMs      map[string][]byte // linux/ARCH: DSSE envelope
}

// Sums parses a sha256sums file: file name to hex digest.
func Sums(b []byte) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		sum, file, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 || file == "" || strings.ContainsAny(file, "/\\") {
			return nil, fmt.Errorf("%s line %d: want HEX  FILE", SumsFile, n)
		}
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", SumsFile, n, err)
		}
		out[strings.TrimPrefix(file, "*")] = sum
	}
	return out, sc.Err()
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// artifacts reads the release's image and chart: the index, its
// platforms and the chart artifact's digest, all computed locally.
func (r Release) artifacts() (*Layout, *Chart, error) {
	l, err := OpenImageTar(filepath.Join(r.Dir, ImageFile))
	if err != nil {
		return nil, nil, err
	}
	matches, err := filepath.Glob(filepath.Join(r.Dir, "gofit-[0-9]*.tgz"))
	if err != nil || len(matches) != 1 {
		l.Close()
		return nil, nil, fmt.Errorf("%s: want one chart package gofit-X.Y.Z.tgz, found %d", r.Dir, len(matches))
	}
	tgz, err := os.ReadFile(matches[0])
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	c, err := NewChart(tgz)
	if err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("%s: %w", matches[0], err)
	}
	return l, c, nil
}

// digests reads the release's image and chart for their digests, computed
// locally: a Signed that names the index, the chart and each platform's
// image (Provenance and SBOMs still empty), and their hashes.
func (r Release) digests() (*Signed, v1.Hash, v1.Hash, map[string]v1.Hash, error) {
	var none v1.Hash
	l, c, err := r.artifacts()
	if err != nil {
		return nil, none, none, nil, err
	}
	defer l.Close()
	idx, err := l.Index.Digest()
	if err != nil {
		return nil, none, none, nil, err
	}
	plats, err := Platforms(l.Index)
	if err != nil {
		return nil, none, none, nil, err
	}
	chart := c.Digest()
	out := &Signed{Index: r.ImageRepo.Digest(idx.String()), Platforms: map[string]name.Digest{},
		Chart: r.ChartRepo.Digest(chart.String()), SBOMs: map[string][]byte{}}
	for p, h := range plats {
		out.Platforms[p] = r.ImageRepo.Digest(h.String())
	}
	return out, idx, chart, plats, nil
}

// Sign signs the release directory: sha256sums.sig over sha256sums, the
// SLSA provenance of every file listed there, the image index, its
// platform images and the chart artifact (provenance.intoto.jsonl), and
// each platform's SBOM attestation (sbom-linux-ARCH.intoto.jsonl); it
// writes the public key as cosign.pub.
func Sign(s signature.Signer, r Release, b Build) (*Signed, error) {
	sumsRaw, err := os.ReadFile(filepath.Join(r.Dir, SumsFile))
	if err != nil {
		return nil, err
	}
	sums, err := Sums(sumsRaw)
	if err != nil {
		return nil, err
	}
	for f, want := range sums {
		got, err := fileSHA256(filepath.Join(r.Dir, f))
		if err != nil {
			return nil, err
		}
		if got != want {
			return nil, fmt.Errorf("%s: sha256 %s, %s says %s", f, got, SumsFile, want)
		}
	}
	out, idx, chart, plats, err := r.digests()
	if err != nil {
		return nil, err
	}
	subjects := []Subject{{Name: r.ImageRepo.Name(), SHA256: idx.Hex}, {Name: r.ChartRepo.Name(), SHA256: chart.Hex}}
	for f, sum := range sums {
		subjects = append(subjects, Subject{Name: f, SHA256: sum})
	}
	for p, h := range plats {
		subjects = append(subjects, Subject{Name: r.ImageRepo.Name() + " " + p, SHA256: h.Hex})
		arch := strings.TrimPrefix(p, "linux/")
		sbom, err := os.ReadFile(filepath.Join(r.Dir, "sbom-linux-"+arch+".cdx.json"))
		if err != nil {
			return nil, fmt.Errorf("the SBOM of %s: %w", p, err)
		}
		st, err := SBOMStatement(Subject{Name: r.ImageRepo.Name(), SHA256: h.Hex}, sbom)
		if err != nil {
			return nil, fmt.Errorf("sbom-linux-%s.cdx.json: %w", arch, err)
		}
		if out.SBOMs[p], err = Attest(s, st); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(r.Dir, sbomEnvelopeFile(arch)), append(out.SBOMs[p], '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	prov, err := ProvenanceStatement(subjects, b)
	if err != nil {
		return nil, err
	}
	if out.Provenance, err = Attest(s, prov); err != nil {
		return nil, err
	}
	sig, err := SignBlob(s, sumsRaw)
	if err != nil {
		return nil, err
	}
	pub, err := PublicKeyPEM(s)
	if err != nil {
		return nil, err
	}
	for f, data := range map[string][]byte{ProvenanceFile: append(out.Provenance, '\n'), SumsSigFile: append(sig, '\n'), PublicKeyFile: pub} {
		if err := os.WriteFile(filepath.Join(r.Dir, f), data, 0o644); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Publish pushes the signed release: the image index (with its SBOM
// referrers) to IMAGE_REPO:tag, the chart to CHART_REPO:VERSION, a
// signature on both, the provenance on both and each platform's SBOM
// attestation on its image.
func Publish(s signature.Signer, r Release, signed *Signed, tag string, opts ...remote.Option) error {
	l, c, err := r.artifacts()
	if err != nil {
		return err
	}
	defer l.Close()
	idx, err := PushImage(l, r.ImageRepo.Tag(tag), opts...)
	if err != nil {
		return err
	}
	if idx != signed.Index {
		return fmt.Errorf("pushed index %s, signed %s", idx, signed.Index)
	}
	ch, err := c.Push(r.ChartRepo, opts...)
	if err != nil {
		return err
	}
	if ch != signed.Chart {
		return fmt.Errorf("pushed chart %s, signed %s", ch, signed.Chart)
	}
	prov := []Attachment{{PredicateType: ProvenanceType, Envelope: signed.Provenance}}
	for _, d := range []name.Digest{idx, ch} {
		if err := SignImage(s, d, opts...); err != nil {
			return err
		}
		if err := AttachAttestations(d, prov, opts...); err != nil {
			return err
		}
	}
	for p, env := range signed.SBOMs {
		if err := AttachAttestations(signed.Platforms[p], []Attachment{{PredicateType: CycloneDXType, Envelope: env}}, opts...); err != nil {
			return err
		}
	}
	// Each platform's image is signed too: a policy engine checks the
	// digest a pod spec names, which may be a platform's rather than the
	// index's.
	for _, d := range signed.Platforms {
		if err := SignImage(s, d, opts...); err != nil {
			return err
		}
	}
	return nil
}

// VerifyDir checks a release directory offline: sha256sums.sig, every
// file's digest, the provenance (its signature and that it names every
// file, the image index and the chart) and each platform's SBOM
// attestation. Errors wrap ErrVerify, or name the missing file.
func VerifyDir(v signature.Verifier, r Release) (*Signed, error) {
	read := func(f string) ([]byte, error) { return os.ReadFile(filepath.Join(r.Dir, f)) }
	sumsRaw, err := read(SumsFile)
	if err != nil {
		return nil, err
	}
	sig, err := read(SumsSigFile)
	if err != nil {
		return nil, err
	}
	if err := VerifyBlob(v, sumsRaw, sig); err != nil {
		return nil, fmt.Errorf("%s: %w", SumsFile, err)
	}
	sums, err := Sums(sumsRaw)
	if err != nil {
		return nil, err
	}
	var errs []error
	names := make([]string, 0, len(sums))
	for f := range sums {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		got, err := fileSHA256(filepath.Join(r.Dir, f))
		if err != nil {
			errs = append(errs, err)
		} else if got != sums[f] {
			errs = append(errs, fmt.Errorf("%w: %s: sha256 %s, %s says %s", ErrVerify, f, got, SumsFile, sums[f]))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	envProv, err := read(ProvenanceFile)
	if err != nil {
		return nil, err
	}
	prov, err := VerifyAttestation(v, bytes.TrimSpace(envProv))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ProvenanceFile, err)
	}
	if prov.PredicateType != ProvenanceType {
		return nil, fmt.Errorf("%w: %s: predicate %s", ErrVerify, ProvenanceFile, prov.PredicateType)
	}
	for _, f := range names {
		if !prov.Has(sums[f]) {
			return nil, fmt.Errorf("%w: %s does not name %s", ErrVerify, ProvenanceFile, f)
		}
	}
	out, idx, chart, plats, err := r.digests()
	if err != nil {
		return nil, err
	}
	out.Provenance = bytes.TrimSpace(envProv)
	for what, hex := range map[string]string{"the image index": idx.Hex, "the chart artifact": chart.Hex} {
		if !prov.Has(hex) {
			return nil, fmt.Errorf("%w: %s does not name %s", ErrVerify, ProvenanceFile, what)
		}
	}
	for p, h := range plats {
		f := sbomEnvelopeFile(strings.TrimPrefix(p, "linux/"))
		env, err := read(f)
		if err != nil {
			return nil, err
		}
		st, err := VerifyAttestation(v, bytes.TrimSpace(env))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if st.PredicateType != CycloneDXType || !st.Has(h.Hex) || !prov.Has(h.Hex) {
			return nil, fmt.Errorf("%w: %s: not a CycloneDX SBOM of %s", ErrVerify, f, out.Platforms[p])
		}
		out.SBOMs[p] = bytes.TrimSpace(env)
	}
	return out, nil
}

// VerifyPublished checks what Publish pushed against the release
// directory (VerifyDir first): the signatures and attestations on the
// index, its platforms and the chart, that the tag and chart version
// resolve to the signed digests, and that the chart pulled back by digest
// is the package in the directory.
func VerifyPublished(v signature.Verifier, r Release, tag string, opts ...remote.Option) error {
	signed, err := VerifyDir(v, r)
	if err != nil {
		return err
	}
	idx, err := VerifyImage(v, r.ImageRepo.Tag(tag), opts...)
	if err != nil {
		return err
	}
	if idx != signed.Index {
		return fmt.Errorf("%w: %s is %s, the release's index is %s", ErrVerify, r.ImageRepo.Tag(tag), idx.DigestStr(), signed.Index.DigestStr())
	}
	if _, err := VerifyImageAttestations(v, idx, ProvenanceType, opts...); err != nil {
		return err
	}
	for p, d := range signed.Platforms {
		if got, err := VerifyImage(v, d, opts...); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		} else if got != d {
			return fmt.Errorf("%w: %s resolves to %s", ErrVerify, d, got)
		}
		if _, err := VerifyImageAttestations(v, d, CycloneDXType, opts...); err != nil {
			return err
		}
	}
	l, c, err := r.artifacts()
	if err != nil {
		return err
	}
	l.Close()
	ch, err := VerifyImage(v, r.ChartRepo.Tag(c.Version), opts...)
	if err != nil {
		return err
	}
	if ch != signed.Chart {
		return fmt.Errorf("%w: %s is %s, the release's chart is %s", ErrVerify, r.ChartRepo.Tag(c.Version), ch.DigestStr(), signed.Chart.DigestStr())
	}
	if _, err := VerifyImageAttestations(v, ch, ProvenanceType, opts...); err != nil {
		return err
	}
	tgz, err := PullChart(ch, opts...)
	if err != nil {
		return err
	}
	if !bytes.Equal(tgz, c.tgz) {
		return fmt.Errorf("%w: the chart at %s differs from the release's package", ErrVerify, ch)
	}
	return nil
}

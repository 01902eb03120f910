package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/gofit-dev/gofit/tools/ociimage"
)

var epoch = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// smallRelease writes what tools/release.sh puts in dist/, small: two
// "binaries", a two-platform image tarball with SBOMs, the SBOMs beside
// it, a chart package and sha256sums.
func smallRelease(t *testing.T, dir string) {
	t.Helper()
	files := map[string][]byte{
		"gofit-linux-amd64": []byte("\x7fELF amd64"),
		"gofit-linux-arm64": []byte("\x7fELF arm64"),
	}
	img := ociimage.Image{Ref: "ghcr.io/gofit-dev/gofit:v9.8.7", User: ociimage.NonRoot, Entrypoint: []string{"/gofit"},
		Files: ociimage.Base(nil), Created: epoch, Annotations: map[string]string{"org.opencontainers.image.version": "v9.8.7"}}
	for _, arch := range []string{"amd64", "arm64"} {
		sbom := []byte(fmt.Sprintf(`{"bomFormat":"CycloneDX","specVersion":"1.6","version":1,"metadata":{"component":{"type":"application","name":"gofit-%s"}}}`, arch))
		files["sbom-linux-"+arch+".cdx.json"] = sbom
		img.Platforms = append(img.Platforms, ociimage.Platform{Arch: arch, SBOM: sbom,
			Files: []ociimage.File{{Path: "/gofit", Mode: 0o755, Data: files["gofit-linux-"+arch]}}})
	}
	var tarball bytes.Buffer
	if _, err := ociimage.Write(&tarball, img); err != nil {
		t.Fatal(err)
	}
	files[ImageFile] = tarball.Bytes()
	files["gofit-9.8.7.tgz"] = chartPackage(t, "gofit", "9.8.7", "image:\n  digest: \"\"\n")
	var sums []string
	for f, b := range files {
		h := sha256.Sum256(b)
		sums = append(sums, hex.EncodeToString(h[:])+"  "+f)
		write(t, filepath.Join(dir, f), b)
	}
	sort.Strings(sums)
	write(t, filepath.Join(dir, SumsFile), []byte(strings.Join(sums, "\n")+"\n"))
}

func chartPackage(t *testing.T, name, version, values string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range [][2]string{
		{name + "/Chart.yaml", "apiVersion: v2\nname: " + name + "\nversion: " + version + "\nappVersion: v" + version + "\n"},
		{name + "/values.yaml", values},
	} {
		p, b := f[0], f[1]
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(b)), ModTime: epoch}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(b))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func keys(t *testing.T) (signature.SignerVerifier, signature.Verifier) {
	t.Helper()
	priv, pub, err := GenerateKey([]byte("test-password"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(priv, []byte("ENCRYPTED SIGSTORE PRIVATE KEY")) {
		t.Fatalf("private key is not in cosign's encrypted format:\n%s", priv)
	}
	if _, err := LoadSigner(priv, []byte("wrong")); err == nil {
		t.Fatal("LoadSigner took the wrong password")
	}
	s, err := LoadSigner(priv, []byte("test-password"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func build() Build {
	return Build{Version: "v9.8.7", Commit: strings.Repeat("ab", 20), Source: "https://github.com/gofit-dev/gofit",
		Epoch: epoch, Toolchain: "go1.26.8"}
}

// TestSignVerifyDir signs a small release and verifies it offline, then
// shows that each kind of tampering fails the verification: an artifact
// changed, sha256sums changed to match it, the signature of another key,
// a provenance whose statement was edited, an SBOM envelope swapped.
func TestSignVerifyDir(t *testing.T) {
	s, v := keys(t)
	dir := t.TempDir()
	smallRelease(t, dir)
	r := Release{Dir: dir, ImageRepo: name.MustParseReference("ghcr.io/gofit-dev/gofit").Context(),
		ChartRepo: name.MustParseReference("ghcr.io/gofit-dev/charts/gofit").Context()}
	signed, err := Sign(s, r, build())
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyDir(v, r)
	if err != nil {
		t.Fatalf("VerifyDir of the signed release: %v", err)
	}
	if got.Index != signed.Index || got.Chart != signed.Chart || len(got.Platforms) != 2 {
		t.Fatalf("VerifyDir: %+v, Sign: %+v", got, signed)
	}
	// The provenance speaks for every file, the index, both platforms and the chart.
	prov, err := VerifyAttestation(v, signed.Provenance)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(prov.Subjects); n != 6+1+2+1 {
		t.Errorf("provenance has %d subjects, want 10 (6 files, the index, 2 platforms, the chart): %+v", n, prov.Subjects)
	}
	var pred struct {
		BuildDefinition struct {
			BuildType            string
			ResolvedDependencies []struct {
				URI    string
				Digest map[string]string
			}
		}
	}
	if err := json.Unmarshal(prov.Predicate, &pred); err != nil {
		t.Fatal(err)
	}
	if pred.BuildDefinition.BuildType != BuildType || pred.BuildDefinition.ResolvedDependencies[0].Digest["gitCommit"] != build().Commit {
		t.Errorf("provenance predicate: %s", prov.Predicate)
	}

	tamper := []struct {
		name string
		do   func(t *testing.T, dir string)
	}{
		{"an artifact changed", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "gofit-linux-amd64"), []byte("\x7fELF evil"))
		}},
		{"sha256sums changed to match", func(t *testing.T, dir string) {
			evil := []byte("\x7fELF evil")
			write(t, filepath.Join(dir, "gofit-linux-amd64"), evil)
			sums, _ := os.ReadFile(filepath.Join(dir, SumsFile))
			h := sha256.Sum256(evil)
			lines := strings.Split(string(sums), "\n")
			for i, l := range lines {
				if strings.HasSuffix(l, "  gofit-linux-amd64") {
					lines[i] = hex.EncodeToString(h[:]) + "  gofit-linux-amd64"
				}
			}
			write(t, filepath.Join(dir, SumsFile), []byte(strings.Join(lines, "\n")))
		}},
		{"signed by another key", func(t *testing.T, dir string) {
			other, _ := keys(t)
			if _, err := Sign(other, Release{Dir: dir, ImageRepo: r.ImageRepo, ChartRepo: r.ChartRepo}, build()); err != nil {
				t.Fatal(err)
			}
		}},
		{"provenance statement edited", func(t *testing.T, dir string) {
			env, _ := os.ReadFile(filepath.Join(dir, ProvenanceFile))
			var e struct {
				PayloadType string            `json:"payloadType"`
				Payload     string            `json:"payload"`
				Signatures  []json.RawMessage `json:"signatures"`
			}
			if err := json.Unmarshal(env, &e); err != nil {
				t.Fatal(err)
			}
			p, _ := base64.StdEncoding.DecodeString(e.Payload)
			p = bytes.Replace(p, []byte(build().Commit), []byte(strings.Repeat("cd", 20)), 1)
			e.Payload = base64.StdEncoding.EncodeToString(p)
			b, _ := json.Marshal(e)
			write(t, filepath.Join(dir, ProvenanceFile), b)
		}},
		{"SBOM attestations swapped", func(t *testing.T, dir string) {
			a, _ := os.ReadFile(filepath.Join(dir, sbomEnvelopeFile("amd64")))
			write(t, filepath.Join(dir, sbomEnvelopeFile("arm64")), a)
		}},
	}
	for _, tc := range tamper {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, r.Dir, dir)
			r := r
			r.Dir = dir
			if _, err := VerifyDir(v, r); err != nil {
				t.Fatalf("the copy does not verify before tampering: %v", err)
			}
			tc.do(t, dir)
			_, err := VerifyDir(v, r)
			if !errors.Is(err, ErrVerify) {
				t.Fatalf("VerifyDir after %s: %v, want ErrVerify", tc.name, err)
			}
			t.Log(err)
		})
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(to, e.Name()), b)
	}
}

// TestPublishVerify publishes a signed small release to a registry served
// by go-containerregistry's registry package, pulls the image index and
// the chart back by digest, verifies the signatures and attestations
// there, and shows that moving the tag to another image, a signature from
// another key or a chart replaced under its version fail verification.
func TestPublishVerify(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	s, v := keys(t)
	dir := t.TempDir()
	smallRelease(t, dir)
	imageRepo, err := name.NewRepository(host + "/gofit-dev/gofit")
	if err != nil {
		t.Fatal(err)
	}
	chartRepo, err := name.NewRepository(host + "/gofit-dev/charts/gofit")
	if err != nil {
		t.Fatal(err)
	}
	r := Release{Dir: dir, ImageRepo: imageRepo, ChartRepo: chartRepo}
	signed, err := Sign(s, r, build())
	if err != nil {
		t.Fatal(err)
	}
	if err := Publish(s, r, signed, "v9.8.7"); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPublished(v, r, "v9.8.7"); err != nil {
		t.Fatalf("VerifyPublished: %v", err)
	}

	// Pulled back by digest: the index is the tarball's, each platform
	// image is there, and the chart is the package.
	idx, err := remote.Index(signed.Index)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := idx.Digest(); d.String() != signed.Index.DigestStr() {
		t.Fatalf("pulled index %s, want %s", d, signed.Index.DigestStr())
	}
	for p, d := range signed.Platforms {
		img, err := remote.Image(d)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if _, err := img.Layers(); err != nil {
			t.Fatal(err)
		}
	}
	tgz, err := PullChart(signed.Chart)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := os.ReadFile(filepath.Join(dir, "gofit-9.8.7.tgz"))
	if !bytes.Equal(tgz, local) {
		t.Fatal("the chart pulled by digest is not the release's package")
	}
	if h := os.Getenv("GOFIT_HELM"); h != "" {
		// helm itself pulls the artifact as a chart.
		out := t.TempDir()
		cmd := exec.Command(h, "pull", "oci://"+r.ChartRepo.Name(), "--version", "9.8.7", "--plain-http", "-d", out)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm pull: %v\n%s", err, b)
		}
		got, _ := os.ReadFile(filepath.Join(out, "gofit-9.8.7.tgz"))
		if !bytes.Equal(got, local) {
			t.Fatal("helm pull got another package")
		}
	}

	// Tampering in the registry.
	other, otherV := keys(t)
	t.Run("tag moved to another image", func(t *testing.T) {
		l, err := OpenImageTar(filepath.Join(dir, ImageFile))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		// Another index: one platform of ours under the tag, signed by no one.
		plats, _ := Platforms(l.Index)
		one, err := remote.Image(r.ImageRepo.Digest(plats["linux/amd64"].String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r.ImageRepo.Tag("v9.8.7"), one); err != nil {
			t.Fatal(err)
		}
		defer remote.WriteIndex(r.ImageRepo.Tag("v9.8.7"), l.Index)
		if err := VerifyPublished(v, r, "v9.8.7"); !errors.Is(err, ErrVerify) {
			t.Fatalf("VerifyPublished with the tag moved: %v, want ErrVerify", err)
		}
	})
	t.Run("signature from another key", func(t *testing.T) {
		if err := SignImage(other, signed.Index); err != nil {
			t.Fatal(err)
		}
		defer SignImage(s, signed.Index)
		if _, err := VerifyImage(v, signed.Index); !errors.Is(err, ErrVerify) {
			t.Fatalf("VerifyImage of another key's signature: %v, want ErrVerify", err)
		}
		if _, err := VerifyImage(otherV, signed.Index); err != nil {
			t.Fatalf("the other key's own signature: %v", err)
		}
	})
	t.Run("a platform's signature from another key", func(t *testing.T) {
		// Each platform's image is signed as well as the index, for
		// policy engines that check a platform's digest.
		for p, d := range signed.Platforms {
			if _, err := VerifyImage(v, d); err != nil {
				t.Fatalf("%s %s not signed: %v", p, d, err)
			}
		}
		d := signed.Platforms["linux/arm64"]
		if err := SignImage(other, d); err != nil {
			t.Fatal(err)
		}
		defer SignImage(s, d)
		if err := VerifyPublished(v, r, "v9.8.7"); !errors.Is(err, ErrVerify) {
			t.Fatalf("VerifyPublished with arm64 signed by another key: %v, want ErrVerify", err)
		}
	})
	t.Run("a signature for another digest", func(t *testing.T) {
		// Our valid signature of the chart, copied to the index's .sig tag.
		chartSig, _ := cosignTag(signed.Chart, "sig")
		idxSig, _ := cosignTag(signed.Index, "sig")
		img, err := remote.Image(chartSig)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(idxSig, img); err != nil {
			t.Fatal(err)
		}
		defer SignImage(s, signed.Index)
		if _, err := VerifyImage(v, signed.Index); !errors.Is(err, ErrVerify) {
			t.Fatalf("VerifyImage with the chart's signature: %v, want ErrVerify", err)
		}
	})
	t.Run("chart replaced under its version", func(t *testing.T) {
		evil, err := NewChart(chartPackage(t, "gofit", "9.8.7", "image:\n  repository: evil.example/gofit\n"))
		if err != nil {
			t.Fatal(err)
		}
		ch, err := evil.Push(r.ChartRepo)
		if err != nil {
			t.Fatal(err)
		}
		// Even signed by the attacker's key, it is not the release's chart.
		if err := SignImage(other, ch); err != nil {
			t.Fatal(err)
		}
		err = VerifyPublished(v, r, "v9.8.7")
		if !errors.Is(err, ErrVerify) {
			t.Fatalf("VerifyPublished with the chart replaced: %v, want ErrVerify", err)
		}
		t.Log(err)
	})
}

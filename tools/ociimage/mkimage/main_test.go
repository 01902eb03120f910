package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/gofit-dev/gofit/tools/ociimage"
)

// TestPinnedCABundle: by default the image's CA bundle is
// ociimage.CABundle (a Go module go.sum pins), not the build host's
// /etc/ssl/certs/ca-certificates.crt, so two hosts build the same image:
// the default's tarball is byte for byte the one -cacerts makes from the
// pinned bundle written to a file, and another bundle (the host's, where
// it differs) makes another image.
func TestPinnedCABundle(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1764000000")
	dir := t.TempDir()
	app := filepath.Join(dir, "app")
	if err := os.WriteFile(app, []byte("#!app"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := func(name string, extra ...string) []byte {
		t.Helper()
		out := filepath.Join(dir, name+".tar")
		args := append([]string{"-o", out, "-ref", "example/gofit:v1", "-arch", "amd64"}, extra...)
		if err := run(append(args, "/app="+app)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pinnedFile := filepath.Join(dir, "pinned.crt")
	if err := os.WriteFile(pinnedFile, ociimage.CABundle(), 0o644); err != nil {
		t.Fatal(err)
	}
	def := build("default")
	if !bytes.Equal(def, build("file", "-cacerts", pinnedFile)) {
		t.Error("the default image's CA bundle is not ociimage.CABundle")
	}
	if bytes.Equal(def, build("none", "-cacerts", "")) {
		t.Error("the default image has no CA bundle")
	}
	const host = "/etc/ssl/certs/ca-certificates.crt"
	if h, err := os.ReadFile(host); err == nil && !bytes.Equal(h, ociimage.CABundle()) {
		if bytes.Equal(def, build("host", "-cacerts", host)) {
			t.Error("the default image is the one built with the host's bundle")
		}
	}
}

// TestCABundleRoots: the pinned bundle is Mozilla's roots, as PEM
// certificates of CAs, the same on every call.
func TestCABundleRoots(t *testing.T) {
	b := ociimage.CABundle()
	if !bytes.Equal(b, ociimage.CABundle()) {
		t.Fatal("CABundle differs between calls")
	}
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("certificate %d: %v", n, err)
		}
		if !c.IsCA {
			t.Errorf("%s is not a CA", c.Subject)
		}
		n++
	}
	if n < 100 {
		t.Errorf("%d roots, want Mozilla's (well over 100)", n)
	}
	t.Logf("%d roots, %d bytes", n, len(b))
}

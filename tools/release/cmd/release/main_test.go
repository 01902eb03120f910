package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/tools/release"
)

// TestSignRefusesKeyNotAnchor: make release signs only with the private
// half of the repository's cosign.pub (-anchor), so no release goes out
// under a key users do not verify against; the check comes before
// anything is signed.
func TestSignRefusesKeyNotAnchor(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(release.PasswordEnv, "pw")
	for _, p := range []string{"a", "b"} {
		if err := run([]string{"keygen", "-o", filepath.Join(dir, p)}); err != nil {
			t.Fatal(err)
		}
	}
	dist := filepath.Join(dir, "dist")
	args := func(anchor string) []string {
		return []string{"sign", "-key", filepath.Join(dir, "a.key"), "-anchor", anchor, "-dist", dist, "-version", "v1.2.3", "-commit", strings.Repeat("ab", 20)}
	}
	err := run(args(filepath.Join(dir, "b.pub")))
	if !errors.Is(err, release.ErrNotAnchor) || !strings.Contains(err.Error(), "-anchor") {
		t.Fatalf("sign with a key that is not the anchor: %v, want ErrNotAnchor naming -anchor", err)
	}
	if _, err := os.Stat(dist); !os.IsNotExist(err) {
		t.Errorf("dist touched: %v", err)
	}
	// Its own public key passes the check (and sign then wants a release).
	err = run(args(filepath.Join(dir, "a.pub")))
	if err == nil || errors.Is(err, release.ErrNotAnchor) {
		t.Fatalf("sign with the anchor's key and no release: %v, want an error about the release", err)
	}
	if err := run([]string{"fingerprint", filepath.Join(dir, "a.pub")}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"fingerprint", filepath.Join(dir, "a.key")}); err == nil || !strings.Contains(err.Error(), "a.key") {
		t.Errorf("fingerprint of a private key: %v, want an error naming the file", err)
	}
}

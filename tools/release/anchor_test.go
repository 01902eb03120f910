package release

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// anchorURL is where docs/install.md fetches the project's key from: the
// repository's cosign.pub on main, which repoKey is.
const (
	anchorURL = "https://raw.githubusercontent.com/gofit-dev/gofit/main/cosign.pub"
	repoKey   = "../../cosign.pub"
)

// TestRepositoryKey: the project's public key is at the repository's root,
// an ECDSA P-256 key as cosign makes, and the README and docs/install.md
// print its fingerprint, so a key swapped without them fails here.
func TestRepositoryKey(t *testing.T) {
	pem, err := os.ReadFile(repoKey)
	if err != nil {
		t.Fatalf("the project's public key: %v", err)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pem)
	if err != nil {
		t.Fatalf("%s: %v", repoKey, err)
	}
	if k, ok := pub.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Fatalf("%s: %T, want an ECDSA P-256 key (cosign's)", repoKey, pub)
	}
	if bytes.Contains(pem, []byte("PRIVATE")) {
		t.Fatalf("%s holds a private key", repoKey)
	}
	fp, err := Fingerprint(pem)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"../../README.md", "../../docs/install.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(fp)) {
			t.Errorf("%s does not print the key's fingerprint %s", doc, fp)
		}
	}
	t.Logf("the project's key: %s", fp)
}

// TestFingerprint: Fingerprint is what openssl prints for the key's DER
// form (docs/install.md's command), and refuses what is not a key.
func TestFingerprint(t *testing.T) {
	_, pub, err := GenerateKey([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	fp, err := Fingerprint(pub)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := cryptoutils.UnmarshalPEMToPublicKey(pub)
	der, _ := cryptoutils.MarshalPublicKeyToDER(k)
	h := sha256.Sum256(der)
	if want := "sha256:" + hex.EncodeToString(h[:]); fp != want {
		t.Errorf("Fingerprint %s, want %s", fp, want)
	}
	if _, err := Fingerprint([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")); err == nil {
		t.Error("Fingerprint took a broken key")
	}
	s, _ := keys(t)
	if err := CheckAnchor(s, pub); !errors.Is(err, ErrNotAnchor) {
		t.Errorf("CheckAnchor with another key's public key: %v, want ErrNotAnchor", err)
	}
	own, _ := PublicKeyPEM(s)
	if err := CheckAnchor(s, own); err != nil {
		t.Errorf("CheckAnchor with its own public key: %v", err)
	}
}

// verifyBlock returns the commands of docs/install.md's offline
// verification: the first sh block under "### Verifying a release",
// comments dropped.
func verifyBlock(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "### Verifying a release")
	if i < 0 {
		t.Fatal("docs/install.md has no section Verifying a release")
	}
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	if start < 0 {
		t.Fatal("docs/install.md: no sh block under Verifying a release")
	}
	s = s[start+len("```sh\n"):]
	s = s[:strings.Index(s, "```")]
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if j := strings.Index(l, "  #"); j >= 0 {
			l = l[:j]
		}
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// docRunner runs docs/install.md's verification commands in a release's
// directory, each as written: sha256sum, openssl and gofit's release
// command for real (the command built once), cosign verify-blob by
// sigstore's Go module, as cosign itself checks a blob against a key
// (the real CLI runs them in tools/release/cosign-cli.sh), and curl by
// copying anchor, the key the URL serves, after checking the URL.
type docRunner struct {
	releaseBin string
	anchor     []byte
}

func (d docRunner) run(t *testing.T, dir, line string) error {
	t.Helper()
	line = strings.NewReplacer(`"$PWD`, `"`+dir, `"$GOFIT"`, `"`+filepath.Join("..", "..")+`"`).Replace(line)
	args := strings.Fields(strings.ReplaceAll(line, `"`, ""))
	switch {
	case args[0] == "curl":
		if !slices.Contains(args, anchorURL) {
			return fmt.Errorf("curl does not fetch %s", anchorURL)
		}
		for i, a := range args {
			if strings.HasPrefix(a, "-") && strings.HasSuffix(a, "o") && i+1 < len(args) {
				return os.WriteFile(filepath.Join(dir, args[i+1]), d.anchor, 0o644)
			}
		}
		return errors.New("curl: no -o FILE")
	case args[0] == "openssl" && strings.Contains(line, "| sha256sum"):
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("%s: %w", line, err)
		}
		want, err := Fingerprint(d.anchor)
		if err != nil {
			return err
		}
		if got := "sha256:" + strings.Fields(string(out))[0]; got != want {
			return fmt.Errorf("the key's fingerprint is %s, not the project's %s", got, want)
		}
		return nil
	case args[0] == "cosign" && args[1] == "verify-blob":
		var key, sig string
		for i := 2; i < len(args)-1; i++ {
			switch args[i] {
			case "--key":
				key = args[i+1]
			case "--signature":
				sig = args[i+1]
			}
		}
		v, err := LoadVerifierFile(filepath.Join(dir, key))
		if err != nil {
			return err
		}
		sb, err := os.ReadFile(filepath.Join(dir, sig))
		if err != nil {
			return err
		}
		data, err := os.ReadFile(filepath.Join(dir, args[len(args)-1]))
		if err != nil {
			return err
		}
		return VerifyBlob(v, data, bytes.TrimSpace(sb))
	case args[0] == "sha256sum":
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", line, err, out)
		}
		return nil
	case args[0] == "go" && slices.Contains(args, "./tools/release/cmd/release"):
		i := slices.Index(args, "./tools/release/cmd/release")
		cmd := exec.Command(d.releaseBin, args[i+1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("release %s: %w\n%s", strings.Join(args[i+1:], " "), err, out)
		}
		return nil
	}
	t.Fatalf("docs/install.md: the test does not know how to run %q", line)
	return nil
}

// TestDocumentedVerification runs docs/install.md's verification block,
// as written, on a release signed with the project's key (a throwaway
// pair stands in for it: the maintainer's private key is not in the
// repository), then on that release with a binary changed, sha256sums
// rewritten and everything re-signed with another key whose cosign.pub
// replaces the release's: what someone who could change the release
// would ship. The documented commands fail on it, because they take the
// key from the repository; taking it from the release, as they once did,
// passes the forgery.
func TestDocumentedVerification(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("skipping: no openssl for the documented fingerprint command")
	}
	lines := verifyBlock(t)
	project, _ := keys(t)
	attacker, _ := keys(t)
	anchor, err := PublicKeyPEM(project)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "release")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/release").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/release: %v\n%s", err, out)
	}
	d := docRunner{releaseBin: bin, anchor: anchor}

	dir := t.TempDir()
	smallRelease(t, dir)
	r := Release{Dir: dir, ImageRepo: name.MustParseReference("ghcr.io/gofit-dev/gofit").Context(),
		ChartRepo: name.MustParseReference("ghcr.io/gofit-dev/charts/gofit").Context()}
	if _, err := Sign(project, r, build()); err != nil {
		t.Fatal(err)
	}
	forged := t.TempDir()
	copyDir(t, dir, forged)

	for _, l := range lines {
		if err := d.run(t, dir, l); err != nil {
			t.Fatalf("the genuine release fails %q: %v", l, err)
		}
	}

	// The forgery: a changed binary, sums to match, all re-signed.
	evil := []byte("\x7fELF evil")
	write(t, filepath.Join(forged, "gofit-linux-amd64"), evil)
	sums, _ := os.ReadFile(filepath.Join(forged, SumsFile))
	h := sha256.Sum256(evil)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		if strings.HasSuffix(l, "  gofit-linux-amd64") {
			l = hex.EncodeToString(h[:]) + "  gofit-linux-amd64"
		}
		out = append(out, l)
	}
	write(t, filepath.Join(forged, SumsFile), []byte(strings.Join(out, "\n")+"\n"))
	fr := r
	fr.Dir = forged
	if _, err := Sign(attacker, fr, build()); err != nil {
		t.Fatal(err)
	}

	blob, rel := false, false
	for _, l := range lines {
		err := d.run(t, forged, l)
		if err != nil {
			t.Logf("the forgery fails %q: %v", l, firstLine(err))
		}
		switch {
		case strings.HasPrefix(l, "cosign verify-blob"):
			blob = err != nil
		case strings.Contains(l, "cmd/release verify"):
			rel = err != nil
		}
	}
	if !blob || !rel {
		t.Errorf("on the forgery, cosign verify-blob failed: %v, release verify failed: %v; want both to fail", blob, rel)
	}

	// The hole the repository's key closes: the same commands with the
	// key the release carries (the curl and fingerprint lines dropped)
	// pass the forgery.
	for _, l := range lines {
		if f := strings.Fields(l)[0]; f == "curl" || f == "openssl" {
			continue
		}
		if err := d.run(t, forged, strings.ReplaceAll(l, "gofit.pub", PublicKeyFile)); err != nil {
			t.Errorf("with the release's own key, %q should pass the forgery (the test's forgery is not one): %v", l, err)
		}
	}
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

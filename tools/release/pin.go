package release

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// digestRE is an image digest as image.digest and kustomize take it.
var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// PinValues sets the chart's image.repository and image.digest in a
// values.yaml, editing those two lines of the top-level image: block and
// nothing else (its comments stay).
func PinValues(values []byte, repo, digest string) ([]byte, error) {
	if !digestRE.MatchString(digest) {
		return nil, fmt.Errorf("digest %q: want sha256:<64 hex>", digest)
	}
	lines := strings.Split(string(values), "\n")
	in, setRepo, setDigest := false, false, false
	for i, l := range lines {
		switch {
		case l == "image:":
			in = true
		case in && l != "" && !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "#"):
			in = false
		case in && strings.HasPrefix(l, "  repository:"):
			lines[i], setRepo = "  repository: "+repo, true
		case in && strings.HasPrefix(l, "  digest:"):
			lines[i], setDigest = "  digest: \""+digest+"\"", true
		}
	}
	if !setRepo || !setDigest {
		return nil, fmt.Errorf("values.yaml: no image.repository or image.digest line to pin")
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// PinKustomization points every images: entry that has a newTag at
// repo:tag@digest (newName, newTag, digest), keeping the rest of the file.
// It reports whether the file had such an entry.
func PinKustomization(k []byte, repo, tag, digest string) ([]byte, bool, error) {
	if !digestRE.MatchString(digest) {
		return nil, false, fmt.Errorf("digest %q: want sha256:<64 hex>", digest)
	}
	var out []string
	pinned := false
	for _, l := range strings.Split(string(k), "\n") {
		trimmed := strings.TrimLeft(l, " ")
		indent := l[:len(l)-len(trimmed)]
		switch {
		case strings.HasPrefix(trimmed, "newName:"):
			out = append(out, indent+"newName: "+repo)
		case strings.HasPrefix(trimmed, "newTag:"):
			out = append(out, indent+"newTag: "+tag, indent+"digest: "+digest)
			pinned = true
		case strings.HasPrefix(trimmed, "digest:") && pinned:
			// an earlier pin: the line after newTag replaces it
		default:
			out = append(out, l)
		}
	}
	return []byte(strings.Join(out, "\n")), pinned, nil
}

// SourceImage is the image repository deploy/'s manifests name in full
// where kustomize's images: cannot reach them (deploy/rollouts: an
// AnalysisTemplate's Job inside a CRD).
const SourceImage = "ghcr.io/gofit-dev/gofit"

// imageLineRE matches a YAML line "image: REPO[:TAG][@DIGEST]" for one of
// repos.
func imageLineRE(repos ...string) *regexp.Regexp {
	for i, r := range repos {
		repos[i] = regexp.QuoteMeta(r)
	}
	return regexp.MustCompile(`^(\s*(?:-\s+)?image:\s*)"?(?:` + strings.Join(repos, "|") + `)(?::[\w][\w.-]*)?(?:@sha256:[0-9a-f]{64})?"?\s*$`)
}

// PinImageRefs points every "image: SourceImage[:TAG]" line (or one an
// earlier pin wrote for repo) at repo:tag@digest, keeping the rest of the
// file. It reports whether it changed a line.
func PinImageRefs(b []byte, repo, tag, digest string) ([]byte, bool, error) {
	if !digestRE.MatchString(digest) {
		return nil, false, fmt.Errorf("digest %q: want sha256:<64 hex>", digest)
	}
	imageLineRE := imageLineRE(SourceImage, repo)
	lines := strings.Split(string(b), "\n")
	pinned := false
	for i, l := range lines {
		if m := imageLineRE.FindStringSubmatch(l); m != nil {
			lines[i], pinned = m[1]+repo+":"+tag+"@"+digest, true
		}
	}
	return []byte(strings.Join(lines, "\n")), pinned, nil
}

// PinDeploy pins every kustomization.yaml under dir (PinKustomization)
// and every other YAML file's full image references (PinImageRefs), and
// fails if nothing had an image to pin.
func PinDeploy(dir, repo, tag, digest string) error {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(d.Name(), ".yaml") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		pin := PinImageRefs
		if d.Name() == "kustomization.yaml" {
			pin = PinKustomization
		}
		out, pinned, err := pin(b, repo, tag, digest)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if !pinned || bytes.Equal(out, b) {
			return nil
		}
		n++
		return os.WriteFile(p, out, 0o644)
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: no kustomization.yaml with an image newTag, nor an image: %s line, to pin", dir, SourceImage)
	}
	return nil
}

// PinChart pins dir/values.yaml (PinValues).
func PinChart(dir, repo, digest string) error {
	p := filepath.Join(dir, "values.yaml")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	out, err := PinValues(b, repo, digest)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return os.WriteFile(p, out, 0o644)
}

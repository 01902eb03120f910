// Command mkimage writes a multi-platform container image tarball (an OCI
// image layout holding an image index, plus docker save's manifest.json;
// see package ociimage) from files on disk, without Docker:
//
//	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct) go run ./tools/ociimage/mkimage \
//	    -o bin/gofit-image.tar -ref ghcr.io/gofit-dev/gofit:v0.3.0 -arch amd64,arm64 \
//	    -version v0.3.0 -revision $(git rev-parse HEAD) -entrypoint /gofit '/gofit=bin/linux-{arch}/gofit'
//
// Each argument is IMAGE_PATH=HOST_FILE, {arch} in HOST_FILE standing for
// each -arch in turn; every image also gets /etc/passwd, /etc/group (root
// and nonroot 65532), /tmp and a CA bundle (ociimage.CABundle: Mozilla's
// roots from a Go module pinned by go.sum, not the build host's, so two
// hosts build the same digest; -cacerts FILE for another). The entrypoint's
// executable gets an SBOM (CycloneDX) per platform from its Go build info.
// It prints the index digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/tools/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	out := fs.String("o", "", "output tarball (required)")
	ref := fs.String("ref", "", "image reference name:tag (required)")
	archs := fs.String("arch", runtime.GOARCH, "comma-separated GOARCH list: one linux image each in the index")
	dockerArch := fs.String("docker-arch", "", "the platform docker load gets (default: this machine's if built, else the first)")
	entry := fs.String("entrypoint", "", "entrypoint, words separated by spaces")
	user := fs.String("user", ociimage.NonRoot, `user:group the image runs as by default ("0:0" for root)`)
	ca := fs.String("cacerts", "pinned", `CA bundle to put at /etc/ssl/certs/ca-certificates.crt: "pinned" (Mozilla's roots, ociimage.CABundle), a file, or "" for none`)
	source := fs.String("source", "", "org.opencontainers.image.source annotation (the repository URL)")
	revision := fs.String("revision", "", "org.opencontainers.image.revision annotation (the commit)")
	version := fs.String("version", "", "org.opencontainers.image.version annotation")
	sbomDir := fs.String("sbom-dir", "", "also write each platform's SBOM to `DIR`/sbom-linux-ARCH.cdx.json")
	var env multi
	fs.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *ref == "" {
		return fmt.Errorf("-o and -ref are required")
	}
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil || sec < 0 {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970 (git log -1 --format=%%ct)", s)
		}
		created = time.Unix(sec, 0).UTC()
	}
	var caData []byte
	switch *ca {
	case "":
	case "pinned":
		caData = ociimage.CABundle()
	default:
		b, err := os.ReadFile(*ca)
		if err != nil {
			return fmt.Errorf("-cacerts: %w (-cacerts pinned for the pinned bundle, or '' for an image without)", err)
		}
		caData = b
	}
	anns := map[string]string{"org.opencontainers.image.created": created.Format(time.RFC3339)}
	for k, v := range map[string]string{"source": *source, "revision": *revision, "version": *version} {
		if v != "" {
			anns["org.opencontainers.image."+k] = v
		}
	}
	img := ociimage.Image{Ref: *ref, Files: ociimage.Base(caData), User: *user, Env: env, Annotations: anns,
		Created: created, DockerArch: *dockerArch}
	if *entry != "" {
		img.Entrypoint = strings.Fields(*entry)
	}
	list := strings.Split(*archs, ",")
	if img.DockerArch == "" && slices.Contains(list, runtime.GOARCH) {
		img.DockerArch = runtime.GOARCH
	}
	for _, arch := range list {
		p := ociimage.Platform{Arch: arch}
		for _, a := range fs.Args() {
			dst, src, ok := strings.Cut(a, "=")
			if !ok || dst == "" || src == "" {
				return fmt.Errorf("argument %q: want IMAGE_PATH=HOST_FILE", a)
			}
			src = strings.ReplaceAll(src, "{arch}", arch)
			st, err := os.Stat(src)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			p.Files = append(p.Files, ociimage.File{Path: dst, Mode: st.Mode().Perm(), Data: b})
			if len(img.Entrypoint) > 0 && dst == img.Entrypoint[0] {
				if p.SBOM, err = ociimage.SBOMVersion(b, created, *version); err != nil {
					return fmt.Errorf("%s: %w", src, err)
				}
				if *sbomDir != "" {
					if err := os.WriteFile(filepath.Join(*sbomDir, "sbom-linux-"+arch+".cdx.json"), p.SBOM, 0o644); err != nil {
						return fmt.Errorf("-sbom-dir: %w", err)
					}
				}
			}
		}
		img.Platforms = append(img.Platforms, p)
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	// Write then rename: a half-written tarball never has the final name.
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	digest, err := ociimage.Write(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Println(digest)
	return nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

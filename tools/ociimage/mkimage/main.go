// Command mkimage writes a container image tarball (OCI layout plus
// docker-save's manifest.json; see package ociimage) from files on disk,
// without Docker:
//
//	go run ./tools/ociimage/mkimage -o bin/gofit-image.tar \
//	    -ref ghcr.io/gofit-dev/gofit:dev -entrypoint /gofit /gofit=bin/gofit-linux-amd64
//
// Each argument is IMAGE_PATH=HOST_FILE; the image also gets /etc/passwd,
// /etc/group (root and nonroot 65532), /tmp and the host's CA bundle.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	entry := fs.String("entrypoint", "", "entrypoint, words separated by spaces")
	user := fs.String("user", ociimage.NonRoot, `user:group the image runs as by default ("0:0" for root)`)
	ca := fs.String("cacerts", "/etc/ssl/certs/ca-certificates.crt", `CA bundle to put at /etc/ssl/certs/ca-certificates.crt ("" for none)`)
	var env multi
	fs.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *ref == "" {
		return fmt.Errorf("-o and -ref are required")
	}
	var caData []byte
	if *ca != "" {
		b, err := os.ReadFile(*ca)
		if err != nil {
			return fmt.Errorf("-cacerts: %w (install ca-certificates, or -cacerts '' for an image without)", err)
		}
		caData = b
	}
	img := ociimage.Image{Ref: *ref, Files: ociimage.Base(caData), User: *user, Env: env}
	if *entry != "" {
		img.Entrypoint = strings.Fields(*entry)
	}
	for _, a := range fs.Args() {
		dst, src, ok := strings.Cut(a, "=")
		if !ok || dst == "" || src == "" {
			return fmt.Errorf("argument %q: want IMAGE_PATH=HOST_FILE", a)
		}
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		img.Files = append(img.Files, ociimage.File{Path: dst, Mode: st.Mode().Perm(), Data: b})
	}
	var buf bytes.Buffer
	if err := ociimage.Write(&buf, img); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	// Write then rename: a half-written tarball never has the final name.
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *out)
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

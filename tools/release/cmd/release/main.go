// Command release signs, publishes and verifies a gofit release directory
// (tools/release.sh runs it; package release has the formats):
//
//	release keygen -o cosign                  # cosign.key (encrypted with $COSIGN_PASSWORD), cosign.pub
//	release digest dist/gofit-image.tar       # the image index digest, sha256:...
//	release pin -image REPO -tag vX.Y.Z -digest sha256:... -chart-dir DIR -deploy-dir DIR
//	release sign -key cosign.key -dist dist -image REPO -chart CHART_REPO \
//	    -version vX.Y.Z -commit SHA -source URL [-anchor cosign.pub] [-push -tag vX.Y.Z]
//	release verify -key cosign.pub -dist dist -image REPO -chart CHART_REPO [-tag vX.Y.Z]
//	release fingerprint cosign.pub             # sha256:... as the README prints it
//
// -image and -chart are repositories without a tag (registry/.../gofit);
// with -push (sign) or -tag (verify) they are a registry the command
// talks to: plain HTTP for localhost, or with -insecure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	gcrauthn "github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/gofit-dev/gofit/tools/release"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("want a subcommand: keygen, digest, pin, sign, verify, fingerprint")
	}
	switch args[0] {
	case "keygen":
		return keygen(args[1:])
	case "digest":
		return digest(args[1:])
	case "pin":
		return pin(args[1:])
	case "sign":
		return sign(args[1:])
	case "verify":
		return verify(args[1:])
	case "fingerprint":
		return fingerprint(args[1:])
	}
	return fmt.Errorf("unknown subcommand %q: want keygen, digest, pin, sign, verify, fingerprint", args[0])
}

func keygen(args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	out := fs.String("o", "cosign", "write `PREFIX`.key and PREFIX.pub")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, ext := range []string{".key", ".pub"} {
		if _, err := os.Stat(*out + ext); err == nil {
			return fmt.Errorf("-o: %s exists: not overwriting a key", *out+ext)
		}
	}
	priv, pub, err := release.GenerateKey([]byte(os.Getenv(release.PasswordEnv)))
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out+".key", priv, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(*out+".pub", pub, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s.key (encrypted with $%s), %s.pub\n", *out, release.PasswordEnv, *out)
	return nil
}

func digest(args []string) error {
	if len(args) != 1 {
		return errors.New("digest: want one image tarball")
	}
	l, err := release.OpenImageTar(args[0])
	if err != nil {
		return err
	}
	defer l.Close()
	d, err := l.Index.Digest()
	if err != nil {
		return err
	}
	fmt.Println(d)
	return nil
}

// pin writes the image a release built into a copy of the chart
// (values.yaml) and of deploy/ (every kustomization's images:).
func pin(args []string) error {
	fs := flag.NewFlagSet("pin", flag.ContinueOnError)
	image := fs.String("image", "", "the image `REPOSITORY` (required)")
	tag := fs.String("tag", "", "the image tag, vX.Y.Z (required)")
	dg := fs.String("digest", "", "the image index digest, sha256:... (required)")
	chartDir := fs.String("chart-dir", "", "a copy of charts/gofit to pin")
	deployDir := fs.String("deploy-dir", "", "a copy of deploy/ to pin")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *image == "" || *tag == "" || *dg == "" {
		return errors.New("-image, -tag and -digest are required")
	}
	if *chartDir != "" {
		if err := release.PinChart(*chartDir, *image, *dg); err != nil {
			return fmt.Errorf("-chart-dir: %w", err)
		}
	}
	if *deployDir != "" {
		if err := release.PinDeploy(*deployDir, *image, *tag, *dg); err != nil {
			return fmt.Errorf("-deploy-dir: %w", err)
		}
	}
	return nil
}

// common are the flags sign and verify share.
type common struct {
	fs                *flag.FlagSet
	key, dist         *string
	image, chart, tag *string
	insecure          *bool
}

func newCommon(cmd, keyUsage string) common {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	return common{fs: fs,
		key:      fs.String("key", "", keyUsage),
		dist:     fs.String("dist", "dist", "the release directory"),
		image:    fs.String("image", "ghcr.io/gofit-dev/gofit", "the image `REPOSITORY` (no tag)"),
		chart:    fs.String("chart", "ghcr.io/gofit-dev/charts/gofit", "the chart's OCI `REPOSITORY` (no tag)"),
		tag:      fs.String("tag", "", "the image tag in the registry (verify: check the registry too)"),
		insecure: fs.Bool("insecure", false, "talk plain HTTP to the registry (a localhost registry always is)"),
	}
}

func (c common) release() (release.Release, error) {
	var opts []name.Option
	if *c.insecure {
		opts = append(opts, name.Insecure)
	}
	img, err := name.NewRepository(*c.image, opts...)
	if err != nil {
		return release.Release{}, fmt.Errorf("-image %q: %w", *c.image, err)
	}
	ch, err := name.NewRepository(*c.chart, opts...)
	if err != nil {
		return release.Release{}, fmt.Errorf("-chart %q: %w", *c.chart, err)
	}
	if *c.key == "" {
		return release.Release{}, errors.New("-key is required")
	}
	return release.Release{Dir: *c.dist, ImageRepo: img, ChartRepo: ch}, nil
}

func sign(args []string) error {
	c := newCommon("sign", "the private key (cosign's format; password in $COSIGN_PASSWORD)")
	version := c.fs.String("version", "", "the release, vX.Y.Z (required)")
	commit := c.fs.String("commit", "", "the source commit (required)")
	source := c.fs.String("source", "https://github.com/gofit-dev/gofit", "the source repository URL")
	push := c.fs.Bool("push", false, "publish: push the image as -image:-tag, the chart, signatures and attestations")
	started := c.fs.Int64("started", 0, "when the build started, Unix seconds (provenance)")
	anchor := c.fs.String("anchor", "", "refuse a -key whose public key is not this `FILE` (the repository's cosign.pub, which users verify against)")
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	r, err := c.release()
	if err != nil {
		return err
	}
	if *version == "" || *commit == "" {
		return errors.New("-version and -commit are required")
	}
	epoch := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil || sec < 0 {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970", s)
		}
		epoch = time.Unix(sec, 0).UTC()
	}
	s, err := release.LoadSignerFile(*c.key)
	if err != nil {
		return fmt.Errorf("-key: %w", err)
	}
	if *anchor != "" {
		a, err := os.ReadFile(*anchor)
		if err != nil {
			return fmt.Errorf("-anchor: %w", err)
		}
		if err := release.CheckAnchor(s, a); err != nil {
			return fmt.Errorf("-key %s, -anchor %s: %w (rotating the key? docs/install.md#key-rotation)", *c.key, *anchor, err)
		}
	}
	b := release.Build{Version: *version, Commit: *commit, Source: *source, Epoch: epoch,
		Finished: time.Now().UTC(), Toolchain: runtime.Version()}
	if *started > 0 {
		b.Started = time.Unix(*started, 0).UTC()
	}
	if *push {
		b.Registry = r.ImageRepo.RegistryStr()
	}
	signed, err := release.Sign(s, r, b)
	if err != nil {
		return err
	}
	fmt.Printf("signed %s: %s, %s, %s\n", r.Dir, release.SumsSigFile, release.ProvenanceFile, "sbom-linux-*.intoto.jsonl")
	if *push {
		tag := *c.tag
		if tag == "" {
			tag = *version
		}
		if err := release.Publish(s, r, signed, tag, remote.WithAuthFromKeychain(authn())); err != nil {
			return err
		}
		fmt.Printf("pushed %s (%s)\n", signed.Index, r.ImageRepo.Tag(tag))
		for p, d := range signed.Platforms {
			fmt.Printf("pushed %s (%s)\n", d, p)
		}
		fmt.Printf("pushed %s (chart)\n", signed.Chart)
	}
	return nil
}

func verify(args []string) error {
	c := newCommon("verify", "the public key (cosign.pub)")
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	r, err := c.release()
	if err != nil {
		return err
	}
	v, err := release.LoadVerifierFile(*c.key)
	if err != nil {
		return fmt.Errorf("-key: %w", err)
	}
	if pub, err := os.ReadFile(*c.key); err == nil {
		if fp, err := release.Fingerprint(pub); err == nil {
			fmt.Printf("key %s: %s\n", *c.key, fp)
		}
	}
	if *c.tag == "" {
		signed, err := release.VerifyDir(v, r)
		if err != nil {
			return err
		}
		fmt.Printf("verified %s: index %s, chart %s\n", r.Dir, signed.Index.DigestStr(), signed.Chart.DigestStr())
		return nil
	}
	if err := release.VerifyPublished(v, r, *c.tag, remote.WithAuthFromKeychain(authn())); err != nil {
		return err
	}
	fmt.Printf("verified %s and %s:%s with its chart in %s\n", r.Dir, r.ImageRepo, *c.tag, r.ChartRepo)
	return nil
}

// fingerprint prints a public key's fingerprint, the form the README
// gives the project's key in.
func fingerprint(args []string) error {
	if len(args) != 1 {
		return errors.New("fingerprint: want one public key file")
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	fp, err := release.Fingerprint(b)
	if err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	fmt.Println(fp)
	return nil
}

// authn is docker's credentials (~/.docker/config.json), as crane and
// cosign use them.
func authn() gcrauthn.Keychain { return gcrauthn.DefaultKeychain }

package ociimage

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"fmt"
	"runtime/debug"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SBOM is a CycloneDX 1.6 JSON bill of materials of the Go modules linked
// into the executable exe (its build info, as `go version -m` prints it):
// the main module as the described component, every dependency as a
// library with its package URL and go.sum hash. The same executable and
// time give the same bytes (the serial number comes from the file's
// digest).
func SBOM(exe []byte, created time.Time) ([]byte, error) {
	return SBOMVersion(exe, created, "")
}

// SBOMVersion is SBOM with the described component's version, which a
// release's SBOM should name (make release passes VERSION); see
// mainVersion for when the build info's own version wins.
func SBOMVersion(exe []byte, created time.Time, version string) ([]byte, error) {
	bi, err := buildinfo.Read(bytes.NewReader(exe))
	if err != nil {
		return nil, fmt.Errorf("read Go build info: %w", err)
	}
	sum := sha256.Sum256(exe)
	bom := cdx.NewBOM()
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	m := bi.Main
	props := []cdx.Property{{Name: "go.version", Value: bi.GoVersion}}
	if v := mainVersion(bi, version); v != m.Version {
		if m.Version != "" && m.Version != "(devel)" {
			props = append(props, cdx.Property{Name: "go.main.version", Value: m.Version})
		}
		m.Version = v
	}
	main := component(m, cdx.ComponentTypeApplication)
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS", "GOARCH", "CGO_ENABLED", "-trimpath", "-tags", "vcs.revision", "vcs.time":
			props = append(props, cdx.Property{Name: "go.build." + s.Key, Value: s.Value})
		}
	}
	main.Properties = &props
	main.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: fmt.Sprintf("%x", sum)}}
	bom.Metadata = &cdx.Metadata{Timestamp: created.UTC().Format(time.RFC3339), Component: &main}
	comps := []cdx.Component{}
	deps := []string{}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		c := component(*d, cdx.ComponentTypeLibrary)
		comps = append(comps, c)
		deps = append(deps, c.BOMRef)
	}
	bom.Components = &comps
	bom.Dependencies = &[]cdx.Dependency{{Ref: main.BOMRef, Dependencies: &deps}}
	var out bytes.Buffer
	enc := cdx.NewBOMEncoder(&out, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// component is a Go module as CycloneDX describes it: its package URL
// (pkg:golang/PATH@VERSION) is its reference; go.sum's h1: hash, a
// SHA-256 over the module's files, is kept as a property (CycloneDX has
// no algorithm for it).
func component(m debug.Module, typ cdx.ComponentType) cdx.Component {
	v := m.Version
	purl := "pkg:golang/" + m.Path
	if v != "" && v != "(devel)" {
		purl += "@" + v
	}
	c := cdx.Component{BOMRef: purl, Type: typ, Name: m.Path, Version: v, PackageURL: purl}
	if m.Sum != "" {
		c.Properties = &[]cdx.Property{{Name: "go.sum", Value: m.Sum}}
	}
	return c
}

// mainVersion is the version an SBOM names for the executable's main
// module, given the version the caller names (release, or ""):
//   - built in a workspace or without a module version, the build info
//     says "(devel)" or nothing: the caller's version;
//   - built in a VCS checkout, Go 1.24 and later stamp a version of their
//     own from it (a pseudo-version such as v0.0.0-20261129072925-79423932bb31,
//     "+dirty" for a modified tree), which also names no release when the
//     module sits in a subdirectory whose tags it does not match: the
//     caller's version (the stamped one is kept as go.main.version);
//   - built from a module at a version (go install PATH@VERSION, no VCS
//     stamp): that version, which is what was built.
func mainVersion(bi *debug.BuildInfo, version string) string {
	v := bi.Main.Version
	if version == "" {
		return v
	}
	if v == "" || v == "(devel)" {
		return version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return version
		}
	}
	return v
}

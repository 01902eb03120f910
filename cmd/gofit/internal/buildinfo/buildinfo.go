// Package buildinfo says which gofit this is: the version stamped at build
// time (make release passes -ldflags -X), else what the Go toolchain wrote
// into the binary (the module version of `go install ...@vX`, the VCS
// revision of a build in a checkout), and the modules linked in.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Stamped at build time:
//
//	-ldflags '-X github.com/gofit-dev/gofit/cmd/gofit/internal/buildinfo.version=v0.3.0
//	          -X github.com/gofit-dev/gofit/cmd/gofit/internal/buildinfo.commit=0123abc'
var version, commit string

// Module is one Go module linked into the binary.
type Module struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Sum     string `json:"sum,omitempty"`
	// Replace is the module path or directory the build used instead.
	Replace string `json:"replace,omitempty"`
}

// Info describes the running binary.
type Info struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	// Modified is true for a build from a checkout with uncommitted changes.
	Modified  bool     `json:"modified,omitempty"`
	GoVersion string   `json:"go"`
	Platform  string   `json:"platform"`
	Modules   []Module `json:"modules,omitempty"`
}

// Read describes the running binary.
func Read() Info {
	bi, _ := debug.ReadBuildInfo()
	info := From(bi, version, commit)
	info.Platform = runtime.GOOS + "/" + runtime.GOARCH
	if info.GoVersion == "" {
		info.GoVersion = runtime.Version()
	}
	return info
}

// From is Read's pure part: bi may be nil (a binary built without module
// support); a stamped version or commit wins over bi's.
func From(bi *debug.BuildInfo, stampedVersion, stampedCommit string) Info {
	info := Info{Version: stampedVersion, Commit: stampedCommit}
	if bi == nil {
		if info.Version == "" {
			info.Version = "dev"
		}
		return info
	}
	info.GoVersion = bi.GoVersion
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if info.Commit == "" {
				info.Commit = s.Value
			}
		case "vcs.time":
			info.CommitTime = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		m := Module{Path: d.Path, Version: d.Version, Sum: d.Sum}
		if r := d.Replace; r != nil {
			m.Replace = strings.TrimSpace(r.Path + " " + r.Version)
			if m.Sum == "" {
				m.Sum = r.Sum
			}
		}
		info.Modules = append(info.Modules, m)
	}
	return info
}

// Collector is gofit_build_info: a constant 1 whose labels say which gofit
// runs, the Prometheus convention for joining a version onto other series.
func (i Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "gofit_build_info",
		Help:        "A constant 1, labelled with the running gofit's version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Commit, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}

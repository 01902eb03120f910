package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFrom(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/gofit-dev/gofit/cmd/gofit", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: "k8s.io/api", Version: "v0.36.3", Sum: "h1:abc="},
			{Path: "github.com/gofit-dev/gofit", Version: "v0.0.0", Replace: &debug.Module{Path: "../.."}},
		},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.time", Value: "2026-11-26T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}},
	}
	got := From(bi, "", "")
	if got.Version != "dev" || got.Commit != "0123abc" || !got.Modified || got.CommitTime != "2026-11-26T12:00:00Z" || got.GoVersion != "go1.26.0" {
		t.Errorf("unstamped devel build: %+v", got)
	}
	if len(got.Modules) != 2 || got.Modules[0] != (Module{Path: "k8s.io/api", Version: "v0.36.3", Sum: "h1:abc="}) || got.Modules[1].Replace != "../.." {
		t.Errorf("modules: %+v", got.Modules)
	}
	if got := From(bi, "v1.2.3", "fedcba9"); got.Version != "v1.2.3" || got.Commit != "fedcba9" {
		t.Errorf("stamped: %+v", got)
	}
	bi.Main.Version = "v0.4.0"
	if got := From(bi, "", ""); got.Version != "v0.4.0" {
		t.Errorf("go install module@v0.4.0: version %q", got.Version)
	}
	if got := From(nil, "", ""); got.Version != "dev" {
		t.Errorf("no build info: %+v", got)
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Info{Version: "v1.2.3", Commit: "abc", GoVersion: "go1.26.0"}.Collector())
	want := `# HELP gofit_build_info A constant 1, labelled with the running gofit's version, commit and Go version.
# TYPE gofit_build_info gauge
gofit_build_info{goversion="go1.26.0",revision="abc",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gofit_build_info"); err != nil {
		t.Error(err)
	}
}

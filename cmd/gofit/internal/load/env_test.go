package load

import (
	"slices"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/fit"
)

// A started service's base environment has none of this process's Go
// runtime variables, nor the marker `gofit run` leaves when the lab or the
// QoS experiment runs under it (qoslab's own copy used to keep it).
func TestCleanEnv(t *testing.T) {
	for _, k := range []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", "GOFIT", fit.MarkerVar} {
		t.Setenv(k, "1")
	}
	t.Setenv("GOFIT_TEST_KEEP", "yes")
	var kept bool
	for _, kv := range CleanEnv() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", "GOFIT", fit.MarkerVar:
			t.Errorf("cleanEnv kept %s", kv)
		case "GOFIT_TEST_KEEP":
			kept = true
		}
	}
	if !kept {
		t.Error("cleanEnv dropped an unrelated variable")
	}
}

// TestWithoutRuntimeVars: an image's or the lab's own GOMAXPROCS,
// GOMEMLIMIT, GOGC, GODEBUG and GOFIT would become every trial's
// setting; they are taken out and named, the rest kept in order.
func TestWithoutRuntimeVars(t *testing.T) {
	kept, dropped := WithoutRuntimeVars([]string{"PATH=/bin", "GOMAXPROCS=4", "GOGC=50", "HOME=/", "GODEBUG=x=1", "GOMEMLIMIT=1GiB", "GOFIT=off", "GOPATH=/go"})
	if want := []string{"PATH=/bin", "HOME=/", "GOPATH=/go"}; !slices.Equal(kept, want) {
		t.Errorf("kept %q, want %q", kept, want)
	}
	if want := []string{"GOMAXPROCS", "GOGC", "GODEBUG", "GOMEMLIMIT", "GOFIT"}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %q, want %q", dropped, want)
	}
}

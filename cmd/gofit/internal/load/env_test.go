package load

import (
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

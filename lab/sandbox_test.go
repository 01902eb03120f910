package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/fit"
)

// A SIGKILLed lab leaves its temporary directory (the sample's copy, ~11
// MB); the next lab removes it, and never one whose lab still runs.
func TestSweepTemp(t *testing.T) {
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("skipping: cannot run true: %v", err)
	}
	stale := filepath.Join(root, tempPrefix+strconv.Itoa(dead.Process.Pid)+"-123")
	live := filepath.Join(root, tempPrefix+strconv.Itoa(os.Getppid())+"-456")
	own := filepath.Join(root, tempPrefix+strconv.Itoa(os.Getpid())+"-789")
	other := filepath.Join(root, "gofit-lab-notapid")
	for _, d := range []string{stale, live, own, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removed := SweepTemp(root)
	if len(removed) != 1 || removed[0] != stale {
		t.Errorf("removed %v, want only %s", removed, stale)
	}
	for _, d := range []string{live, own, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
}

// A trial's base environment has none of the lab's own Go runtime
// variables, nor the marker `gofit run` leaves when the lab runs under it.
func TestCleanEnv(t *testing.T) {
	for _, k := range []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", "GOFIT", fit.MarkerVar} {
		t.Setenv(k, "1")
	}
	t.Setenv("GOFIT_TEST_KEEP", "yes")
	var kept bool
	for _, kv := range cleanEnv() {
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

package auto

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/cgroup/cgrouptest"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// cgroupTree is a cgroup v2 fixture with a 1-core, 256MiB limit.
func cgroupTree(t *testing.T) string {
	tr := cgrouptest.NewV2(t, "/ctr")
	tr.Write("proc/self/smaps_rollup", "Rss: 1024 kB\n")
	tr.Set("cpu.max", "100000 100000")
	tr.Set("memory.max", "268435456")
	tr.Set("memory.current", "1048576")
	tr.Set("memory.stat", "anon 1048576")
	return tr.Root
}

func TestNotActiveIsLoggedAtTheDefaultLevel(t *testing.T) {
	var log bytes.Buffer
	if f := start(context.Background(), env(), &log, gofit.WithRoot(t.TempDir())); f != nil {
		f.Stop()
		t.Fatal("active without a cgroup")
	}
	if s := log.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, `msg="gofit not active"`) || !strings.Contains(s, "no cgroup") {
		t.Errorf("log %q, want a warning saying why gofit is not active", s)
	}

	log.Reset()
	if f := start(context.Background(), env("GOFIT", "off"), &log, gofit.WithRoot(cgroupTree(t))); f != nil {
		f.Stop()
		t.Fatal("active with GOFIT=off")
	}
	if log.Len() != 0 {
		t.Errorf("GOFIT=off logged at the default level: %q", log.String())
	}
	log.Reset()
	if f := start(context.Background(), env("GOFIT", "off", "GOFIT_LOG", "info"), &log, gofit.WithRoot(cgroupTree(t))); f != nil || !strings.Contains(log.String(), "gofit not active") {
		t.Errorf("GOFIT=off with GOFIT_LOG=info: %q", log.String())
	}

	log.Reset()
	if f := start(context.Background(), env("GOFIT_LOG", "off"), &log, gofit.WithRoot(t.TempDir())); f != nil || log.Len() != 0 {
		t.Errorf("GOFIT_LOG=off still logged %q", log.String())
	}
}

func TestStartsWithSettingsFromTheEnvironment(t *testing.T) {
	procs, memlimit := runtime.GOMAXPROCS(0), debug.SetMemoryLimit(-1)
	var log bytes.Buffer
	f := start(context.Background(), env("GOFIT_MEMORY_RATIO", "NaN", "GOFIT_CPU_ROUNDING", "ceil", "GOFIT_REFRESH", "1ns"), &log, gofit.WithRoot(cgroupTree(t)))
	if f == nil {
		t.Fatalf("not active: %s", log.String())
	}
	p := f.Plan()
	f.Stop()
	if p.GOMEMLIMIT != 256<<20*9/10 || p.GOMAXPROCS != 1 {
		t.Errorf("plan GOMAXPROCS %d GOMEMLIMIT %d; want 1 and the default 90%% of 256MiB (NaN ignored)", p.GOMAXPROCS, p.GOMEMLIMIT)
	}
	for _, name := range []string{"GOFIT_MEMORY_RATIO", "GOFIT_REFRESH"} {
		if !strings.Contains(log.String(), "ignoring setting") || !strings.Contains(log.String(), name) {
			t.Errorf("no warning naming %s: %q", name, log.String())
		}
	}
	if runtime.GOMAXPROCS(0) != procs || debug.SetMemoryLimit(-1) != memlimit {
		t.Errorf("Stop did not restore GOMAXPROCS %d and the memory limit %d", procs, memlimit)
	}
}

// Importing auto registers nothing on the default mux: /debug/vars would
// disclose the command line of any service serving it.
func TestNoDefaultMuxHandlers(t *testing.T) {
	for _, path := range []string{"/debug/vars", "/debug/pprof/"} {
		rec := httptest.NewRecorder()
		http.DefaultServeMux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s on http.DefaultServeMux: %d, want 404", path, rec.Code)
		}
	}
}

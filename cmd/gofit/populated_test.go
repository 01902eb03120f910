package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

// TestLabFromPopulatedCgroup runs `gofit lab --quick` end to end from a
// non-root cgroup that also holds another process, as a systemd service
// (or a container) would start it. On cgroup v2 that parent cannot enable
// controllers for the lab's trial groups until its processes move into a
// leaf. It checks function only, with the smallest settings that still run
// every stage, so it also runs in the TCG VM (tools/vmtest), where
// timings mean nothing. It needs cgroup v2: on v1 a parent may hold
// processes and children at once, and the lab's path from a populated
// group is the plain one every other lab test takes (95 s of make test
// on a v1 host, for nothing those do not show).
func TestLabFromPopulatedCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the lab's real study in -short mode")
	}
	g := cgtest.NewGroup(t)
	cgtest.NeedV2(t, g)
	// The service's other process, which must survive the lab.
	other := g.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	out := t.TempDir()
	// One core rather than the quick study's 0.25 and few requests: under
	// TCG a request costs ~50x its real CPU time. One repeat and a short
	// budget: this test checks that every stage runs from a populated
	// cgroup, not what it finds (TestLabQuick does), and at --quick's
	// 4 minutes with adaptive repeats it was 236 s of make test on the
	// host and as much again in the v2 VM (2026-12-06).
	inner := gofitCmd("lab", "--quick", "--json", "--out", out, "--quotas", "1", "--repeats", "1", "--max-repeats", "1",
		"--budget", "100s", "--requests", "16", "--concurrency", "4", "--open-duration", "500ms", "--mem-requests", "24")
	cmd := g.Command(inner.Path, inner.Args[1:]...)
	cmd.Env = inner.Env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gofit lab --quick from %s: %v\n%s", g.Memory, err, stderr.String())
	}
	t.Logf("lab progress:\n%s", stderr.String())
	// Only the fields this test needs, so the lab's schema can grow.
	var r struct {
		Machine struct {
			CgroupVersion int `json:"cgroup_version"`
		} `json:"machine"`
		CPU []struct {
			Setting string   `json:"setting"`
			SameAs  []string `json:"same_as"`
			Mode    string   `json:"mode"`
			RPS     float64  `json:"rps"`
			Errors  int      `json:"errors"`
		} `json:"cpu"`
		Memory []struct {
			Setting string `json:"setting"`
			Trials  []struct {
				Limit   int64  `json:"limit_bytes"`
				Outcome string `json:"outcome"`
			} `json:"trials"`
		} `json:"memory"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	if r.Machine.CgroupVersion != g.Memory.Version {
		t.Errorf("results say cgroup v%d, the memory controller here is v%d", r.Machine.CgroupVersion, g.Memory.Version)
	}
	cells := map[string]bool{}
	for _, c := range r.CPU {
		// A cell measured once for settings that give the same environment
		// carries them all (gofit = gomaxprocs=1 at a sub-core quota).
		for _, name := range append([]string{c.Setting}, c.SameAs...) {
			cells[name+"/"+c.Mode] = true
		}
		if c.RPS <= 0 || c.Errors > 0 {
			t.Errorf("CPU cell %s %s: rps %v, %d errors", c.Setting, c.Mode, c.RPS, c.Errors)
		}
	}
	for _, s := range []string{result.SetProcs1, result.SetGoDefault, result.SetGofit} {
		for _, mode := range []string{"closed", "open"} {
			if !cells[s+"/"+mode] {
				t.Errorf("no %s %s-loop cell", s, mode)
			}
		}
	}
	// The memory limits took hold in the trials' own cgroups: some trials
	// survived and some, at lower limits, did not.
	outcomes := map[string]int{}
	for _, m := range r.Memory {
		for _, tr := range m.Trials {
			outcomes[tr.Outcome]++
		}
	}
	if len(r.Memory) == 0 || outcomes["ok"] == 0 || len(outcomes) < 2 {
		t.Errorf("memory studies %d, trial outcomes %v: want some ok and some failed", len(r.Memory), outcomes)
	}
	for _, f := range []string{"results.json", "report.html"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}

	// Nothing of the lab is left: only the leaf that holds the service's
	// own processes may stay (v2), and the other process still runs there.
	for _, dir := range g.Dirs() {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() && e.Name() != manage.LeafName {
				t.Errorf("left behind: %s", filepath.Join(dir, e.Name()))
			}
		}
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the service's other process did not survive the lab: %v", err)
	}
	if g.Memory.Version == 2 {
		b, err := os.ReadFile(filepath.Join(g.Memory.Dir, manage.LeafName, "cgroup.procs"))
		if err != nil || !slices.Contains(strings.Fields(string(b)), strconv.Itoa(other.Process.Pid)) {
			t.Errorf("the service's process %d is not in %s: %q, %v", other.Process.Pid, manage.LeafName, b, err)
		}
	}
}

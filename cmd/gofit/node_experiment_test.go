//go:build !nokube

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

// TestNodeExperiment runs `gofit node experiment` end to end with the
// smallest settings, from a real cgroup: it must finish, report both
// modes, and in auto write values the kernel keeps (the experiment reads
// them back and fails otherwise) and that take effect: on v2 only the auto
// trial's BE hog goes over memory.high, on either version the hog pushes
// the node to its limit. It checks function, not the outcome: one repeat
// on a shared or emulated machine (the VM's TCG) proves nothing either
// way; `make qos-v2` and the host run in the README measure.
func TestNodeExperiment(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the memory-QoS experiment in -short mode")
	}
	g := cgtest.NewGroup(t)
	if g.Memory == nil {
		t.Skip("skipping: no memory cgroup")
	}
	const mi = 1 << 20
	node, req, lim := int64(192*mi), int64(48*mi), int64(128*mi)
	inner := gofitCmd("node", "experiment", "--json", "--repeats", "1", "--duration", "3s", "--rate", "10",
		"--node-memory", fmt.Sprint(node), "--ls-request", fmt.Sprint(req), "--ls-limit", fmt.Sprint(lim), "--hog", fmt.Sprint(node))
	cmd := g.Command(inner.Path, inner.Args[1:]...)
	cmd.Env = inner.Env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gofit node experiment in %s: %v\n%s", g.Memory, err, stderr.String())
	}
	t.Logf("experiment progress:\n%s", stderr.String())
	var r struct {
		CgroupVersion int      `json:"cgroup_version"`
		Values        []string `json:"auto_values"`
		Trials        []struct {
			Mode       string            `json:"mode"`
			P99        float64           `json:"p99_ms"`
			RPS        float64           `json:"rps"`
			LSKilled   bool              `json:"ls_killed"`
			BEEvents   map[string]uint64 `json:"be_events"`
			NodeEvents map[string]uint64 `json:"node_events"`
		} `json:"trials"`
		P99Change []float64 `json:"p99_change"`
		RPSChange []float64 `json:"rps_change"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	v2 := g.Memory.Version == 2
	if r.CgroupVersion != g.Memory.Version {
		t.Errorf("results say cgroup v%d, the memory controller here is v%d", r.CgroupVersion, g.Memory.Version)
	}
	// What auto wrote, as the experiment reports it: "group/file=value (why)",
	// the node group standing in for kubepods.
	want := []string{fmt.Sprintf("ls/memory.soft_limit_in_bytes=%d ", req), "be/memory.soft_limit_in_bytes=0 "}
	if v2 {
		want = []string{fmt.Sprintf("ls/memory.low=%d ", req), fmt.Sprintf("be/memory.high=%d ", node/2),
			fmt.Sprintf("gofit-memqos-*/memory.low=%d ", req)}
	}
	for _, w := range want {
		if !slices.ContainsFunc(r.Values, func(v string) bool {
			if rest, ok := strings.CutPrefix(w, "gofit-memqos-*"); ok {
				_, vrest, _ := strings.Cut(v, "/")
				return strings.HasPrefix(v, "gofit-memqos-") && strings.HasPrefix("/"+vrest, rest)
			}
			return strings.HasPrefix(v, w)
		}) {
			t.Errorf("auto values %q: none is %q", r.Values, w)
		}
	}
	modes := map[string]int{}
	for _, tr := range r.Trials {
		modes[tr.Mode]++
		if !tr.LSKilled && (tr.RPS <= 0 || math.IsNaN(tr.P99)) {
			t.Errorf("%s trial: the LS service was not killed but answered nothing (rps %v)", tr.Mode, tr.RPS)
		}
		// The hog overcommits the node: with QoS off it runs into the
		// node's limit (v1 memory.failcnt, v2 memory.events max).
		if tr.Mode == "off" && tr.NodeEvents["max"] == 0 {
			t.Errorf("off trial: the node never hit its limit (events %v): the hog did not overcommit it", tr.NodeEvents)
		}
		if v2 {
			// memory.high takes effect: the hog goes over it only when auto set it.
			switch high := tr.BEEvents["high"]; {
			case tr.Mode == "auto" && high == 0:
				t.Errorf("auto trial: the BE hog never went over its memory.high (events %v)", tr.BEEvents)
			case tr.Mode == "off" && high != 0:
				t.Errorf("off trial: BE memory.high events %d, but QoS off leaves memory.high at max", high)
			}
		}
	}
	if len(r.Trials) != 2 || modes["off"] != 1 || modes["auto"] != 1 {
		t.Errorf("trials by mode %v, want one off and one auto", modes)
	}
	if len(r.P99Change) != 3 || len(r.RPSChange) != 3 {
		t.Errorf("changes p99 %v rps %v: want estimate, low, high", r.P99Change, r.RPSChange)
	}
	// Nothing of the experiment is left behind.
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
}

//go:build !nokube

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestNodePlan runs `gofit node plan --json` on a fixture tree and checks
// the JSON shape and a value; bad flags are usage errors naming the flag.
func TestNodePlan(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main([]string{"node", "plan", "--pods", "../../kube/agent/testdata/pods.json",
		"--config", "../../kube/agent/testdata/resource-qos.json", "--root", "../../kube/agent/testdata/v2-cgroupfs",
		"--node-memory", "4294967296", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var plan struct {
		CgroupVersion int    `json:"cgroup_version"`
		Driver        string `json:"driver"`
		Writes        []struct {
			Cgroup, File, Value, Reason string
		} `json:"writes"`
		Warnings []string `json:"warnings"`
	}
	if err := json.Unmarshal(out.Bytes(), &plan); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if plan.CgroupVersion != 2 || plan.Driver != "cgroupfs" || len(plan.Writes) == 0 {
		t.Fatalf("%+v", plan)
	}
	found := false
	for _, w := range plan.Writes {
		if w.Cgroup == "/kubepods/burstable/pod1111aaaa-0000-4000-8000-000000000001/aaa111" && w.File == "memory.high" {
			found = w.Value == "200540160" && strings.Contains(w.Reason, "GOMEMLIMIT")
		}
	}
	if !found {
		t.Errorf("no Go-aware memory.high for the LS container: %s", out.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "plan", "--node-memory", "1"}, "--pods"},
		{[]string{"node", "plan", "--pods", "x", "--node-memory", "lots"}, "--node-memory"},
		{[]string{"node", "plan", "--pods", "/nonexistent.json", "--node-memory", "1"}, "nonexistent.json"},
		{[]string{"node", "plan", "--pods", "../../kube/agent/testdata/pods.json", "--node-memory", "1", "--root", "/nonexistent"}, "--root"},
	} {
		errb.Reset()
		if code := Main(tc.args, &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want a message naming %s", tc.args, code, errb.String(), tc.want)
		}
	}
}

// The experiment's flags are checked, each named, before it needs root or
// makes a cgroup.
func TestNodeExperimentFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "experiment", "--rate", "NaN"}, "--rate NaN"},
		{[]string{"node", "experiment", "--rate", "0"}, "--rate 0"},
		{[]string{"node", "experiment", "--repeats", "0"}, "--repeats 0"},
		{[]string{"node", "experiment", "--hog", "-1"}, "--hog -1"},
		{[]string{"node", "experiment", "--duration", "0s"}, "--duration 0s"},
		{[]string{"node", "experiment", "extra"}, `unexpected argument "extra"`},
	} {
		if code, _, errOut := run(tc.args...); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("gofit %v: exit %d, stderr %q; want exit 2 naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

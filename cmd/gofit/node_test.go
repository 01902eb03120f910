//go:build !nokube

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/agent"
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

// TestNodePlanTrust reproduces, as a new user would with `gofit node plan
// --pods … --json`, three ways a pod changed what the agent writes for
// pods other than itself, or granted itself hard protection.
func TestNodePlanTrust(t *testing.T) {
	const (
		victim = "1111aaaa-0000-4000-8000-000000000001" // has a cgroup in the fixture tree
		podMin = "/kubepods/burstable/pod" + victim
	)
	pod := func(name, uid, labels, ann, req, lim, status string) string {
		return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"shop","uid":%q,"labels":{%s},"annotations":{%s}},
		"spec":{"nodeName":"node-a","containers":[{"name":"app","resources":{"requests":{"memory":%q},"limits":{"memory":%q}}}]},
		"status":{"phase":"Running","qosClass":"Burstable"%s}}`, name, uid, labels, ann, req, lim, status)
	}
	ls := `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":true,"minLimitPercent":100,"lowLimitPercent":100}},
		"lsrClass":{"memoryQOS":{"enable":false}}}}`
	for _, tc := range []struct {
		name, pods, config string
		want               string // the pod's memory.min, "" for no write
	}{{
		// A resize to 1Gi, of which the kubelet allocated 256Mi.
		name: "pending resize",
		pods: pod("resized", victim, "", "", "1Gi", "2Gi",
			`,"resize":"Pending","containerStatuses":[{"name":"app","containerID":"containerd://aaa111","allocatedResources":{"memory":"256Mi"},
			"resources":{"requests":{"memory":"256Mi"},"limits":{"memory":"2Gi"}}}]`),
		config: ls, want: "268435456",
	}, {
		// Another pod's UID in kubernetes.io/config.mirror.
		name: "forged mirror",
		pods: pod("victim", victim, "", "", "64Mi", "4Gi", "") + "," +
			pod("forger", "9999ffff-0000-4000-8000-000000000009", "", `"kubernetes.io/config.mirror":"`+victim+`"`, "2Gi", "4Gi", ""),
		config: ls, want: "67108864",
	}, {
		// The LSR class the administrator disabled, claimed by label,
		// with memory.min from the pod's own annotation.
		name:   "LSR claim",
		pods:   pod("claim", victim, `"koordinator.sh/qosClass":"LSR"`, `"koordinator.sh/memoryQOS":"{\"minLimitPercent\":100}"`, "512Mi", "1Gi", ""),
		config: ls, want: "",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			podsFile, cfgFile := filepath.Join(dir, "pods.json"), filepath.Join(dir, "qos.json")
			if err := os.WriteFile(podsFile, []byte(`{"kind":"List","items":[`+tc.pods+`]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfgFile, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := run("node", "plan", "--pods", podsFile, "--config", cfgFile,
				"--root", "../../kube/agent/testdata/v2-cgroupfs", "--node-memory", "8589934592", "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			var plan struct {
				Writes []struct{ Cgroup, File, Value string } `json:"writes"`
			}
			if err := json.Unmarshal([]byte(out), &plan); err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, w := range plan.Writes {
				if w.Cgroup == podMin && w.File == "memory.min" {
					got = w.Value
				}
			}
			if got != tc.want {
				t.Errorf("%s/memory.min = %q, want %q\n%s", podMin, got, tc.want, out)
			}
		})
	}
}

// TestNodeReset: `gofit node reset --dry-run` prints the writes in plan
// format and changes nothing; without it they are made, and a second run
// finds nothing left.
func TestNodeReset(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("../../kube/agent/testdata/v2-systemd")); err != nil {
		t.Fatal(err)
	}
	writes := func(args ...string) int {
		t.Helper()
		code, out, errOut := run(append([]string{"node", "reset", "--root", root, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var plan struct {
			Writes []struct{ Cgroup, File, Value, Reason string } `json:"writes"`
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatal(err)
		}
		for _, w := range plan.Writes {
			if w.Reason != "gofit node reset: kernel default" || (w.Value != "0" && w.Value != "max") {
				t.Errorf("write %+v", w)
			}
		}
		return len(plan.Writes)
	}
	dry := writes("--dry-run")
	if dry == 0 {
		t.Fatal("dry run planned no writes on a tree the agent has written")
	}
	if again := writes("--dry-run"); again != dry {
		t.Fatalf("dry run changed something: %d writes, then %d", dry, again)
	}
	if n := writes(); n != dry {
		t.Errorf("reset made %d writes, dry run planned %d", n, dry)
	}
	if n := writes(); n != 0 {
		t.Errorf("second reset made %d writes", n)
	}
	if code, _, errOut := run("node", "reset", "--root", "/nonexistent"); code == 0 || !strings.Contains(errOut, "--root") {
		t.Errorf("bad root: exit %d, %s", code, errOut)
	}
}

// TestNodeResetKubeletConfig: `gofit node reset` took the kubelet's
// defaults unless told otherwise, and on a TieredReservation node zeroed
// the memory.min and memory.low the kubelet owns. By default it now reads
// the kubelet's config under --root, as the agent is configured to, and
// leaves those values alone.
func TestNodeResetKubeletConfig(t *testing.T) {
	const podMin = "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5555eeee_0000_4000_8000_000000000005.slice/memory.min"
	for _, tiered := range []bool{true, false} {
		root := t.TempDir()
		if err := os.CopyFS(root, os.DirFS("../../kube/agent/testdata/v2-systemd")); err != nil {
			t.Fatal(err)
		}
		if tiered {
			cfg := filepath.Join(root, "var/lib/kubelet/config.yaml")
			if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  MemoryQoS: true\nmemoryReservationPolicy: TieredReservation\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errOut := run("node", "reset", "--root", root, "--json")
		if code != 0 {
			t.Fatalf("tiered=%v: exit %d: %s", tiered, code, errOut)
		}
		var plan struct {
			Writes  []struct{ Cgroup, File, Value string } `json:"writes"`
			Kubelet string                                 `json:"kubelet"`
		}
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatal(err)
		}
		minLow := 0
		for _, w := range plan.Writes {
			if w.File == "memory.min" || w.File == "memory.low" {
				minLow++
			}
		}
		got, err := os.ReadFile(filepath.Join(root, podMin))
		if err != nil {
			t.Fatal(err)
		}
		if tiered {
			if minLow != 0 || strings.TrimSpace(string(got)) != "104857600" || !strings.Contains(plan.Kubelet, "config.yaml") {
				t.Errorf("TieredReservation node: %d memory.min/low writes, pod memory.min now %s, kubelet %q: the kubelet's values were reset",
					minLow, got, plan.Kubelet)
			}
		} else if minLow == 0 || strings.TrimSpace(string(got)) != "0" {
			t.Errorf("no kubelet config: %d memory.min/low writes, pod memory.min now %s: want the agent's values reset", minLow, got)
		}
	}
}

// TestNodePlanBadConfig: `gofit node plan --config` refuses a ConfigMap
// the agent refuses, with the agent's error (the one /healthz shows).
func TestNodePlanBadConfig(t *testing.T) {
	for _, data := range []map[string]string{
		{"resource-qos-config": `{"clusterStrategy": {"lsClass": `},
		{"resource-qos-config": `{"clusterStrategy":{"beClass":{"memoryQOS":{"throttlingPercent":150}}}}`},
		{"memory-qos": `{"disabledNamespaces": ["kube system"]}`},
	} {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "slo-controller-config", Namespace: "koordinator-system"}, Data: data}
		_, _, want := agent.FromConfigMap(cm)
		if want == nil {
			t.Fatalf("%v: the agent takes it", data)
		}
		b, err := json.Marshal(cm)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(t.TempDir(), "cm.json")
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := run("node", "plan", "--pods", "../../kube/agent/testdata/pods.json", "--config", f,
			"--root", "../../kube/agent/testdata/v2-cgroupfs", "--node-memory", "4294967296")
		if code == 0 || !strings.Contains(errOut, "--config: "+want.Error()) {
			t.Errorf("%v: exit %d, stderr %q, want the agent's error %q", data, code, errOut, want)
		}
	}
}

package experiment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/admission"
)

func TestReportFiles(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	in := synth(rng, 30, []arm{{name: "fitted", latency: 1, cpu: 1, oomInWindow: -1}, {name: "two", latency: 1.6, cpu: 1.4, oomInWindow: 3}})
	in.Sources = map[string]string{"pods": "API server (4 live pods)", "cpu": "container_cpu_usage_seconds_total (cAdvisor)"}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := WriteFiles(filepath.Join(dir, "out"), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("files %v", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: %v %v, want a readable 0644 file", f, st.Mode(), err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "out", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The documented shape (docs/experiment.md).
	var doc struct {
		Experiment string `json:"experiment"`
		Control    string `json:"control"`
		Arms       []struct {
			Name    string                        `json:"name"`
			Pods    []string                      `json:"pods"`
			Metrics map[string]map[string]float64 `json:"metrics"`
			Harmful bool                          `json:"harmful"`
		} `json:"arms"`
		Verdicts []map[string]any `json:"verdicts"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Experiment != "gmp" || doc.Control != "fitted" || len(doc.Arms) != 2 || len(doc.Arms[1].Pods) != 2 {
		t.Errorf("results.json: %+v", doc)
	}
	for _, m := range []string{"p99_seconds", "cpu_seconds_per_request", "requests_per_second"} {
		v := doc.Arms[0].Metrics[m]
		if _, ok := v["value"]; !ok || v["low"] > v["value"] || v["high"] < v["value"] {
			t.Errorf("metric %s: %v", m, v)
		}
	}
	if !doc.Arms[1].Harmful || doc.Verdicts[0]["verdict"] != "harmful" {
		t.Errorf("harm not first: %v", doc.Verdicts[0])
	}
	for _, k := range []string{"arm", "metric", "verdict", "ratio", "low", "high"} {
		if _, ok := doc.Verdicts[1][k]; !ok {
			t.Errorf("verdict without %s: %v", k, doc.Verdicts[1])
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "out", "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2>Verdicts against fitted</h2>", `class="worse"`, "<svg", `aria-label="latency p99"`, "font-family:system-ui", "two is harmful", "container_cpu_usage_seconds_total"} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	var sum strings.Builder
	WriteSummary(&sum, r)
	for _, want := range []string{"arm two: 2 pods (two-1, two-2) HARMFUL: 54 OOM kills against 0 in fitted", "two          p99_seconds              worse"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
	if f := Failing(r, []string{"harmful"}); len(f) == 0 || f[0].Arm != "two" {
		t.Errorf("--fail-on harmful: %v", f)
	}
	if f := Failing(r, []string{"better"}); len(f) != 0 {
		t.Errorf("--fail-on better: %v", f)
	}
}

func TestWriteFilesNamesTheDirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := WriteFiles(filepath.Join(f, "sub"), &Results{})
	if err == nil || !strings.Contains(err.Error(), f) {
		t.Errorf("error %v does not name %s", err, f)
	}
}

// TestArmNodeBalance (issue 53): the report says each arm's live pods
// per node, from the API server through the analysis to the summary and
// results.json, so an arm that lines up with a node shows.
func TestArmNodeBalance(t *testing.T) {
	pod := func(name, arm, node string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{admission.LabelExperiment: "g", admission.LabelArm: arm}},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	s := specOf([]corev1.Pod{pod("p1", "a", "n1"), pod("p2", "a", "n1"), pod("p3", "b", "n2"), pod("p4", "b", "n1"), pod("p5", "b", "")}, "")
	if fmt.Sprint(s.Nodes) != "map[a:map[n1:2] b:map[n1:1 n2:1]]" {
		t.Errorf("nodes %v", s.Nodes)
	}
	rng := rand.New(rand.NewSource(53))
	in := synth(rng, 30, []arm{{name: "a", latency: 1, cpu: 1, oomInWindow: -1}, {name: "b", latency: 1, cpu: 1, oomInWindow: -1}})
	in.Nodes = s.Nodes
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteSummary(&out, r)
	if !strings.Contains(out.String(), "pods by node             n1 2\n") || !strings.Contains(out.String(), "pods by node             n1 1, n2 1\n") {
		t.Errorf("summary without the arm × node balance:\n%s", out.String())
	}
	h, err := RenderHTML(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(h), `<td>pods by node</td><td><span class="ci">n1 2 </span></td><td><span class="ci">n1 1 n2 1 </span></td>`) {
		t.Errorf("report.html without the arm × node balance")
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"nodes":{"n1":1,"n2":1}`) {
		t.Errorf("results.json without nodes: %s", b)
	}
}

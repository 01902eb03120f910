package experiment

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

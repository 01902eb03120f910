package lab

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplay keeps the pipeline honest: the records of a real run
// (testdata/replay: `gofit lab --quick` on the sample, 2 CPUs) analysed
// again give that run's results.json byte for byte. A change to the
// summary, the verdicts or the recommendation that is meant to change
// them shows here first; rewrite the fixture from a new run on purpose
// (gofit lab --quick --out DIR; gzip DIR/records.json), never by hand.
func TestReplay(t *testing.T) {
	dir := filepath.Join("testdata", "replay")
	cfg, rec, err := readRecords(filepath.Join(dir, "records.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	res := analyse(cfg, rec)
	got, err := json.MarshalIndent(&res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < min(len(g), len(w)); i++ {
			if g[i] != w[i] {
				t.Errorf("the replayed results differ from the run's at line %d:\n  run:    %s\n  replay: %s", i+1, strings.TrimSpace(w[i]), strings.TrimSpace(g[i]))
				break
			}
		}
		if len(g) != len(w) {
			t.Errorf("the replayed results have %d lines, the run's %d", len(g), len(w))
		}
	}
	if len(res.CPUSummary) == 0 || res.Recommendation.YAML == "" || len(res.Memory) == 0 {
		t.Errorf("the replay analysed nothing: %d CPU summaries, %d memory settings", len(res.CPUSummary), len(res.Memory))
	}
}

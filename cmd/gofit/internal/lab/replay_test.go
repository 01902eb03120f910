package lab

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

// TestReplay keeps the pipeline honest: the records of a real run
// (testdata/replay: `gofit lab --quick` on the sample, 2 CPUs) analysed
// again give that run's results.json byte for byte, CPU and memory: the
// floors are the searches replayed over the recorded trials, the health
// verdicts judged from the recorded pairs. A change to the summary, the
// verdicts, the floors or the recommendation that is meant to change
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
	// The memory half is judged in the replay, not copied: the same
	// records with every limited health run ten times slower judge those
	// trials unhealthy, and with the survival trials at the floor OOM
	// killed, the floors move up.
	slow, _ := readRecordsT(t, dir)
	judged := 0
	for i := range slow.Memory {
		for j := range slow.Memory[i].Health {
			for k := range slow.Memory[i].Health[j].Pairs {
				for _, b := range slow.Memory[i].Health[j].Pairs[k].LimitedBlocks {
					for n := range b.Lat {
						b.Lat[n] *= 10
					}
				}
				judged++
			}
		}
	}
	if judged == 0 {
		t.Fatal("the fixture's records hold no health pairs")
	}
	for i, m := range analyse(cfg, slow).Memory {
		for _, ht := range m.HealthyTrials {
			if ht.Outcome == result.OK && ht.Healthy {
				t.Errorf("%s: a limited run 10 times slower than its reference judged healthy: %s", m.Setting, ht.Verdict())
			}
		}
		if m.HealthyFloorBytes != nil && res.Memory[i].HealthyFloorBytes != nil && *m.HealthyFloorBytes == *res.Memory[i].HealthyFloorBytes {
			t.Errorf("%s: healthy floor %d with every limited run 10 times slower, as without", m.Setting, *m.HealthyFloorBytes)
		}
	}
	oom, _ := readRecordsT(t, dir)
	for i := range oom.Memory {
		floor := res.Memory[i].FloorBytes
		if floor == nil {
			continue
		}
		for j, tr := range oom.Memory[i].Survival {
			if tr.LimitBytes == *floor {
				oom.Memory[i].Survival[j].Outcome = result.OOMKilled
			}
		}
	}
	for i, m := range analyse(cfg, oom).Memory {
		if was := res.Memory[i].FloorBytes; was != nil && m.FloorBytes != nil && *m.FloorBytes <= *was {
			t.Errorf("%s: survival floor %d with every trial at the floor (%d) OOM killed", m.Setting, *m.FloorBytes, *was)
		}
	}
}

func readRecordsT(t *testing.T, dir string) (Records, Config) {
	t.Helper()
	cfg, rec, err := readRecords(filepath.Join(dir, "records.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	return rec, cfg
}

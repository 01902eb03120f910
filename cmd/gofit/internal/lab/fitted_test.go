package lab

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
)

// fittingOpener opens slowPods after fitting the study's quotas to
// "nodes" of 1 CPU, as the pod runner fits them to its trial nodes.
type fittingOpener struct{ run *slowPods }

func (fittingOpener) Prepare(context.Context, *trial.Study) error { return nil }
func (o fittingOpener) Open(_ context.Context, s *trial.Study) (trial.Runner, error) {
	s.Quotas = slices.DeleteFunc(slices.Clone(s.Quotas), func(q float64) bool { return q > 1 })
	return o.run, nil
}
func (fittingOpener) Close() error { return nil }

// TestMainRecordsTheStudyItRan: a runner that fits the quotas to where
// its trials run (--kube: the trial nodes' CPUs) changes the study, and
// records.json must hold the study that ran, or a --replay analyses
// rows that were never measured. Before, Main wrote the configuration
// from before the runner opened.
func TestMainRecordsTheStudyItRan(t *testing.T) {
	clock := time.Unix(0, 0)
	run := &slowPods{start: time.Second}
	run.onFakes(&clock)
	out := filepath.Join(t.TempDir(), "out")
	var stdout, stderr bytes.Buffer
	o := Options{Quick: true, Quotas: "0.5,1,4", Out: out, Budget: 10 * time.Minute, Given: map[string]bool{"quotas": true, "budget": true}}
	if err := Main(context.Background(), o, fittingOpener{run}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	cfg, rec, err := readRecords(filepath.Join(out, "records.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Quotas, []float64{0.5, 1}) {
		t.Errorf("records.json's quotas %v: want the fitted [0.5 1] the study ran", cfg.Quotas)
	}
	for _, c := range rec.CPU {
		if c.QuotaCores > 1 {
			t.Errorf("a CPU record at %v cores: the fitted study has no such row", c.QuotaCores)
		}
	}
}

package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

// A study that measured nothing does not replace earlier good results.
func TestLabKeepsGoodResults(t *testing.T) {
	dir := t.TempDir()
	good := []byte(`{"cpu":[{"rps":1}]}`)
	os.WriteFile(filepath.Join(dir, "results.json"), good, 0o644)
	paths, err := Write(dir, &result.Results{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "results.json")); !bytes.Equal(b, good) {
		t.Errorf("an empty run replaced results.json: %s", b)
	}
	if len(paths) != 2 || !strings.Contains(paths[0], "results-empty.json") {
		t.Errorf("wrote %v", paths)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".gofit-*")); len(m) > 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

// Every memory floor says what it rests on, in the HTML report and the
// text summary: how many limited trials, and found, bounded or not
// measured (issue 57: a quick run on pods showed a memory setting with
// no limited trial as if it were measured).
func TestMemoryFloorsSayWhatTheyRestOn(t *testing.T) {
	mib := int64(1 << 20)
	f, h := 24*mib, 40*mib
	r := &result.Results{Memory: []result.MemResult{
		{Setting: result.SetGofit, FloorBytes: &f, HealthyFloorBytes: &h,
			SurvivalFinding: result.Finding{Status: result.FloorFound, Trials: 7, FailedBytes: 20 * mib},
			HealthyFinding:  result.Finding{Status: result.FloorBounded, Trials: 1, BudgetCut: true}},
		{Setting: result.SetAutoMemLimit, SurvivalFinding: result.Finding{Status: result.NotMeasured}, HealthyFinding: result.Finding{Status: result.NotMeasured}},
	}}
	html, err := renderHTML(r)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	Summary(&text, r)
	for name, out := range map[string]string{"report.html": string(html), "summary": text.String()} {
		for _, want := range []string{"24MiB (found: 20MiB failed; 7 trials)", "at most 40MiB (bounded: the budget cut the search; 1 trial)", "not measured"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s does not say %q", name, want)
			}
		}
	}
	if !strings.Contains(string(html), "<td>7 + 1</td>") || !strings.Contains(string(html), "<td>0 + 0</td>") {
		t.Errorf("report.html does not count each setting's limited trials")
	}
}

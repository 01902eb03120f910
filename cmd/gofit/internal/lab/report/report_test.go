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

package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteAtomic: the one writer for results, records and reports
// replaces a file whole, readable by all, leaves no temporary file
// behind, and on failure leaves the old file as it was and names the
// path in its error.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "results.json")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(p, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new\n" || st.Mode().Perm() != 0o644 {
		t.Errorf("%s: %q mode %v, want \"new\\n\" mode 0644", p, b, st.Mode().Perm())
	}

	// A rename that fails (a directory stands at the name): nothing is
	// left behind and the error names the path.
	blocked := filepath.Join(dir, "report.html")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteAtomic(blocked, []byte("x")); err == nil || !strings.Contains(err.Error(), blocked) {
		t.Errorf("write over a directory: %v, want an error naming %s", err, blocked)
	}
	// A directory that is not there.
	missing := filepath.Join(dir, "no", "records.json")
	if err := WriteAtomic(missing, []byte("x")); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("write into a missing directory: %v, want an error naming %s", err, missing)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
	if b, _ := os.ReadFile(p); string(b) != "new\n" {
		t.Errorf("%s changed by the failed writes: %q", p, b)
	}
}

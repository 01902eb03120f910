package manage

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, v := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriterOrder: raised values go top-down, lowered ones bottom-up, after
// all raises; unchanged ones are not written.
func TestWriterOrder(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"top/memory.min":          "100\n",
		"top/mid/memory.min":      "80\n",
		"top/mid/leaf/memory.min": "50\n",
		"top/memory.high":         "max\n",
		"top/mid/memory.low":      "9223372036854771712\n",
	})
	top, mid, leaf := filepath.Join(root, "top"), filepath.Join(root, "top/mid"), filepath.Join(root, "top/mid/leaf")
	vals := []Value{
		{Dir: leaf, File: "memory.min", Value: 10, Level: 2}, // lower
		{Dir: mid, File: "memory.min", Value: 90, Level: 1},  // raise
		{Dir: top, File: "memory.min", Value: 40, Level: 0},  // lower
		{Dir: top, File: "memory.high", Value: Unlimited, Level: 0},
		{Dir: mid, File: "memory.low", Value: Unlimited, Level: 1},
	}
	w := NewWriter(nil, false)
	res := w.Apply(vals)
	if len(res.Errors) != 0 || res.Unchanged != 2 {
		t.Fatalf("%+v", res)
	}
	var order []string
	for _, c := range res.Changed {
		rel, _ := filepath.Rel(root, c.Path())
		order = append(order, rel)
	}
	want := "top/mid/memory.min top/mid/leaf/memory.min top/memory.min"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("order %s, want %s", got, want)
	}
	for f, v := range map[string]string{"top/memory.min": "40", "top/mid/memory.min": "90", "top/mid/leaf/memory.min": "10", "top/memory.high": "max\n"} {
		b, _ := os.ReadFile(filepath.Join(root, f))
		if string(b) != v {
			t.Errorf("%s = %q, want %q", f, b, v)
		}
	}
	// A second pass has nothing to do.
	if res := w.Apply(vals); len(res.Changed) != 0 || res.Unchanged != 5 {
		t.Errorf("second pass %+v", res)
	}
}

// TestWriterMissing: a file missing on this kernel is skipped and logged
// once for its name; a missing cgroup is reported as gone, not logged.
func TestWriterMissing(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"a/memory.low": "0", "b/memory.low": "0"})
	var buf bytes.Buffer
	w := NewWriter(slog.New(slog.NewTextHandler(&buf, nil)), true)
	vals := []Value{
		{Dir: filepath.Join(root, "a"), File: "memory.wmark_ratio", Value: 95},
		{Dir: filepath.Join(root, "b"), File: "memory.wmark_ratio", Value: 95},
		{Dir: filepath.Join(root, "gone"), File: "memory.low", Value: 1},
		{Dir: filepath.Join(root, "a"), File: "memory.soft_limit_in_bytes", Value: Unlimited},
	}
	for i := 0; i < 3; i++ {
		res := w.Apply(vals)
		if len(res.Missing) != 3 || len(res.Gone) != 1 {
			t.Fatalf("missing %d gone %d", len(res.Missing), len(res.Gone))
		}
	}
	if n := strings.Count(buf.String(), "file=memory.wmark_ratio"); n != 1 {
		t.Errorf("wmark_ratio logged %d times:\n%s", n, buf.String())
	}
	if got := w.MissingFiles(); strings.Join(got, ",") != "memory.soft_limit_in_bytes,memory.wmark_ratio" {
		t.Errorf("MissingFiles %v", got)
	}
}

func TestWriterV1UnlimitedAndDryRun(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"c/memory.soft_limit_in_bytes": "0\n", "c/memory.min": "junk"})
	dir := filepath.Join(root, "c")
	w := NewWriter(nil, true)
	w.DryRun = true
	res := w.Apply([]Value{{Dir: dir, File: "memory.soft_limit_in_bytes", Value: Unlimited}, {Dir: dir, File: "memory.min", Value: 1}})
	if len(res.Changed) != 1 || len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "memory.min") {
		t.Fatalf("%+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "memory.soft_limit_in_bytes")); string(b) != "0\n" {
		t.Errorf("dry run wrote %q", b)
	}
	w.DryRun = false
	w.Apply([]Value{{Dir: dir, File: "memory.soft_limit_in_bytes", Value: Unlimited}})
	if b, _ := os.ReadFile(filepath.Join(dir, "memory.soft_limit_in_bytes")); string(b) != "-1" {
		t.Errorf("v1 unlimited written as %q", b)
	}
}

package manage

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestWriterKeepsPathsNotValues: the Writer keeps the paths it read between
// passes, never the values: a file changed by someone else between two
// Applies is read again and put back, and a path no Apply uses any more is
// dropped, so that the cache follows the pods on the node.
func TestWriterKeepsPathsNotValues(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{"a/memory.low": "100\n", "b/memory.low": "100\n"})
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	w := NewWriter(nil, false)
	both := []Value{{Dir: a, File: "memory.low", Value: 100}, {Dir: b, File: "memory.low", Value: 100}}
	if res := w.Apply(both); res.Unchanged != 2 || len(res.Changed) != 0 {
		t.Fatalf("first pass %+v", res)
	}
	// Someone else writes a's memory.low: the next pass sees it.
	writeFiles(t, root, map[string]string{"a/memory.low": "7\n"})
	if v, err := w.Read(a, "memory.low"); err != nil || v != 7 {
		t.Errorf("Read = %d, %v; want 7", v, err)
	}
	res := w.Apply(both)
	if len(res.Changed) != 1 || res.Changed[0].Dir != a || res.Changed[0].Old != 7 {
		t.Fatalf("after a change behind its back: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(a, "memory.low")); string(b) != "100" {
		t.Errorf("a/memory.low holds %q, want 100", b)
	}
	if n := len(w.cache.paths); n != 2 {
		t.Errorf("%d paths kept, want 2", n)
	}
	// b's pod is gone: its path goes with the next pass that does not use it.
	w.Apply(both[:1])
	if _, ok := w.cache.paths[pathKey{b, "memory.low"}]; ok || len(w.cache.paths) != 1 {
		t.Errorf("paths after b went away: %v", w.cache.paths)
	}
	// A directory removed and made again at the same path is read anew.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if res := w.Apply(both[:1]); len(res.Gone) != 1 {
		t.Errorf("a removed: %+v, want it gone", res)
	}
	writeFiles(t, root, map[string]string{"a/memory.low": "max\n"})
	if res := w.Apply(both[:1]); len(res.Changed) != 1 || res.Changed[0].Old != Unlimited {
		t.Errorf("a made again: %+v", res)
	}
}

// TestParseValueFast: the fast parser agrees with ParseValue wherever it
// answers, and leaves to it whatever it does not take.
func TestParseValueFast(t *testing.T) {
	for _, s := range []string{"0", "0\n", "max\n", " max ", "123456789\n", "-5\n", "-0", "+5", "", "\n", "maxx",
		"9223372036854771712\n", "999999999999999999", "9999999999999999999", "12a", "1 2", "\u00a0 7", "--1", "-"} {
		got, ok := parseValue([]byte(s))
		want, err := ParseValue("f", s)
		if ok && (err != nil || got != want) {
			t.Errorf("parseValue(%q) = %d; ParseValue says %d, %v", s, got, want, err)
		}
		if !ok && err == nil && len(strings.TrimSpace(s)) <= 18 && !strings.HasPrefix(s, "+") && !strings.ContainsRune(s, '\u00a0') {
			t.Errorf("parseValue(%q) declined a plain value ParseValue reads as %d", s, want)
		}
	}
}

// TestApplySteadyAllocs: a pass over values that already hold allocates
// nothing per value (the node agent applies hundreds every pass).
func TestApplySteadyAllocs(t *testing.T) {
	if runtime.GOOS != "linux" || raceEnabled {
		t.Skip("the fast read is Linux's, and the race detector allocates")
	}
	root := t.TempDir()
	var vals []Value
	files := map[string]string{}
	for i := range 50 {
		d := filepath.Join(root, "pod"+strings.Repeat("x", i))
		for _, f := range []string{"memory.min", "memory.low", "memory.high"} {
			files[filepath.Join(filepath.Base(d), f)] = "0\n"
			vals = append(vals, Value{Dir: d, File: f, Value: 0, Level: 2})
		}
	}
	writeFiles(t, root, files)
	w := NewWriter(nil, false)
	w.MaxMemory = 1 << 30
	w.Apply(vals)
	if a := testing.AllocsPerRun(20, func() {
		if res := w.Apply(vals); res.Unchanged != len(vals) {
			t.Fatalf("%+v", res)
		}
	}); a > 1 {
		t.Errorf("a steady Apply of %d values: %v allocations, want at most 1", len(vals), a)
	}
}

package manage

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriterRefusesOutOfRange: the writer is the last line before the
// kernel. A negative memory value (what an overflow produces) or one above
// the bound it was given is refused and reported, and so is a set of
// memory.min/low/high for one group out of order; nothing of that group's
// memory protection is written. Other files and groups go ahead.
func TestWriterRefusesOutOfRange(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for _, g := range []string{"neg", "big", "order", "ok"} {
		for _, f := range []string{"memory.min", "memory.low", "memory.high"} {
			files[g+"/"+f] = "0\n"
		}
	}
	files["ok/memory.high"] = "max\n"
	files["ok/memory.wmark_min_adj"] = "0\n"
	writeFiles(t, root, files)
	d := func(g string) string { return filepath.Join(root, g) }
	w := NewWriter(nil, false)
	w.MaxMemory = 1 << 30
	res := w.Apply([]Value{
		{Dir: d("neg"), File: "memory.min", Value: -807045053224792064},
		{Dir: d("neg"), File: "memory.low", Value: 1 << 20},
		{Dir: d("big"), File: "memory.high", Value: 1168231104512},
		{Dir: d("order"), File: "memory.min", Value: 2 << 20},
		{Dir: d("order"), File: "memory.low", Value: 1 << 20},
		{Dir: d("ok"), File: "memory.min", Value: 1 << 20},
		{Dir: d("ok"), File: "memory.low", Value: 2 << 20},
		{Dir: d("ok"), File: "memory.high", Value: Unlimited},
		{Dir: d("ok"), File: "memory.wmark_min_adj", Value: -25}, // not a byte count: negative is fine
	})
	if len(res.Errors) != 3 {
		t.Fatalf("errors %v, want 3 (negative, too big, out of order)", res.Errors)
	}
	for _, e := range res.Errors {
		if !errors.Is(e, ErrOutOfRange) {
			t.Errorf("%v is not ErrOutOfRange", e)
		}
	}
	joined := errors.Join(res.Errors...).Error()
	for _, want := range []string{"neg/memory.min", "big/memory.high", "order/memory.min"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no error names %s: %s", want, joined)
		}
	}
	for f, want := range map[string]string{
		"neg/memory.min": "0", "neg/memory.low": "0", "big/memory.high": "0", "order/memory.min": "0", "order/memory.low": "0",
		"ok/memory.min": "1048576", "ok/memory.low": "2097152", "ok/memory.high": "max", "ok/memory.wmark_min_adj": "-25",
	} {
		b, _ := os.ReadFile(filepath.Join(root, f))
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("%s = %s, want %s", f, got, want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[int64]string{0: "0", 4096: "4096", Unlimited: "max"} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%d) = %s, want %s", v, got, want)
		}
	}
	if got := NewWriter(nil, true).format(Unlimited); got != "-1" {
		t.Errorf("v1 unlimited written as %s", got)
	}
}

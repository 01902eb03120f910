//go:build linux

package procmem

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	const rollup = "5611f073b000-7ffcbad70000 ---p 00000000 00:00 0                          [rollup]\nRss:                1724 kB\nPss:                 474 kB\nAnonymous:           108 kB\nSwap:                  0 kB\n"
	u, err := Parse(rollup)
	if err != nil || u.Rss != 1724<<10 || u.Anonymous != 108<<10 {
		t.Errorf("Parse = %+v, %v", u, err)
	}
	for _, bad := range []string{"", "Pss: 1 kB\n", "Rss: lots kB\n", "Rss: 12 MB\n", "Rss: -4 kB\n", "Rss: 99999999999999999 kB\n"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

func TestReader(t *testing.T) {
	root := t.TempDir()
	r := NewReader(root)
	if _, err := r.Read(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("missing file: %v, want ErrUnsupported", err)
	}
	p := filepath.Join(root, "proc/self/smaps_rollup")
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte("Rss: 2048 kB\n"), 0o644)
	if u, err := r.Read(); err != nil || u.Rss != 2<<20 {
		t.Errorf("Read = %+v, %v", u, err)
	}
	// Rewritten in place, as the kernel regenerates it: re-read from 0.
	os.WriteFile(p, []byte("Rss: 4096 kB\n"), 0o644)
	if u, err := r.Read(); err != nil || u.Rss != 4<<20 {
		t.Errorf("second Read = %+v, %v", u, err)
	}
	r.Close()

	big := make([]byte, maxSize+10)
	for i := range big {
		big[i] = 'x'
	}
	os.WriteFile(p, big, 0o644)
	if _, err := NewReader(root).Read(); err == nil {
		t.Error("oversized file accepted")
	}
	os.Remove(p)
	os.Mkdir(p, 0o755)
	if _, err := NewReader(root).Read(); err == nil {
		t.Error("a directory accepted")
	}

	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o644); err == nil {
		if _, err := NewReader(root).Read(); err == nil {
			t.Error("a FIFO accepted")
		}
	}

	if u, err := NewReader("/").Read(); err != nil || u.Rss <= 0 {
		t.Errorf("this process: %+v, %v", u, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("Rss: 1724 kB\nAnonymous: 108 kB\n")
	f.Add("Rss:\n")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := Parse(s)
		if err == nil && (u.Rss < 0 || u.Anonymous < 0) {
			t.Fatalf("Parse(%q) = %+v", s, u)
		}
	})
}

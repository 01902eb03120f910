package fastread

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
)

func TestReadSmall(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the fast path is Linux's")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "memory.low")
	if err := os.WriteFile(file, []byte("104857600\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 200), 0o644); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact")
	if err := os.WriteFile(exact, make([]byte, 128), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf [128]byte
	if n, ok := ReadSmall(New(file), buf[:]); !ok || string(buf[:n]) != "104857600\n" {
		t.Errorf("ReadSmall(%s) = %q, %v", file, buf[:n], ok)
	}
	for _, p := range []string{filepath.Join(dir, "missing"), big, exact, fifo, dir, file + "\x00x"} {
		if n, ok := ReadSmall(New(p), buf[:]); ok {
			t.Errorf("ReadSmall(%q) = %d bytes, ok: want not ok", p, n)
		}
	}
	p := New(file)
	if raceEnabled {
		return // the race detector makes buf escape
	}
	if a := testing.AllocsPerRun(100, func() { ReadSmall(p, buf[:]) }); a != 0 {
		t.Errorf("ReadSmall: %v allocations, want 0", a)
	}
}

func TestIsDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{dir: true, link: true, file: false, filepath.Join(dir, "missing"): false, dir + "\x00": false} {
		if got := IsDir(New(p)); got != want {
			t.Errorf("IsDir(%q) = %v, want %v", p, got, want)
		}
	}
	if runtime.GOOS == "linux" && !raceEnabled {
		p := New(dir)
		if a := testing.AllocsPerRun(100, func() { IsDir(p) }); a != 0 {
			t.Errorf("IsDir: %v allocations, want 0", a)
		}
	}
}

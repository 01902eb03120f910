package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup/cgrouptest"
)

// v2Tree writes a minimal v2 fixture (a process in /svc) under a temp dir
// and returns the root and the cgroup directory.
func v2Tree(t *testing.T) (root, dir string) {
	t.Helper()
	tr := cgrouptest.NewV2(t, "/svc")
	return tr.Root, tr.Dir()
}

// within runs fn and fails the test if it has not returned after limit: a
// read that blocks must show up as a failure, not as a hung test binary.
func returnsWithin(t *testing.T, limit time.Duration, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("still blocked after %v", limit)
		return nil
	}
}

func TestReadRejectsFIFO(t *testing.T) {
	root, dir := v2Tree(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "cpu.max"), 0o644); err != nil {
		t.Skipf("skipping: cannot make a FIFO here: %v", err)
	}
	c, err := NewFS(root).Self()
	if err != nil {
		t.Fatal(err)
	}
	err = returnsWithin(t, 5*time.Second, func() error { _, err := c.CPULimits(); return err })
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "cpu.max") {
		t.Errorf("a FIFO as cpu.max read as %v, want ErrNotRegular naming the file", err)
	}
}

func TestReadRejectsDevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skipf("skipping: %v", err)
	}
	root, dir := v2Tree(t)
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "memory.max")); err != nil {
		t.Fatal(err)
	}
	c, err := NewFS(root).Self()
	if err != nil {
		t.Fatal(err)
	}
	err = returnsWithin(t, 5*time.Second, func() error { _, err := c.MemoryLimits(); return err })
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "memory.max") {
		t.Errorf("/dev/zero as memory.max read as %v, want ErrNotRegular naming the file", err)
	}
}

func TestReadCapsSize(t *testing.T) {
	root, dir := v2Tree(t)
	// A regular file far larger than any real memory.stat.
	big := strings.Repeat("anon 1\n", (2*maxValueFile)/7)
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := NewFS(root).Self()
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.MemoryStats()
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "memory.stat") {
		t.Errorf("an oversized memory.stat read as %v, want ErrTooLarge naming the file", err)
	}
	if n := cap(c.rd.buf); n > 2*maxValueFile {
		t.Errorf("the reader's buffer grew to %d bytes reading it", n)
	}
	// A file just under the cap still reads.
	ok := strings.Repeat("anon 1\n", (maxValueFile-1)/7)
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(ok), 0o644); err != nil {
		t.Fatal(err)
	}
	c2, _ := NewFS(root).Self()
	if m, err := c2.MemoryStats(); err != nil || m.Anon != 1 {
		t.Errorf("a %d-byte memory.stat: %+v, %v", len(ok), m, err)
	}
}

func TestProcFilesBounded(t *testing.T) {
	root, _ := v2Tree(t)
	p := filepath.Join(root, "proc/self/mountinfo")
	os.Remove(p)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("skipping: cannot make a FIFO here: %v", err)
	}
	err := returnsWithin(t, 5*time.Second, func() error { _, err := NewFS(root).Self(); return err })
	if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "mountinfo") {
		t.Errorf("a FIFO as mountinfo: %v, want ErrNotRegular naming the file", err)
	}
}

func TestDisplayPath(t *testing.T) {
	for in, want := range map[string]string{
		"/kubepods.slice/pod-1.slice": "/kubepods.slice/pod-1.slice",
		"/a b/ü":                      "/a b/ü",
		"/evil\x1b[2J\x1b[31mred":     `"/evil\x1b[2J\x1b[31mred"`,
		"/two\nlines":                 `"/two\nlines"`,
		"/bad\xffutf8":                `"/bad\xffutf8"`,
		`/quote"d`:                    `"/quote\"d"`,
		"/tab\there":                  `"/tab\there"`,
	} {
		if got := DisplayPath(in); got != want {
			t.Errorf("DisplayPath(%q) = %s, want %s", in, got, want)
		}
	}
	n := &Node{Version: 2, Path: "/x\x1b]0;title\x07"}
	if got, want := n.String(), `"/x\x1b]0;title\a" (v2)`; got != want {
		t.Errorf("Node.String() = %s, want %s", got, want)
	}
}

func TestErrorsEscapePaths(t *testing.T) {
	root, dir := v2Tree(t)
	evil := filepath.Join(dir, "x\x1b[31m")
	if err := os.MkdirAll(evil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(evil, "cpu.max"), []byte("fifty 100000"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc/self/cgroup"), []byte("0::/svc/x\x1b[31m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := NewFS(root).Self()
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CPULimits()
	if err == nil || strings.Contains(err.Error(), "\x1b") || !strings.Contains(err.Error(), `x\x1b[31m/cpu.max`) {
		t.Errorf("error %q: want the path escaped", err)
	}
}

// Package procmem reads how much memory the calling process has resident,
// from /proc/self/smaps_rollup (Linux ≥ 4.14):
//
//	Rss:               10460 kB
//	Pss:                6020 kB
//	...
//	Anonymous:          3880 kB
//
// Rss counts the process's own pages only (anonymous, file-backed and
// shared memory it maps), so two processes in one cgroup do not count
// each other, and page cache the process merely read through does not count.
package procmem

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// maxSize bounds a read: smaps_rollup is about 1 KiB.
const maxSize = 16 << 10

// ErrUnsupported is returned when the kernel has no smaps_rollup.
var ErrUnsupported = errors.New("no /proc/self/smaps_rollup")

// Reader keeps /proc/self/smaps_rollup open and re-reads it from offset 0.
type Reader struct {
	path string
	f    *os.File
	buf  []byte
}

// NewReader reads <root>/proc/self/smaps_rollup; the file is opened on
// the first read.
func NewReader(root string) *Reader {
	return &Reader{path: filepath.Join(root, "proc/self/smaps_rollup"), buf: make([]byte, maxSize)}
}

// Usage is the process's resident memory.
type Usage struct {
	Rss       int64 // bytes resident: anonymous + file-backed + shared memory mapped
	Anonymous int64 // of which anonymous
}

// Read returns the process's resident memory now. The error wraps
// ErrUnsupported when the file does not exist.
func (r *Reader) Read() (Usage, error) {
	if r.f == nil {
		// O_NONBLOCK: a FIFO put in its place must not hang the open.
		f, err := os.OpenFile(r.path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return Usage{}, fmt.Errorf("%s: %w", r.path, ErrUnsupported)
		}
		if err != nil {
			return Usage{}, err
		}
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			f.Close()
			return Usage{}, fmt.Errorf("%s: not a regular file", r.path)
		}
		r.f = f
	}
	n, err := r.f.ReadAt(r.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Usage{}, fmt.Errorf("%s: %w", r.path, err)
	}
	if n == len(r.buf) {
		return Usage{}, fmt.Errorf("%s: larger than %d bytes", r.path, maxSize)
	}
	u, err := Parse(string(r.buf[:n]))
	if err != nil {
		return Usage{}, fmt.Errorf("%s: %w", r.path, err)
	}
	return u, nil
}

// Close closes the file.
func (r *Reader) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Parse reads the Rss and Anonymous lines of smaps_rollup; other lines
// are ignored. A file without an Rss line is an error.
func Parse(s string) (Usage, error) {
	var u Usage
	found := false
	for i, line := range strings.Split(s, "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "Rss" && key != "Anonymous") {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || kb < 0 || kb > 1<<44 || strings.TrimSpace(unit) != "kB" {
			return Usage{}, fmt.Errorf("line %d: malformed %q", i+1, line)
		}
		switch key {
		case "Rss":
			u.Rss, found = kb<<10, true
		case "Anonymous":
			u.Anonymous = kb << 10
		}
	}
	if !found {
		return Usage{}, errors.New("no Rss line")
	}
	return u, nil
}

package cgroup

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
)

// reader keeps cgroup files open and re-reads them from offset 0, as Go's
// runtime does for cpu.max: a refresh then costs one pread per file instead
// of open+read+close, and missing files are not looked up again.
type reader struct {
	mu      sync.Mutex
	files   map[string]*os.File
	missing map[string]bool
	reads   int
	buf     []byte
}

// recheckMissing is how many reads a "missing" verdict lasts: files appear
// when a controller is enabled later.
const recheckMissing = 256

func newReader() *reader {
	return &reader{files: map[string]*os.File{}, missing: map[string]bool{}, buf: make([]byte, 4096)}
}

// read returns the file's content; ok is false when it does not exist.
func (r *reader) read(file string) (string, bool, error) {
	if r == nil {
		return readFile(file)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads++; r.reads%recheckMissing == 0 {
		clear(r.missing)
	}
	if r.missing[file] {
		return "", false, nil
	}
	f := r.files[file]
	if f == nil {
		var err error
		if f, err = openRegular(file); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				r.missing[file] = true
				return "", false, nil
			}
			return "", false, err
		}
		r.files[file] = f
	}
	for {
		n, err := f.ReadAt(r.buf, 0)
		if err != nil && err != io.EOF {
			// The group may have been removed or the file replaced (a
			// fixture rewritten): drop the handle and read afresh.
			f.Close()
			delete(r.files, file)
			return readFile(file)
		}
		if n < len(r.buf) {
			return string(r.buf[:n]), true, nil
		}
		if len(r.buf) > maxValueFile {
			return "", false, tooLarge(file, maxValueFile)
		}
		r.buf = make([]byte, min(2*len(r.buf), maxValueFile+1))
	}
}

func (r *reader) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, f := range r.files {
		f.Close()
		delete(r.files, k)
	}
}

// keyed reads a flat keyed file; a missing file is not an error.
func (r *reader) keyed(file string, fn func(string, uint64)) error {
	s, ok, err := r.read(file)
	if !ok || err != nil {
		return err
	}
	return withFile(parseFlatKeyed(s, fn), file)
}

// uint reads a one-number file; a missing file reads as 0, ok false.
func (r *reader) uint(file string) (uint64, bool, error) {
	s, ok, err := r.read(file)
	if !ok || err != nil {
		return 0, false, err
	}
	v, err := parseUint(s)
	return v, err == nil, withFile(err, file)
}

package cgroup

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Files under /proc and /sys are read with a size cap and only when they
// are regular files: a fixture tree or a --root may hold anything, and a
// FIFO would block the reader forever, /dev/zero would fill memory.
var (
	// ErrNotRegular means a file to read is a FIFO, device, socket or directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge means a file is larger than any real one of its kind.
	ErrTooLarge = errors.New("file too large")
)

const (
	// maxValueFile bounds a cgroup value or stat file; the largest real one,
	// memory.stat, is under 2 KiB.
	maxValueFile = 64 << 10
	// maxProcFile bounds /proc/<pid>/{cgroup,mountinfo}; mountinfo on a busy
	// Kubernetes node runs to a few hundred KiB.
	maxProcFile = 4 << 20
)

// openRegular opens file for reading without blocking on a FIFO, and
// refuses anything but a regular file (cgroupfs and procfs files are).
func openRegular(file string) (*os.File, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w (%v)", DisplayPath(file), ErrNotRegular, st.Mode().Type())
	}
	return f, nil
}

// ReadBounded reads a regular file of at most max bytes: a larger one fails
// with ErrTooLarge, anything but a regular file (a FIFO, a device) with
// ErrNotRegular, without blocking. A missing file returns ok == false and no
// error: cgroup files come and go with controllers and kernel versions.
// cgroup/manage reads through it too, so there is one bounded reader.
func ReadBounded(file string, max int) (string, bool, error) {
	f, err := openRegular(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	defer f.Close()
	// Most cgroup files are one number: read them into the stack, so the
	// string is the only allocation (the node agent reads hundreds a pass).
	var small [128]byte
	n := 0
	for n < len(small) {
		m, err := f.Read(small[n:]) // *os.File, not io.Reader: small stays on the stack
		n += m
		if n > max {
			return "", false, tooLarge(file, max)
		}
		if errors.Is(err, io.EOF) {
			return string(small[:n]), true, nil
		}
		if err != nil {
			return "", false, err
		}
	}
	rest, err := io.ReadAll(io.LimitReader(f, int64(max-n)+1))
	if err != nil {
		return "", false, err
	}
	b := append(small[:n:n], rest...)
	if len(b) > max {
		return "", false, tooLarge(file, max)
	}
	return string(b), true, nil
}

func tooLarge(file string, max int) error {
	return fmt.Errorf("%s: %w: more than %d bytes", DisplayPath(file), ErrTooLarge, max)
}

//go:build linux

package fastread

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func openat(p Path, flags int) (int, bool) {
	if p.c == nil {
		return -1, false
	}
	for {
		fd, _, errno := syscall.Syscall6(unix.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&p.c[0])), uintptr(flags|unix.O_CLOEXEC), 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		return int(fd), errno == 0
	}
}

var atFDCWD = unix.AT_FDCWD // a variable: a negative constant does not convert to uintptr

// ReadSmall reads the whole of the regular file p into buf, without
// blocking (a FIFO is opened non-blocking and refused). ok is false when
// the file could not be opened or read, is not a regular file, or does
// not fit in buf.
func ReadSmall(p Path, buf []byte) (n int, ok bool) {
	fd, ok := openat(p, unix.O_RDONLY|unix.O_NONBLOCK)
	if !ok {
		return 0, false
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, false
	}
	for {
		if n == len(buf) {
			return 0, false // larger than buf, or exactly its size: the caller reads it whole
		}
		m, err := syscall.Read(fd, buf[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return 0, false
		case m == 0:
			return n, true
		}
		n += m
	}
}

// IsDir reports whether p is a directory (following symbolic links, as
// os.Stat does; an error is false). It needs no permission on p itself.
func IsDir(p Path) bool {
	fd, ok := openat(p, unix.O_PATH|unix.O_DIRECTORY)
	if ok {
		syscall.Close(fd)
	}
	return ok
}

// Package fastread opens and reads small files, and checks directories,
// by paths kept between calls, without allocating: the node agent reads
// and compares hundreds of cgroup values every pass, and the os package
// allocates a File, a FileInfo and the path's C string for each.
//
// Every function answers only the common case (ok) and leaves anything
// else (a missing file, a FIFO, a file too large, an error) to the caller's
// ordinary path, which then produces its usual error.
//
// It is public because two of gofit's modules use it: the library's
// cgroup/manage (its Writer's reads) and the node agent in module kube
// (its checks for container directories). Other programs should use os.
package fastread

import "strings"

// Path is a file path kept with its NUL-terminated bytes.
type Path struct {
	s string
	c []byte // nil when s cannot be a path (it holds a NUL)
}

// New keeps path s.
func New(s string) Path {
	if strings.IndexByte(s, 0) >= 0 {
		return Path{s: s}
	}
	c := make([]byte, len(s)+1)
	copy(c, s)
	return Path{s: s, c: c}
}

// String is the path.
func (p Path) String() string { return p.s }

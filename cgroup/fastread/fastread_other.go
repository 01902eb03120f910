//go:build !linux

package fastread

import "os"

// ReadSmall answers nothing off Linux: the caller reads p its usual way.
func ReadSmall(p Path, buf []byte) (n int, ok bool) { return 0, false }

// IsDir reports whether p is a directory (an error is false).
func IsDir(p Path) bool {
	st, err := os.Stat(p.s)
	return err == nil && st.IsDir()
}

// Package archive unpacks tar archives into a directory, for every part
// of gofit that reads one: the lab's image root filesystems and OCI
// archives (cmd/gofit/internal/lab/image) and the release's image
// tarballs (tools/release). It is the one tar unpacker, so it has one
// rule for what may not escape the directory; it imports only the
// standard library, so the modules that use it take on nothing else.
package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Unpack writes the tar read from r (an image's flattened filesystem, as
// mutate.Extract gives it, or an OCI layout) into root. Entries cannot
// escape it: names are cleaned below root (so "../x" and "/x" land in
// root), no entry is written through a symbolic link (a layer with a link
// "etc -> /etc" and then "etc/passwd" is refused), a hard link's target is
// found the same way, and a symbolic link is made as it is named but never
// followed while unpacking. Devices, FIFOs and sockets are skipped: a
// service under test needs none of its own.
func Unpack(r io.Reader, root string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := path.Clean("/" + h.Name)
		if rel == "/" {
			continue
		}
		dst := filepath.Join(root, rel)
		if err := noLinkParents(root, path.Dir(rel)); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		mode := os.FileMode(h.Mode) & os.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			st, err := os.Lstat(dst)
			switch {
			case err == nil && st.IsDir():
				if err := os.Chmod(dst, mode); err != nil {
					return err
				}
			default:
				if err == nil { // a file or a link where a directory goes
					if err := os.Remove(dst); err != nil {
						return err
					}
				}
				if err := os.Mkdir(dst, mode); err != nil {
					return err
				}
				if err := os.Chmod(dst, mode); err != nil {
					return err
				}
			}
		case tar.TypeReg:
			os.Remove(dst)
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			if err := os.Chmod(dst, mode); err != nil { // past the umask
				return err
			}
		case tar.TypeSymlink:
			os.Remove(dst)
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return err
			}
		case tar.TypeLink:
			src := path.Clean("/" + h.Linkname)
			if err := noLinkParents(root, path.Dir(src)); err != nil {
				return fmt.Errorf("%s: link to %s: %w", h.Name, h.Linkname, err)
			}
			os.Remove(dst)
			if err := os.Link(filepath.Join(root, src), dst); err != nil {
				return err
			}
		default:
			continue
		}
		_ = os.Lchown(dst, h.Uid, h.Gid)
	}
}

// noLinkParents fails when a directory on the way from root to dir (a
// path inside root) is a symbolic link.
func noLinkParents(root, dir string) error {
	cur := root
	for _, part := range strings.Split(strings.TrimPrefix(path.Clean("/"+dir), "/"), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		st, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			// Tars may omit a file's directories.
			if err := os.Mkdir(cur, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("goes through the symbolic link %s", strings.TrimPrefix(cur, root))
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", strings.TrimPrefix(cur, root))
		}
	}
	return nil
}

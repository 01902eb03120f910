package archive

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// box is a test's directory: root, where a tar is unpacked, beside
// outside, which holds a secret that no entry may reach.
type box struct{ root, outside, secret string }

func newBox(t testing.TB) box {
	dir := t.TempDir()
	b := box{root: filepath.Join(dir, "root"), outside: filepath.Join(dir, "outside")}
	b.secret = filepath.Join(b.outside, "secret")
	for _, d := range []string{b.root, b.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(b.secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// escaped says how an unpack reached outside root: a file made or changed
// in outside (or beside root), or a file in root that is the secret
// itself (a hard link to it). "" is none.
func (b box) escaped(t testing.TB) string {
	ents, err := os.ReadDir(b.outside)
	if err != nil {
		return "outside: " + err.Error()
	}
	if len(ents) != 1 || ents[0].Name() != "secret" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return "outside holds " + strings.Join(names, ", ")
	}
	if got, err := os.ReadFile(b.secret); err != nil || string(got) != "secret" {
		return "the secret was changed"
	}
	if ents, err := os.ReadDir(filepath.Dir(b.root)); err != nil || len(ents) != 2 {
		return "something was made beside root"
	}
	secret, err := os.Lstat(b.secret)
	if err != nil {
		return err.Error()
	}
	var found string
	filepath.WalkDir(b.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if st, err := os.Lstat(p); err == nil && os.SameFile(st, secret) {
			found = p + " is a hard link to the secret"
		}
		return nil
	})
	return found
}

func tarOf(t testing.TB, hs []tar.Header) *bytes.Buffer {
	buf, err := tarBytes(hs)
	if err != nil {
		t.Fatal(err)
	}
	return buf
}

func tarBytes(hs []tar.Header) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len("evil"))
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("evil"))
		}
	}
	return &buf, tw.Close()
}

// TestUnpackStaysInRoot: no entry is written outside root, whether it
// is named with "..", with an absolute path, through a symbolic link the
// tar made, or as a hard link to a file outside. Where an entry cannot be
// placed inside root, Unpack says so; where it can, it lands inside.
// Today's weakest unpacker (tools/release's, which skipped links and
// checked only the joined name's prefix) fails the cases that want a
// refusal and the ones that want a link kept.
func TestUnpackStaysInRoot(t *testing.T) {
	const (
		reg  = tar.TypeReg
		dir  = tar.TypeDir
		sym  = tar.TypeSymlink
		hard = tar.TypeLink
	)
	for _, c := range []struct {
		name    string
		entries func(b box) []tar.Header
		refuse  bool
		inside  string // a file that must be in root afterwards ({outside} is the outside dir's path)
	}{
		{"dot-dot", func(b box) []tar.Header {
			return []tar.Header{{Name: "../outside/evil", Typeflag: reg, Mode: 0o644}}
		}, false, "outside/evil"},
		{"deep dot-dot", func(b box) []tar.Header {
			return []tar.Header{{Name: "a/../../../outside/evil", Typeflag: reg, Mode: 0o644}}
		}, false, "outside/evil"},
		{"absolute", func(b box) []tar.Header {
			return []tar.Header{{Name: b.outside + "/evil", Typeflag: reg, Mode: 0o644}}
		}, false, "{outside}/evil"},
		{"root entries", func(b box) []tar.Header {
			return []tar.Header{{Name: "./", Typeflag: dir, Mode: 0o755}, {Name: ".", Typeflag: dir, Mode: 0o755}, {Name: "./index.json", Typeflag: reg, Mode: 0o644}}
		}, false, "index.json"},
		{"through a link", func(b box) []tar.Header {
			return []tar.Header{{Name: "etc", Typeflag: sym, Linkname: b.outside}, {Name: "etc/evil", Typeflag: reg, Mode: 0o644}}
		}, true, ""},
		{"through a relative link", func(b box) []tar.Header {
			return []tar.Header{{Name: "up", Typeflag: sym, Linkname: "../outside"}, {Name: "up/evil", Typeflag: reg, Mode: 0o644}}
		}, true, ""},
		{"through a link to a link", func(b box) []tar.Header {
			return []tar.Header{{Name: "a", Typeflag: sym, Linkname: b.outside}, {Name: "b", Typeflag: sym, Linkname: "a"}, {Name: "b/evil", Typeflag: reg, Mode: 0o644}}
		}, true, ""},
		{"a directory through a link", func(b box) []tar.Header {
			return []tar.Header{{Name: "etc", Typeflag: sym, Linkname: b.outside}, {Name: "etc/evil/", Typeflag: dir, Mode: 0o755}}
		}, true, ""},
		{"a file over a link", func(b box) []tar.Header {
			return []tar.Header{{Name: "l", Typeflag: sym, Linkname: b.secret}, {Name: "l", Typeflag: reg, Mode: 0o644}}
		}, false, "l"},
		{"a directory over a link", func(b box) []tar.Header {
			return []tar.Header{{Name: "d", Typeflag: sym, Linkname: b.outside}, {Name: "d/", Typeflag: dir, Mode: 0o755}, {Name: "d/evil", Typeflag: reg, Mode: 0o644}}
		}, false, "d/evil"},
		{"hard link through a link", func(b box) []tar.Header {
			return []tar.Header{{Name: "l", Typeflag: sym, Linkname: b.outside}, {Name: "h", Typeflag: hard, Linkname: "l/secret"}}
		}, true, ""},
		{"hard link out by dot-dot", func(b box) []tar.Header {
			return []tar.Header{{Name: "h", Typeflag: hard, Linkname: "../outside/secret"}}
		}, true, ""},
		{"hard link out by absolute path", func(b box) []tar.Header {
			return []tar.Header{{Name: "h", Typeflag: hard, Linkname: b.secret}}
		}, true, ""},
		{"hard link to a link out, then written", func(b box) []tar.Header {
			return []tar.Header{{Name: "l", Typeflag: sym, Linkname: b.secret}, {Name: "h", Typeflag: hard, Linkname: "l"}, {Name: "h", Typeflag: reg, Mode: 0o644}}
		}, false, "h"},
		{"links are kept", func(b box) []tar.Header {
			return []tar.Header{{Name: "f", Typeflag: reg, Mode: 0o644}, {Name: "s", Typeflag: sym, Linkname: "f"}, {Name: "h", Typeflag: hard, Linkname: "f"}}
		}, false, "s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBox(t)
			err := Unpack(tarOf(t, c.entries(b)), b.root)
			if c.refuse != (err != nil) {
				t.Errorf("err = %v, want refused %v", err, c.refuse)
			}
			if how := b.escaped(t); how != "" {
				t.Fatalf("wrote outside the root: %s", how)
			}
			if c.inside != "" {
				inside := strings.ReplaceAll(c.inside, "{outside}", b.outside)
				if _, err := os.Lstat(filepath.Join(b.root, inside)); err != nil {
					t.Errorf("want %s inside the root: %v", c.inside, err)
				}
			}
		})
	}
}

// FuzzUnpack builds a tar from the fuzzer's bytes, out of the pieces that
// make escapes (names with "..", absolute paths, links to outside, hard
// links to links) and checks that nothing outside root was touched,
// whatever Unpack answered.
func FuzzUnpack(f *testing.F) {
	f.Add([]byte{2, 3, 6, 0, 1, 3, 0, 0})
	f.Add([]byte{2, 4, 0, 5, 3, 1, 4, 0})
	f.Add([]byte{1, 2, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 3, 6, 0, 3, 1, 3, 0, 1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		b := newBox(t)
		pieces := []string{"a", "b", "..", ".", "", b.outside, "../outside", b.secret, "secret", "outside"}
		pick := func(x byte) string { return pieces[int(x)%len(pieces)] }
		types := []byte{tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink}
		var hs []tar.Header
		for len(data) >= 4 && len(hs) < 16 {
			typ := types[int(data[0])%len(types)]
			name := pick(data[1])
			if data[2]%3 != 0 {
				name += "/" + pick(data[2])
			}
			h := tar.Header{Name: name, Typeflag: typ, Mode: 0o755}
			if typ == tar.TypeSymlink || typ == tar.TypeLink {
				h.Linkname = pick(data[3])
				if data[3]%2 == 1 {
					h.Linkname += "/" + pick(data[3]/2)
				}
			}
			if h.Name == "" {
				h.Name = "."
			}
			hs = append(hs, h)
			data = data[4:]
		}
		if len(hs) == 0 {
			return
		}
		buf, err := tarBytes(hs)
		if err != nil {
			return // a header archive/tar will not write
		}
		_ = Unpack(buf, b.root)
		if how := b.escaped(t); how != "" {
			t.Fatalf("%+v: wrote outside the root: %s", hs, how)
		}
	})
}

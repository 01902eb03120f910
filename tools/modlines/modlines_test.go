package modlines

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is one go.mod of the repository: its directory and its path.
type module struct{ dir, path string }

// modules finds every go.mod below root, outside testdata and hidden or
// underscore directories (which the go command ignores too).
func modules(root string) ([]module, error) {
	var mods []module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && skipDir(d.Name()) {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		mp, err := modulePath(p)
		if err != nil {
			return err
		}
		mods = append(mods, module{dir: filepath.Dir(p), path: mp})
		return nil
	})
	return mods, err
}

func skipDir(name string) bool {
	return name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

// modulePath reads the module directive of the go.mod at p.
func modulePath(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			rest = strings.TrimSpace(rest)
			if uq, err := strconv.Unquote(rest); err == nil {
				rest = uq
			}
			return rest, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return "", fmt.Errorf("%s: no module directive", p)
}

// owner is the module an import path (byPath) or a file (by directory)
// belongs to: the longest match, since module paths nest.
func owner(mods []module, match func(module) bool) (module, bool) {
	var best module
	found := false
	for _, m := range mods {
		if match(m) && (!found || len(m.path) > len(best.path)) {
			best, found = m, true
		}
	}
	return best, found
}

func within(p, prefix, sep string) bool {
	return p == prefix || strings.HasPrefix(p, prefix+sep)
}

// violations lists each import of another module's internal/ package by a
// .go file below root, as "file: imports path (internal to module)".
func violations(root string) ([]string, error) {
	mods, err := modules(root)
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%s: no go.mod found", root)
	}
	var out []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		self, ok := owner(mods, func(m module) bool { return within(p, m.dir, string(filepath.Separator)) })
		if !ok {
			return nil // outside every module: not built
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, is := range f.Imports {
			path, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", p, is.Path.Value, err)
			}
			m, ok := owner(mods, func(m module) bool { return within(path, m.path, "/") })
			if !ok || m == self {
				continue
			}
			if slices.Contains(strings.Split(strings.TrimPrefix(path, m.path), "/"), "internal") {
				rel, _ := filepath.Rel(root, p)
				out = append(out, fmt.Sprintf("%s: imports %s, internal to module %s", rel, path, m.path))
			}
		}
		return nil
	})
	return out, err
}

// TestNoInternalAcrossModules walks the whole repository (this module is
// two levels down) and fails for each import of another module's
// internal/ package.
func TestNoInternalAcrossModules(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mods, err := modules(root)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range mods {
		paths = append(paths, m.path)
	}
	for _, want := range []string{"github.com/gofit-dev/gofit", "github.com/gofit-dev/gofit/cmd/gofit", "github.com/gofit-dev/gofit/kube", "github.com/gofit-dev/gofit/tools"} {
		if !slices.Contains(paths, want) {
			t.Fatalf("modules found %q: %s missing (is the test two levels below the repository's root?)", paths, want)
		}
	}
	bad, err := violations(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range bad {
		t.Error(v)
	}
}

// TestViolations checks the walk itself on a made-up tree of two modules.
func TestViolations(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/a\n\ngo 1.24\n")
	write("internal/x/x.go", "package x\n")
	write("use.go", "package a\n\nimport _ \"example.com/a/internal/x\"\n")
	write("sub/go.mod", "module \"example.com/a/sub\"\n")
	write("sub/internal/y/y.go", "package y\n")
	write("sub/ok.go", "package sub\n\nimport _ \"example.com/a/sub/internal/y\"\n")
	write("sub/bad.go", "package sub\n\nimport (\n\t\"fmt\"\n\t_ \"example.com/a/internal/x\"\n)\n\nvar _ = fmt.Sprint\n")
	write("back.go", "package a\n\nimport _ \"example.com/a/sub/internal/y\"\n")
	write("testdata/ignored.go", "package ignored\n\nimport _ \"example.com/a/sub/internal/y\"\n")
	got, err := violations(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"back.go: imports example.com/a/sub/internal/y, internal to module example.com/a/sub",
		filepath.Join("sub", "bad.go") + ": imports example.com/a/internal/x, internal to module example.com/a",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations\n%q\nwant\n%q", got, want)
	}
}

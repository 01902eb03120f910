package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The house's limits (issue 54): a function longer than this, or a type
// with more methods, is doing more than one job. Tests are left out:
// a table of cases is long by nature.
const (
	maxFuncLines   = 150
	maxTypeMethods = 15
)

// TestHouseLimits keeps every module's non-test code inside the limits:
// no function over maxFuncLines lines (its declaration to its closing
// brace, comments inside counted) and no type with over maxTypeMethods
// methods (value and pointer receivers together).
func TestHouseLimits(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	over, err := overLimits(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range over {
		t.Errorf("%s: split it into named steps or smaller types (issue 54's limits: %d lines a function, %d methods a type)", o, maxFuncLines, maxTypeMethods)
	}
}

// TestHouseLimitsCheck: the check finds a long function and a type with
// too many methods, counts generic and pointer receivers, and leaves test
// files and testdata alone.
func TestHouseLimitsCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := "package p\n\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", maxFuncLines-1) + "}\n"
	short := "package p\n\nfunc short() {\n" + strings.Repeat("\t_ = 1\n", maxFuncLines-2) + "}\n"
	var many, generic strings.Builder
	many.WriteString("package p\n\ntype big struct{}\n\n")
	generic.WriteString("package p\n\ntype box[T any] struct{}\n\n")
	for i := range maxTypeMethods + 1 {
		recv := "b big"
		if i%2 == 0 {
			recv = "b *big"
		}
		fmt.Fprintf(&many, "func (%s) m%d() {}\n", recv, i)
		fmt.Fprintf(&generic, "func (b *box[T]) m%d() {}\n", i)
	}
	write("p/long.go", long)
	write("p/short.go", short)
	write("p/big.go", many.String())
	write("p/box.go", generic.String())
	write("p/long_test.go", strings.Replace(long, "long()", "longTest()", 1))
	write("p/testdata/long.go", long)
	over, err := overLimits(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(over, "\n")
	want := strings.Join([]string{
		"func long (p/long.go): 151 lines",
		"type p.big: 16 methods",
		"type p.box: 16 methods",
	}, "\n")
	if got != want {
		t.Errorf("overLimits:\n%s\nwant:\n%s", got, want)
	}
	write("p/bad.go", "package p\n\nfunc {")
	if _, err := overLimits(dir); err == nil || !strings.Contains(err.Error(), "bad.go") {
		t.Errorf("a file that does not parse: error %v, want one naming it", err)
	}
}

// overLimits lists, sorted, what under root is over the limits: Go files
// outside tests, testdata and hidden directories.
func overLimits(root string) ([]string, error) {
	fset := token.NewFileSet()
	methods := map[string]int{}
	var over []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				over = append(over, fmt.Sprintf("func %s (%s): %d lines", fd.Name.Name, filepath.ToSlash(rel), n))
			}
			if fd.Recv != nil && len(fd.Recv.List) == 1 {
				if recv := receiverName(fd.Recv.List[0].Type); recv != "" {
					methods[pkg+"."+recv]++
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for typ, n := range methods {
		if n > maxTypeMethods {
			over = append(over, fmt.Sprintf("type %s: %d methods", typ, n))
		}
	}
	sort.Strings(over)
	return over, nil
}

// receiverName is the type a method's receiver names: T, *T, T[P] or *T[P].
func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

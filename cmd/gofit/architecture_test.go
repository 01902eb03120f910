package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestArchitectureTable keeps docs/architecture.md's "where a change
// goes" honest: every row names one file (or, for manifests and
// measurements, a directory) that exists, and, for a Go file, the function,
// method (Type.Method) or type it names is declared in it. A rename or a
// move that leaves the table behind fails here.
func TestArchitectureTable(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "## Where a change goes")
	if !ok {
		t.Fatal("docs/architecture.md: no section \"Where a change goes\"")
	}
	code := regexp.MustCompile("`([^`]+)`")
	rows := 0
	for i, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "to change" {
			continue
		}
		rows++
		what := strings.TrimSpace(cells[1])
		spans := code.FindAllStringSubmatch(cells[2], -1)
		if len(spans) == 0 {
			t.Errorf("row %q (line %d of the section): the edit column names no file", what, i)
			continue
		}
		path := spans[0][1]
		st, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("row %q: %v", what, err)
			continue
		}
		if st.IsDir() || !strings.HasSuffix(path, ".go") {
			continue
		}
		if len(spans) < 2 {
			t.Errorf("row %q: %s, but no function or type named in it", what, path)
			continue
		}
		name := spans[1][1]
		decls, err := declared(filepath.Join(root, path))
		if err != nil {
			t.Errorf("row %q: %v", what, err)
			continue
		}
		if !decls[name] {
			t.Errorf("row %q: %s declares no %s", what, path, name)
		}
	}
	if rows < 20 {
		t.Errorf("the table has %d rows; the parse found too few", rows)
	}
}

// declared is the top-level names a Go file declares: functions, methods
// as Type.Method, types, constants and variables.
func declared(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) > 0 {
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if ix, ok := typ.(*ast.IndexExpr); ok {
					typ = ix.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			out[name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = true
					}
				}
			}
		}
	}
	return out, nil
}

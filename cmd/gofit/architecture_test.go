package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
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

// TestArchitecturePackageMap keeps docs/architecture.md's package map
// honest against the code: every package `go list` finds in the
// workspace's modules is named in the map's first column (a command,
// package main, may instead go under a row that names a directory above
// it), and every name there is a package that exists. A package added,
// moved or removed without the map fails here.
func TestArchitecturePackageMap(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: no go command to list packages with (the test binary runs without a toolchain, as in make test-v2's VM)")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	mapped, err := packageMap(string(b))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	listed, err := workspacePackages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, miss := range unmapped(mapped, listed) {
		t.Errorf("docs/architecture.md: the package map has no row for %s", miss)
	}
	for name := range mapped {
		if _, ok := listed[name]; !ok {
			t.Errorf("docs/architecture.md: the package map names %s, which go list does not find", name)
		}
	}
}

// TestArchitecturePackageMapCheck: the check finds a package the map
// lacks and does not ask for a command under a mapped directory.
func TestArchitecturePackageMapCheck(t *testing.T) {
	doc := "## Package map\n\n| package | owns | reads from |\n|---|---|---|\n" +
		"| root package `gofit` | x | — |\n| `fit`, `tools/promtest` | x | — |\n\n## Next\n| `cgroup` | not the map | |\n"
	mapped, err := packageMap(doc)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{"": false, "fit": false, "tools/promtest": false, "tools/promtest/plainservice": true, "cgroup": false, "examples/minimal": true}
	got := strings.Join(unmapped(mapped, listed), " ")
	if got != "cgroup examples/minimal" {
		t.Errorf("unmapped = %q, want \"cgroup examples/minimal\"", got)
	}
	if _, err := packageMap("no map here"); err == nil {
		t.Error("a page without the section: no error")
	}
}

// packageMap is the set of packages (paths below the root module, "" for
// the root package) the "Package map" section's first column names.
func packageMap(doc string) (map[string]bool, error) {
	_, after, ok := strings.Cut(doc, "## Package map")
	if !ok {
		return nil, errNoPackageMap
	}
	code := regexp.MustCompile("`([^`]+)`")
	out := map[string]bool{}
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "## ") {
			break
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") || strings.TrimSpace(cells[1]) == "package" {
			continue
		}
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			name := m[1]
			if name == "gofit" && strings.Contains(cells[1], "root package") {
				name = ""
			}
			out[name] = true
		}
	}
	if len(out) == 0 {
		return nil, errNoPackageMap
	}
	return out, nil
}

var errNoPackageMap = errors.New(`no "Package map" section with rows`)

// workspacePackages lists the packages of every module in root's go.work
// as paths below the root module ("" for the root package), each with
// whether it is a command.
func workspacePackages(root string) (map[string]bool, error) {
	const mod = "github.com/gofit-dev/gofit"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Name}}", mod+"/...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"), "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	pkgs := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, name, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("go list: line %q", line)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(path, mod), "/")
		pkgs[rel] = name == "main"
	}
	for _, want := range []string{"", "cmd/gofit", "kube/agent", "tools/promtest"} {
		if _, ok := pkgs[want]; !ok {
			return nil, fmt.Errorf("go list found no %q: not the whole workspace", mod+"/"+want)
		}
	}
	return pkgs, nil
}

// unmapped is the listed packages the map does not name, sorted; a
// command counts as named where a directory above it is.
func unmapped(mapped, listed map[string]bool) []string {
	var out []string
	for p, isCmd := range listed {
		if mapped[p] {
			continue
		}
		covered := false
		for dir := path.Dir(p); isCmd && dir != "." && !covered; dir = path.Dir(dir) {
			covered = mapped[dir]
		}
		if !covered {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

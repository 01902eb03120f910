//go:build !nokube

package main

// The doc check: README.md and docs/**/*.md are read as the code they
// show, so a sample cannot drift from the code without failing a test.
//
//   - A Go block must say where it comes from (<!-- from: PATH --> on the
//     line before the fence) and appear in that file line for line; the
//     file compiles (and its examples run) in make test. Any other block
//     may do the same.
//   - <!-- output-of: gofit ARGS --> : the block is "$ gofit ARGS" and then
//     exactly what gofit prints (stdout, then stderr).
//   - <!-- keys-of: gofit ARGS --> : the block is JSON whose objects have
//     the same keys as gofit's JSON output.
//   - <!-- schema: results.json --> : the block names every field of the
//     lab's results.json and no other.
//   - Shell lines (sh blocks, "$ " lines, inline `gofit ...` and `make ...`)
//     name commands, flags, make targets and variables, packages, test
//     names and kustomize paths that exist.
//   - Inline `--flags` in a command's page are that command's flags.
//   - Go names in inline code (fit.New, fit.Plan.Environ) exist.
//   - YAML and JSON blocks parse (a gofit.dev/plan annotation in YAML is a
//     podplan.Record); gofit_* metric names and GOFIT_* variables are the
//     code's; every relative link points at a file and, with #anchor, at a
//     heading of it; every make target is named somewhere.
//   - README.md stays short; each docs/results page is indexed and dated,
//     with its machine and command.
//
// Run just this with `make docs`; `make docs-update` rewrites the
// output-of blocks. docs/development.md explains the markers to writers.

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/qoslab"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// repoRoot is the repository's root, seen from this package's directory.
const repoRoot = "../.."

// updateDocs rewrites the output-of blocks with what gofit prints now
// (make docs-update); every other check still fails the test.
var updateDocs = flag.Bool("update", false, "rewrite the docs' output-of blocks with gofit's output")

// commandPages maps a manual page to the gofit commands it documents: an
// inline `--flag` there must be a flag of one of them.
var commandPages = map[string][]string{
	"docs/run.md":        {"run", "inspect"},
	"docs/lab.md":        {"lab"},
	"docs/webhook.md":    {"webhook"},
	"docs/node-agent.md": {"node", "node plan", "node reset", "node experiment"},
	"docs/experiment.md": {"experiment report", "experiment guard", "experiment load", "webhook"},
}

// foreignFlags are flags of other programs that a page names on purpose.
var foreignFlags = map[string]string{
	"docs/lab.md auto-gomemlimit":                "Prometheus' own flag, compared with the lab's automemlimit setting",
	"docs/experiment.md metric-labels-allowlist": "kube-state-metrics' flag that keeps the arm labels of gone pods",
}

// readmeMaxLines keeps the README a front door: what, two commands,
// install, quick starts, parts, links.
const readmeMaxLines = 220

// requiredPages are the manual's pages; other engineers' sections live in them.
var requiredPages = []string{
	"README.md", "docs/policy.md", "docs/library.md", "docs/run.md", "docs/lab.md",
	"docs/webhook.md", "docs/node-agent.md", "docs/development.md", "docs/results/README.md",
}

type mdBlock struct {
	line   int    // line of the opening fence, 1-based
	info   string // the fence's info string: go, sh, yaml, json, ...
	marker string // the <!-- ... --> comment on the line before the fence, without the delimiters
	lines  []string
}

type mdPage struct {
	path    string // relative to the repository root, slash-separated
	lines   []string
	changed bool           // lines rewritten by -update
	shift   int            // lines added by -update so far, before the next block
	prose   map[int]string // line number -> text outside code fences
	blocks  []mdBlock
	anchors map[string]bool
}

func readPages(t *testing.T) []*mdPage {
	t.Helper()
	var paths []string
	paths = append(paths, "README.md")
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(repoRoot, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("docs: %v", err)
	}
	var pages []*mdPage
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			t.Fatalf("docs: %v", err)
		}
		pages = append(pages, parsePage(p, string(b)))
	}
	return pages
}

var markerRE = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// parsePage splits markdown into prose lines, fenced blocks (with the
// marker comment just before each) and the anchors of its headings, as
// GitHub renders them.
func parsePage(path, text string) *mdPage {
	pg := &mdPage{path: path, lines: strings.Split(text, "\n"), prose: map[int]string{}, anchors: map[string]bool{}}
	seen := map[string]int{}
	var cur *mdBlock
	for i, l := range pg.lines {
		trim := strings.TrimSpace(l)
		if cur != nil {
			if strings.HasPrefix(trim, "```") {
				pg.blocks = append(pg.blocks, *cur)
				cur = nil
				continue
			}
			cur.lines = append(cur.lines, l)
			continue
		}
		if strings.HasPrefix(trim, "```") {
			cur = &mdBlock{line: i + 1, info: strings.TrimSpace(strings.TrimPrefix(trim, "```"))}
			for j := i - 1; j >= 0; j-- {
				prev := strings.TrimSpace(pg.lines[j])
				if prev == "" {
					continue
				}
				if m := markerRE.FindStringSubmatch(prev); m != nil {
					cur.marker = m[1]
				}
				break
			}
			continue
		}
		pg.prose[i+1] = l
		if strings.HasPrefix(l, "#") {
			h := strings.TrimLeft(l, "#")
			if strings.HasPrefix(h, " ") {
				a := slug(h)
				if n := seen[a]; n > 0 {
					pg.anchors[fmt.Sprintf("%s-%d", a, n)] = true
				} else {
					pg.anchors[a] = true
				}
				seen[a]++
			}
		}
	}
	return pg
}

// slug is GitHub's heading anchor: lower case, punctuation dropped, spaces
// to hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestDocs(t *testing.T) {
	pages := readPages(t)
	byPath := map[string]*mdPage{}
	for _, pg := range pages {
		byPath[pg.path] = pg
	}
	for _, p := range requiredPages {
		if byPath[p] == nil {
			t.Errorf("%s: missing (the README links the manual's pages by these names)", p)
		}
	}
	if pg := byPath["README.md"]; pg != nil && len(pg.lines) > readmeMaxLines {
		t.Errorf("README.md has %d lines: it is the front door (about 200); move reference material to docs/", len(pg.lines))
	}
	fl := newFlagTable(t)
	mk := readMakefile(t)
	api := goAPI{}
	for _, pg := range pages {
		checkIdents(t, pg, api)
		checkLinks(t, pg, byPath)
		checkBlocks(t, pg, fl, mk)
		checkInline(t, pg, fl, mk)
		if pg.changed {
			if err := os.WriteFile(filepath.Join(repoRoot, pg.path), []byte(strings.Join(pg.lines, "\n")), 0o644); err != nil {
				t.Fatalf("%s: %v", pg.path, err)
			}
		}
	}
	checkResultsPages(t, pages, byPath)
	checkNames(t, pages)
	checkMakeTargetsDocumented(t, pages, mk)
}

// ---- links ----

var linkRE = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
var inlineCodeRE = regexp.MustCompile("`[^`]*`")

func checkLinks(t *testing.T, pg *mdPage, byPath map[string]*mdPage) {
	for _, n := range slices.Sorted(maps.Keys(pg.prose)) {
		text := inlineCodeRE.ReplaceAllString(pg.prose[n], "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := pg.path
			if file != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(pg.path), file)))
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", pg.path, n, target, dest)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			tp := byPath[dest]
			if tp == nil {
				t.Errorf("%s:%d: link %q: an anchor into %s, which is not a checked markdown page", pg.path, n, target, dest)
				continue
			}
			if !tp.anchors[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s (it has %s)", pg.path, n, target, dest, anchor, strings.Join(slices.Sorted(maps.Keys(tp.anchors)), ", "))
			}
		}
	}
}

// ---- fenced blocks ----

func checkBlocks(t *testing.T, pg *mdPage, fl *flagTable, mk *makefile) {
	for _, b := range pg.blocks {
		where := fmt.Sprintf("%s:%d", pg.path, b.line)
		kind, arg, _ := strings.Cut(b.marker, ":")
		arg = strings.TrimSpace(arg)
		switch kind {
		case "from":
			checkFrom(t, where, arg, b.lines)
		case "output-of":
			if got, ok := checkOutputOf(t, where, arg, b.lines); !ok && *updateDocs {
				at, out := b.line+pg.shift, strings.Split(got, "\n")
				pg.lines = slices.Concat(pg.lines[:at+1], out, pg.lines[at+len(b.lines):])
				pg.shift += len(out) - (len(b.lines) - 1)
				pg.changed = true
			}
		case "keys-of":
			checkKeysOf(t, where, arg, b.lines)
		case "schema":
			if arg != "results.json" {
				t.Errorf("%s: unknown schema %q", where, arg)
			} else {
				checkResultsSchema(t, where, b.lines)
			}
		case "":
		default:
			if strings.Contains(b.marker, ":") {
				t.Errorf("%s: unknown doc-check marker <!-- %s -->", where, b.marker)
			}
		}
		switch b.info {
		case "go":
			if kind != "from" {
				t.Errorf("%s: a Go sample must come from a file that compiles: put <!-- from: PATH --> before it and keep the code in PATH (an example test or a program)", where)
			}
		case "yaml":
			var v any
			if err := yaml.Unmarshal([]byte(strings.Join(b.lines, "\n")), &v); err != nil {
				t.Errorf("%s: YAML does not parse: %v", where, err)
			}
			checkPlanAnnotations(t, where, v)
		case "json":
			if !json.Valid([]byte(strings.Join(b.lines, "\n"))) {
				var v any
				err := json.Unmarshal([]byte(strings.Join(b.lines, "\n")), &v)
				t.Errorf("%s: JSON does not parse: %v", where, err)
			}
		case "sh", "bash", "shell":
			cwd := ""
			for _, cmd := range joinContinued(b.lines, false) {
				cwd = checkShell(t, fmt.Sprintf("%s:%d", pg.path, b.line+1+cmd.line), cmd.text, cwd, fl, mk, false)
			}
		case "", "console", "text":
			cwd := ""
			for _, cmd := range joinContinued(b.lines, true) {
				cwd = checkShell(t, fmt.Sprintf("%s:%d", pg.path, b.line+1+cmd.line), cmd.text, cwd, fl, mk, false)
			}
		}
	}
}

// checkPlanAnnotations: a gofit.dev/plan annotation shown in YAML is a
// podplan.Record, every field known, every mode one the webhook writes.
func checkPlanAnnotations(t *testing.T, where string, v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			s, ok := x.(string)
			if k != podplan.Annotation || !ok {
				checkPlanAnnotations(t, where, x)
				continue
			}
			dec := json.NewDecoder(strings.NewReader(s))
			dec.DisallowUnknownFields()
			var r podplan.Record
			if err := dec.Decode(&r); err != nil {
				t.Errorf("%s: the %s annotation is not what the webhook writes (podplan.Record): %v", where, k, err)
				continue
			}
			for _, c := range r.Containers {
				if c.Mode != podplan.ModeEnv && c.Mode != podplan.ModeAuto && c.Mode != podplan.ModeOff {
					t.Errorf("%s: %s: container %q has mode %q", where, k, c.Name, c.Mode)
				}
			}
		}
	case []any:
		for _, x := range v {
			checkPlanAnnotations(t, where, x)
		}
	}
}

// checkFrom: the block's lines appear, in order and contiguous, in the
// file (each line compared without its leading and trailing space, so a
// function body's indentation does not matter).
func checkFrom(t *testing.T, where, path string, block []string) {
	if path == "" || strings.Contains(path, "testdata") {
		t.Errorf("%s: <!-- from: %s -->: want a source file that is built and tested", where, path)
		return
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Errorf("%s: <!-- from: %s -->: %v", where, path, err)
		return
	}
	want := trimLines(block)
	have := trimLines(strings.Split(string(b), "\n"))
	if len(want) == 0 {
		t.Errorf("%s: empty block", where)
		return
	}
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(have[i:i+len(want)], want) {
			return
		}
	}
	// Say which line differs, from the longest matching start.
	best, bestAt := 0, -1
	for i := range have {
		n := 0
		for n < len(want) && i+n < len(have) && have[i+n] == want[n] {
			n++
		}
		if n > best {
			best, bestAt = n, i
		}
	}
	if bestAt < 0 {
		t.Errorf("%s: the sample is not in %s (its first line %q is nowhere there): copy it from the file again", where, path, want[0])
		return
	}
	got := "<end of file>"
	if bestAt+best < len(have) {
		got = have[bestAt+best]
	}
	t.Errorf("%s: the sample has drifted from %s:%d: sample line %d is %q, the file has %q", where, path, bestAt+best+1, best+1, want[best], got)
}

func trimLines(ls []string) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = strings.TrimSpace(l)
	}
	return out
}

// gofitArgs splits "gofit ARGS" (a marker's argument) into arguments;
// paths in the repository, written from its root, are made relative to
// this package's directory.
func gofitArgs(t *testing.T, where, s string) []string {
	args := shellSplit(s)
	if len(args) == 0 || args[0] != "gofit" {
		t.Errorf("%s: want a marker argument of the form \"gofit ARGS\", got %q", where, s)
		return nil
	}
	args = args[1:]
	for i, a := range args {
		if strings.Contains(a, "/") && !strings.HasPrefix(a, "/") && !strings.HasPrefix(a, "-") {
			if _, err := os.Stat(filepath.Join(repoRoot, a)); err == nil {
				args[i] = filepath.Join(repoRoot, a) // a path in the repository
			}
		}
	}
	return args
}

// checkOutputOf returns what gofit prints now, and whether the block
// shows it.
func checkOutputOf(t *testing.T, where, cmd string, block []string) (string, bool) {
	args := gofitArgs(t, where, cmd)
	if args == nil {
		return "", true
	}
	if len(block) == 0 || strings.TrimSpace(block[0]) != "$ "+cmd {
		t.Errorf("%s: the block must start with the command it shows, \"$ %s\"", where, cmd)
		return "", true
	}
	var o, e bytes.Buffer
	Main(args, &o, &e)
	got := strings.TrimRight(o.String()+e.String(), "\n")
	want := strings.TrimRight(strings.Join(block[1:], "\n"), "\n")
	if rtrimLines(got) == rtrimLines(want) {
		return got, true
	}
	if *updateDocs {
		t.Logf("%s: `%s`: output rewritten", where, cmd)
	} else {
		t.Errorf("%s: `%s` prints something else now; replace the block's output with the lines below, or run make docs-update:\n%s", where, cmd, got)
	}
	return got, false
}

func rtrimLines(s string) string {
	ls := strings.Split(s, "\n")
	for i, l := range ls {
		ls[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(ls, "\n")
}

func checkKeysOf(t *testing.T, where, cmd string, block []string) {
	args := gofitArgs(t, where, cmd)
	if args == nil {
		return
	}
	var o, e bytes.Buffer
	if code := Main(args, &o, &e); code != 0 {
		t.Errorf("%s: `%s` exited %d: %s", where, cmd, code, e.String())
		return
	}
	var got, doc any
	if err := json.Unmarshal(o.Bytes(), &got); err != nil {
		t.Errorf("%s: `%s` printed no JSON: %v", where, cmd, err)
		return
	}
	if err := json.Unmarshal([]byte(strings.Join(block, "\n")), &doc); err != nil {
		t.Errorf("%s: JSON does not parse: %v", where, err)
		return
	}
	for _, d := range diffKeys("", doc, got) {
		t.Errorf("%s: the sample's keys differ from `%s`: %s", where, cmd, d)
	}
}

// diffKeys compares the object keys of two JSON values, recursively where
// both sides hold an object, and in the first elements of arrays (a null
// on one side is a value not shown).
func diffKeys(path string, doc, got any) []string {
	if da, ok := doc.([]any); ok {
		if ga, ok := got.([]any); ok && len(da) > 0 && len(ga) > 0 {
			return diffKeys(path+"[0]", da[0], ga[0])
		}
		return nil
	}
	dm, ok1 := doc.(map[string]any)
	gm, ok2 := got.(map[string]any)
	if !ok1 || !ok2 {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(gm)) {
		if _, ok := dm[k]; !ok {
			out = append(out, fmt.Sprintf("%s.%s is missing from the sample", path, k))
			continue
		}
		out = append(out, diffKeys(path+"."+k, dm[k], gm[k])...)
	}
	for _, k := range slices.Sorted(maps.Keys(dm)) {
		if _, ok := gm[k]; !ok {
			out = append(out, fmt.Sprintf("%s.%s is in the sample but gofit no longer prints it", path, k))
		}
	}
	return out
}

// ---- results.json schema ----

var schemaWordRE = regexp.MustCompile(`[a-z][a-z0-9_]*`)

// checkResultsSchema: the schema block names every JSON field of
// result.Results, at any depth, and every lower-case word in it outside
// quotes and parentheses is such a field (so a renamed field fails both
// ways). Top-level lines start with the top-level fields, in order.
func checkResultsSchema(t *testing.T, where string, block []string) {
	fields := map[string]bool{}
	jsonFields(reflect.TypeOf(result.Results{}), fields, map[reflect.Type]bool{})
	var top []string
	rt := reflect.TypeOf(result.Results{})
	for i := range rt.NumField() {
		if name := jsonName(rt.Field(i)); name != "" {
			top = append(top, name)
		}
	}
	text := strings.Join(block, "\n")
	text = regexp.MustCompile(`"[^"]*"`).ReplaceAllString(text, " ")
	for {
		// innermost parentheses first: they are prose
		n := regexp.MustCompile(`\([^()]*\)`).ReplaceAllString(text, " ")
		if n == text {
			break
		}
		text = n
	}
	words := map[string]bool{}
	for _, w := range schemaWordRE.FindAllString(text, -1) {
		words[w] = true
	}
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		if !words[f] {
			t.Errorf("%s: results.json field %q (result.Results) is not in the schema", where, f)
		}
	}
	for _, w := range slices.Sorted(maps.Keys(words)) {
		if !fields[w] && !schemaTypeWords[w] {
			t.Errorf("%s: the schema names %q, which results.json does not have (result.Results)", where, w)
		}
	}
	var gotTop []string
	for _, l := range block {
		if l != "" && l[0] != ' ' {
			w := schemaWordRE.FindString(l)
			gotTop = append(gotTop, w)
		}
	}
	if !slices.Equal(gotTop, top) {
		t.Errorf("%s: the schema's top-level fields are %v, results.json has %v", where, gotTop, top)
	}
}

// schemaTypeWords are the schema's own words for types and values.
var schemaTypeWords = map[string]bool{"null": true}

func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return ""
	}
	if name == "" {
		return f.Name
	}
	return name
}

func jsonFields(rt reflect.Type, out map[string]bool, seen map[reflect.Type]bool) {
	for rt.Kind() == reflect.Pointer || rt.Kind() == reflect.Slice || rt.Kind() == reflect.Array || rt.Kind() == reflect.Map {
		rt = rt.Elem()
	}
	if rt.Kind() != reflect.Struct || seen[rt] {
		return
	}
	seen[rt] = true
	for i := range rt.NumField() {
		f := rt.Field(i)
		name := jsonName(f)
		if name == "" {
			continue
		}
		if f.Anonymous && f.Tag.Get("json") == "" {
			jsonFields(f.Type, out, seen)
			continue
		}
		out[name] = true
		jsonFields(f.Type, out, seen)
	}
}

// ---- shell lines ----

type cmdLine struct {
	line int // offset within the block
	text string
}

// joinContinued turns a block into command lines: a trailing backslash or
// an indented line continues the one before. With dollarOnly (output
// samples), only "$ " lines and lines starting with "gofit " are commands.
func joinContinued(lines []string, dollarOnly bool) []cmdLine {
	var out []cmdLine
	cont := false
	for i, l := range lines {
		isCont := cont || (len(out) > 0 && (strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t")) && strings.TrimSpace(l) != "")
		text := strings.TrimSpace(l)
		if dollarOnly && !isCont {
			switch {
			case strings.HasPrefix(text, "$ "):
				text = strings.TrimPrefix(text, "$ ")
			case strings.HasPrefix(text, "gofit "):
			default:
				cont = false
				out = append(out, cmdLine{i, ""}) // a break: what follows is output
				continue
			}
		}
		cont = strings.HasSuffix(text, "\\")
		text = strings.TrimSuffix(text, "\\")
		if isCont && len(out) > 0 && out[len(out)-1].text != "" {
			out[len(out)-1].text += " " + text
			continue
		}
		out = append(out, cmdLine{i, text})
	}
	return out
}

// shellSplit splits a command line into words, honouring quotes, and
// stops at a comment.
func shellSplit(s string) []string {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			if inWord {
				out = append(out, cur.String())
			}
			return out
		case unicode.IsSpace(r):
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// checkShell checks one command line and returns the working directory
// (relative to the repository root) after it.
func checkShell(t *testing.T, where, line, cwd string, fl *flagTable, mk *makefile, inline bool) string {
	words := shellSplit(angleRE.ReplaceAllString(line, "VALUE"))
	// split on && ; | & and redirections
	var cmds [][]string
	var cur []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch w {
		case "&&", "||", ";", "|", "&":
			cmds = append(cmds, cur)
			cur = nil
			continue
		case ">", ">>", "<", "2>":
			i++ // the file
			continue
		}
		cur = append(cur, w)
	}
	cmds = append(cmds, cur)
	cloned := false
	for _, c := range cmds {
		// leading VAR=value, sudo [-E], time
		var env []string
		for len(c) > 0 {
			switch {
			case regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(c[0]):
				env = append(env, c[0])
				c = c[1:]
				continue
			case c[0] == "sudo" || c[0] == "time":
				c = c[1:]
				if len(c) > 0 && c[0] == "-E" {
					c = c[1:]
				}
				continue
			}
			break
		}
		if len(c) == 0 {
			continue
		}
		switch {
		case c[0] == "git" && len(c) > 1 && c[1] == "clone":
			cloned = true
		case c[0] == "cd" && len(c) == 2 && cloned:
			cwd, cloned = "", false // into the clone: the repository's root
		case c[0] == "cd" && len(c) == 2:
			cwd = filepath.Join(cwd, c[1])
			if !isDir(filepath.Join(repoRoot, cwd)) {
				t.Errorf("%s: cd %s: no such directory in the repository", where, c[1])
			}
		case c[0] == "gofit" || c[0] == "./bin/gofit" || c[0] == "bin/gofit" || c[0] == "/gofit":
			fl.check(t, where, c[1:], inline)
		case testBinaries[c[0]] != "":
			checkTestBinary(t, where, testBinaries[c[0]], c[1:])
		case c[0] == "chrt" && len(c) > 3 && testBinaries[c[3]] != "":
			checkTestBinary(t, where, testBinaries[c[3]], c[4:]) // chrt -f PRIO BIN ...
		case c[0] == "go" && len(c) > 1:
			checkGo(t, where, cwd, c[1:], fl, inline)
		case c[0] == "make":
			mk.check(t, where, env, c[1:])
		case c[0] == "kubectl":
			for i := 1; i+1 < len(c); i++ {
				if (c[i] == "-k" || c[i] == "-f") && !strings.Contains(c[i+1], "://") && c[i+1] != "-" {
					if _, err := os.Stat(filepath.Join(repoRoot, cwd, c[i+1])); err != nil {
						t.Errorf("%s: kubectl %s %s: no such file or directory in the repository", where, c[i], c[i+1])
					}
				}
			}
		}
		for _, e := range env {
			name, _, _ := strings.Cut(e, "=")
			if !mk.vars[name] && !strings.Contains(allSource(), `"`+name) {
				t.Errorf("%s: %s is neither a Makefile variable nor read by any Go source", where, name)
			}
		}
	}
	return cwd
}

// angleRE matches a <placeholder>, which may hold words of its own.
var angleRE = regexp.MustCompile(`<[^<>]*>`)

// placeholder tells a synopsis word (CMD, …) from a name to check.
func placeholder(w string) bool {
	if strings.Contains(w, "=") {
		return false // VAR=value
	}
	return strings.Contains(w, "…") || (strings.ToUpper(w) == w && strings.ToLower(w) != w)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// checkGo: `go run ./cmd/gofit ARGS` is gofit; other go commands name
// packages that exist, and -run/-bench patterns that match a function
// in them.
func checkGo(t *testing.T, where, cwd string, args []string, fl *flagTable, inline bool) {
	sub := args[0]
	args = args[1:]
	if sub == "run" {
		for i, a := range args {
			if strings.HasPrefix(a, "-") {
				continue
			}
			if filepath.Clean(filepath.Join(cwd, a)) == "cmd/gofit" {
				fl.check(t, where, args[i+1:], inline)
				return
			}
			if !isDir(filepath.Join(repoRoot, cwd, a)) {
				t.Errorf("%s: go run %s: no such package directory", where, a)
			}
			return
		}
		return
	}
	if sub != "test" && sub != "build" && sub != "vet" {
		return
	}
	var pkgs []string
	var bin string
	patterns := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-run" || a == "-bench":
			if i+1 < len(args) {
				patterns[a] = args[i+1]
				i++
			}
		case a == "-o":
			if i+1 < len(args) {
				bin = args[i+1]
				i++
			}
		case a == "-count" || a == "-timeout" || a == "-benchtime" || a == "-tags" || a == "-p":
			i++
		case strings.HasPrefix(a, "-"):
		case a == "work" || a == "all" || placeholder(a):
		default:
			pkgs = append(pkgs, a)
		}
	}
	for _, p := range pkgs {
		dir := strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
		if dir == "" || dir == "." {
			dir = "."
		}
		if !isDir(filepath.Join(repoRoot, cwd, dir)) {
			t.Errorf("%s: go %s %s: no such package directory", where, sub, p)
			continue
		}
		if strings.HasSuffix(p, "...") {
			continue
		}
		checkTestPatterns(t, where, filepath.Join(cwd, dir), patterns)
		if sub == "test" && bin != "" && len(pkgs) == 1 {
			testBinaries[bin] = filepath.Join(cwd, dir)
		}
	}
}

// testBinaries maps a test binary a page builds (go test -c -o BIN PKG)
// to its package, so that BIN -test.run/-test.bench can be checked.
var testBinaries = map[string]string{}

// checkTestBinary checks the -test.run and -test.bench patterns of a test
// binary built on the page.
func checkTestBinary(t *testing.T, where, dir string, args []string) {
	patterns := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-test.run" || args[i] == "-test.bench" {
			patterns[strings.TrimPrefix(args[i], "-test.")] = args[i+1]
		}
	}
	checkTestPatterns(t, where, dir, patterns)
}

// checkTestPatterns: each -run or -bench pattern (its first level) matches
// a Test or Benchmark function of the package in dir.
func checkTestPatterns(t *testing.T, where, dir string, patterns map[string]string) {
	for flag, pat := range patterns {
		flag = "-" + strings.TrimPrefix(flag, "-")
		first, _, _ := strings.Cut(pat, "/")
		if first == "^$" {
			continue // nothing: the usual way to run only benchmarks
		}
		re, err := regexp.Compile(first)
		if err != nil {
			t.Errorf("%s: go test %s %q: %v", where, flag, pat, err)
			continue
		}
		prefix := "Test"
		if flag == "-bench" {
			prefix = "Benchmark"
		}
		if !packageHasFunc(filepath.Join(repoRoot, dir), prefix, re) {
			t.Errorf("%s: go test %s %q: no %s function in ./%s matches", where, flag, pat, prefix, filepath.ToSlash(dir))
		}
	}
}

var funcRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)

func packageHasFunc(dir, prefix string, re *regexp.Regexp) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, m := range funcRE.FindAllStringSubmatch(string(b), -1) {
			if strings.HasPrefix(m[1], prefix) && re.MatchString(m[1]) {
				return true
			}
		}
	}
	return false
}

// ---- gofit's flags ----

type flagTable struct {
	flags  map[string]map[string]bool // "lab", "node plan" -> flag names
	hidden map[string]bool            // commands that exist but take no -h
}

var usageFlagRE = regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9][\w.-]*)`)

func newFlagTable(t *testing.T) *flagTable {
	ft := &flagTable{flags: map[string]map[string]bool{}, hidden: map[string]bool{
		lab.SampleCommand: true, "node " + qoslab.HogCommand: true,
	}}
	names := []string{"node plan", "node reset", "node experiment", "experiment report", "experiment guard", "experiment load"}
	for _, c := range commands() {
		names = append(names, c.name)
	}
	for _, n := range names {
		if ft.hidden[n] {
			continue
		}
		var o, e bytes.Buffer
		args := append(strings.Fields(n), "-h")
		if code := Main(args, &o, &e); code != 0 {
			t.Fatalf("gofit %s -h: exit %d: %s", n, code, e.String())
		}
		set := map[string]bool{"h": true, "help": true}
		for _, m := range usageFlagRE.FindAllStringSubmatch(o.String()+e.String(), -1) {
			set[m[1]] = true
		}
		ft.flags[n] = set
	}
	return ft
}

// check checks `gofit ARGS`: the command exists and every flag before
// "--" is one of its flags. Square brackets and | of synopses are allowed.
func (ft *flagTable) check(t *testing.T, where string, args []string, inline bool) {
	if len(args) == 0 {
		return
	}
	name := strings.Trim(args[0], "[]")
	rest := args[1:]
	if name == "node" && len(rest) > 0 {
		if sub := strings.Trim(rest[0], "[]"); sub == "plan" || sub == "reset" || sub == "experiment" || sub == qoslab.HogCommand {
			name, rest = "node "+sub, rest[1:]
		} else if strings.Contains(rest[0], "|") {
			rest = rest[1:] // a synopsis: gofit node [plan|experiment]
		}
	}
	if name == "experiment" && len(rest) > 0 {
		if sub := strings.Trim(rest[0], "[]"); sub == "report" || sub == "guard" || sub == "load" {
			name, rest = "experiment "+sub, rest[1:]
		}
	}
	if ft.hidden[name] || placeholder(name) {
		return
	}
	set, ok := ft.flags[name]
	if !ok {
		if inline && !slices.ContainsFunc(rest, func(a string) bool { return strings.HasPrefix(strings.TrimLeft(a, "["), "-") }) {
			return // prose that starts with the word gofit, such as a log message
		}
		t.Errorf("%s: gofit %s: no such command", where, name)
		return
	}
	for _, a := range rest {
		a = strings.TrimLeft(a, "[")
		if a == "--" {
			return
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		f := strings.TrimRight(strings.TrimLeft(a, "-"), "]")
		f, _, _ = strings.Cut(f, "=")
		if !set[f] {
			t.Errorf("%s: gofit %s has no flag --%s (see gofit %s -h)", where, name, f, name)
		}
	}
}

// ---- inline code ----

// inlineCommands start the inline code spans that are checked as commands.
var inlineCommands = []string{"gofit ", "sudo gofit ", "make ", "go run ", "go test ", "go vet ", "go build ", "kubectl "}

var inlineFlagRE = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)`)

func checkInline(t *testing.T, pg *mdPage, fl *flagTable, mk *makefile) {
	cmdsHere := commandPages[pg.path]
	for _, n := range slices.Sorted(maps.Keys(pg.prose)) {
		where := fmt.Sprintf("%s:%d", pg.path, n)
		for _, span := range inlineCodeRE.FindAllString(pg.prose[n], -1) {
			code := strings.Trim(span, "`")
			if slices.ContainsFunc(inlineCommands, func(p string) bool { return strings.HasPrefix(code, p) }) {
				checkShell(t, where, code, "", fl, mk, true)
			}
			m := inlineFlagRE.FindStringSubmatch(code)
			if m == nil || cmdsHere == nil {
				continue
			}
			if _, ok := foreignFlags[pg.path+" "+m[1]]; ok {
				continue
			}
			found := false
			for _, c := range cmdsHere {
				found = found || fl.flags[c][m[1]]
			}
			if !found {
				t.Errorf("%s: `--%s` is not a flag of gofit %s", where, m[1], strings.Join(cmdsHere, ", gofit "))
			}
		}
	}
}

// ---- docs/results ----

var dateRE = regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b`)

// checkResultsPages: each page of dated measurements is listed in
// docs/results/README.md and gives a date, the machine and a command.
func checkResultsPages(t *testing.T, pages []*mdPage, byPath map[string]*mdPage) {
	index := byPath["docs/results/README.md"]
	for _, pg := range pages {
		if !strings.HasPrefix(pg.path, "docs/results/") || pg == index {
			continue
		}
		text := strings.Join(pg.lines, "\n")
		if index != nil && !strings.Contains(strings.Join(index.lines, "\n"), "("+strings.TrimPrefix(pg.path, "docs/results/")+")") {
			t.Errorf("%s: not listed in docs/results/README.md", pg.path)
		}
		if !dateRE.MatchString(text) {
			t.Errorf("%s: measurements without a date (YYYY-MM-DD)", pg.path)
		}
		if !strings.Contains(strings.ToLower(text), "machine") {
			t.Errorf("%s: measurements without the machine they ran on", pg.path)
		}
		hasCmd := len(pg.blocks) > 0 || strings.Contains(text, "Command")
		for _, l := range pg.prose {
			for _, span := range inlineCodeRE.FindAllString(l, -1) {
				code := strings.TrimPrefix(strings.Trim(span, "`"), "time ")
				hasCmd = hasCmd || slices.ContainsFunc(inlineCommands, func(p string) bool { return strings.HasPrefix(code, p) })
			}
		}
		if !hasCmd {
			t.Errorf("%s: measurements without the command that produced them", pg.path)
		}
	}
}

// ---- names: metrics and GOFIT_ variables ----

var (
	metricRE     = regexp.MustCompile(`\bgofit_[a-z0-9_]*[a-z0-9]\b`)
	envRE        = regexp.MustCompile(`\bGOFIT(?:_[A-Z0-9]+)*\b`)
	metricLitRE  = regexp.MustCompile(`"(gofit_[a-z0-9_]+)"`)
	sourceOnce   string
	allOnce      string
	sourceLoaded bool
)

// goSource is every non-test Go file of the repository, concatenated;
// allSource has the tests too.
func goSource() string {
	if !sourceLoaded {
		sourceOnce, allOnce = readSource()
		sourceLoaded = true
	}
	return sourceOnce
}

func allSource() string {
	goSource()
	return allOnce
}

func readSource() (nontest, all string) {
	var b, a strings.Builder
	filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			if c, err := os.ReadFile(p); err == nil {
				a.Write(c)
				if !strings.HasSuffix(p, "_test.go") {
					b.Write(c)
				}
			}
		}
		return nil
	})
	return b.String(), a.String()
}

func checkNames(t *testing.T, pages []*mdPage) {
	inDocs := map[string]bool{}
	for _, pg := range pages {
		for n, l := range pg.lines {
			for _, m := range metricRE.FindAllString(l, -1) {
				inDocs[m] = true
				if !strings.Contains(goSource(), `"`+m+`"`) {
					t.Errorf("%s:%d: metric %s is not defined in the code", pg.path, n+1, m)
				}
			}
			for _, m := range envRE.FindAllString(l, -1) {
				if !strings.Contains(allSource(), `"`+m) {
					t.Errorf("%s:%d: environment variable %s is not read by the code", pg.path, n+1, m)
				}
			}
		}
	}
	for _, m := range metricLitRE.FindAllStringSubmatch(goSource(), -1) {
		if !inDocs[m[1]] {
			t.Errorf("metric %s is served but not documented (docs/library.md, webhook.md or node-agent.md)", m[1])
			inDocs[m[1]] = true
		}
	}
}

// ---- Makefile ----

type makefile struct {
	targets map[string]bool
	vars    map[string]bool
}

var (
	makeTargetRE = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
	makeVarRE    = regexp.MustCompile(`\$\(([A-Z_][A-Z0-9_]*)\)|(?m)^([A-Z_][A-Z0-9_]*)\s*[?:]?=`)
)

func readMakefile(t *testing.T) *makefile {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatalf("Makefile: %v", err)
	}
	mk := &makefile{targets: map[string]bool{}, vars: map[string]bool{}}
	for _, m := range makeTargetRE.FindAllStringSubmatch(string(b), -1) {
		mk.targets[m[1]] = true
	}
	for _, m := range makeVarRE.FindAllStringSubmatch(string(b), -1) {
		mk.vars[m[1]+m[2]] = true
	}
	return mk
}

func (mk *makefile) check(t *testing.T, where string, env, args []string) {
	for _, a := range args {
		if strings.HasPrefix(a, "-") || placeholder(a) {
			continue
		}
		if name, _, ok := strings.Cut(a, "="); ok {
			if !mk.vars[name] {
				t.Errorf("%s: make %s: the Makefile has no variable %s", where, a, name)
			}
			continue
		}
		if !mk.targets[a] {
			t.Errorf("%s: make %s: the Makefile has no target %s", where, a, a)
		}
	}
}

// checkMakeTargetsDocumented: every target is named (`make X`) somewhere.
func checkMakeTargetsDocumented(t *testing.T, pages []*mdPage, mk *makefile) {
	var all strings.Builder
	for _, pg := range pages {
		all.WriteString(strings.Join(pg.lines, "\n"))
	}
	text := all.String()
	for _, tg := range slices.Sorted(maps.Keys(mk.targets)) {
		if !regexp.MustCompile(`make ` + regexp.QuoteMeta(tg) + `\b`).MatchString(text) {
			t.Errorf("Makefile target %s is not documented: name it (`make %s`) in docs/development.md", tg, tg)
		}
	}
}

// ---- helpers ----

// ---- Go names in inline code ----

// goPackages are the package names the docs write as pkg.Name, and where
// each package lives.
var goPackages = map[string]string{
	"gofit": ".", "auto": "auto", "fit": "fit", "metrics": "metrics", "debugvars": "debugvars",
	"cgroup": "cgroup", "manage": "cgroup/manage", "memqos": "kube/memqos", "agent": "kube/agent",
	"admission": "kube/admission", "webhook": "kube/webhook", "podplan": "kube/podplan",
	"lab": "cmd/gofit/internal/lab", "qoslab": "cmd/gofit/internal/qoslab",
}

var identRE = regexp.MustCompile(`\b([a-z]+)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)

// goAPI caches each package's exported names: top-level ones, and the
// fields and methods of each type as "Type.Name".
type goAPI map[string]map[string]bool

func (api goAPI) names(t *testing.T, dir string) map[string]bool {
	if n, ok := api[dir]; ok {
		return n
	}
	n := map[string]bool{}
	api[dir] = n
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, decl := range af.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					n[decl.Name.Name] = true
					continue
				}
				rt := decl.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				if id, ok := rt.(*ast.Ident); ok {
					n[id.Name+"."+decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.ValueSpec:
						for _, id := range spec.Names {
							n[id.Name] = true
						}
					case *ast.TypeSpec:
						n[spec.Name.Name] = true
						if st, ok := spec.Type.(*ast.StructType); ok {
							for _, fld := range st.Fields.List {
								for _, id := range fld.Names {
									n[spec.Name.Name+"."+id.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
	return n
}

// checkIdents: a Go name written pkg.Name or pkg.Type.Member in inline
// code exists in that package.
func checkIdents(t *testing.T, pg *mdPage, api goAPI) {
	for _, n := range slices.Sorted(maps.Keys(pg.prose)) {
		for _, span := range inlineCodeRE.FindAllString(pg.prose[n], -1) {
			for _, m := range identRE.FindAllStringSubmatch(span, -1) {
				dir, ok := goPackages[m[1]]
				if !ok {
					continue
				}
				names := api.names(t, dir)
				if !names[m[2]] {
					t.Errorf("%s:%d: %s.%s: package %s has no exported %s", pg.path, n, m[1], m[2], dir, m[2])
					continue
				}
				if m[3] != "" && !names[m[2]+"."+m[3]] {
					t.Errorf("%s:%d: %s.%s.%s: %s has no field or method %s", pg.path, n, m[1], m[2], m[3], m[2], m[3])
				}
			}
		}
	}
}

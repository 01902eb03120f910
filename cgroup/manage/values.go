package manage

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gofit-dev/gofit/cgroup/fastread"
)

// Unlimited is the Value meaning "no limit": written as "max" on cgroup v2
// and -1 on v1.
const Unlimited int64 = math.MaxInt64

// ErrOutOfRange marks a memory value the Writer refused: negative, above
// its MaxMemory, or memory.min/low/high of one group out of order.
var ErrOutOfRange = errors.New("memory value out of range")

// memoryBytes are the files that hold a byte count, where a negative value
// can only be an arithmetic error (memory.wmark_min_adj, say, is signed).
var memoryBytes = map[string]bool{
	"memory.min": true, "memory.low": true, "memory.high": true, "memory.max": true,
	"memory.swap.max": true, "memory.limit_in_bytes": true, "memory.soft_limit_in_bytes": true,
	"memory.memsw.limit_in_bytes": true,
}

// Value is one cgroup file's desired content. Level orders the writes:
// 0 is the top of the tree (kubepods), larger is deeper.
type Value struct {
	Dir    string // the cgroup's directory
	File   string // e.g. "memory.low"
	Value  int64  // a number, or Unlimited
	Level  int
	Reason string
}

// Path is the file's full path.
func (v Value) Path() string { return filepath.Join(v.Dir, v.File) }

// Change is a Value that differed from the file, and what the file held.
type Change struct {
	Value
	Old int64
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	Changed   []Change // written (or, in a dry run, to be written), in write order
	Unchanged int
	Missing   []Value // the file is absent although its cgroup exists
	Gone      []Value // the cgroup itself is absent (a pod went away)
	Errors    []error
}

// Writer writes cgroup values: only those that differ from the file,
// raised values from the top level down and lowered ones from the bottom
// up, so no level is ever below its children. It logs a file missing on
// this kernel (memory.wmark_ratio on upstream, say) once per file name for
// its lifetime, not once per cgroup and interval.
type Writer struct {
	V1     bool // format Unlimited as -1
	DryRun bool // read and compare, write nothing
	// MaxMemory, when positive, bounds every memory byte value (memory.min,
	// low, high, max, soft limit; Unlimited aside): the node agent sets it
	// to the node's allocatable memory. Negative byte values are refused
	// whatever it is.
	MaxMemory int64
	Log       *slog.Logger

	mu      sync.Mutex
	missing map[string]bool

	// cache is Apply's and Read's working state, kept between calls so
	// that a pass over the same cgroups allocates nothing (one Apply or
	// Read at a time).
	cacheMu sync.Mutex
	cache   writerCache
}

// writerCache keeps what Apply rebuilds on every call otherwise.
type writerCache struct {
	// paths are the files read, with their NUL-terminated bytes; an
	// entry not used by the last Apply is dropped at the end of the next.
	paths map[pathKey]keptPath
	pass  uint64
	// refuse's maps, emptied on every call.
	refused, badDirs map[string]bool
	groups           map[string]order
}

type pathKey struct{ dir, file string }

type keptPath struct {
	p    fastread.Path
	pass uint64
}

// order is where memory.min, low and high of one group are in the values
// (-1: absent).
type order struct{ min, low, high int }

// NewWriter returns a Writer that logs to log (nil: silent).
func NewWriter(log *slog.Logger, v1 bool) *Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{V1: v1, Log: log, missing: map[string]bool{}}
}

// Apply brings the files to vals. It goes on past errors and reports them.
// Memory values out of range (see MaxMemory), and all of memory.min, low
// and high of a group whose values are out of order, are refused with
// ErrOutOfRange and not written.
func (w *Writer) Apply(vals []Value) ApplyResult {
	w.cacheMu.Lock()
	defer w.cacheMu.Unlock()
	defer w.cache.sweep()
	var res ApplyResult
	var raise, lower []Change
	refused := w.refuse(vals, &res)
	for _, v := range vals {
		if len(refused) > 0 && refused[v.Path()] { // no path built when nothing was refused
			continue
		}
		cur, err := w.read(v.Dir, v.File)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if _, derr := os.Stat(v.Dir); derr != nil {
				res.Gone = append(res.Gone, v)
				continue
			}
			res.Missing = append(res.Missing, v)
			w.noteMissing(v)
			continue
		case err != nil:
			res.Errors = append(res.Errors, err)
			continue
		case same(cur, v.Value):
			res.Unchanged++
			continue
		}
		c := Change{Value: v, Old: cur}
		if v.Value > cur {
			raise = append(raise, c)
		} else {
			lower = append(lower, c)
		}
	}
	slices.SortStableFunc(raise, func(a, b Change) int { return a.Level - b.Level })
	slices.SortStableFunc(lower, func(a, b Change) int { return b.Level - a.Level })
	for _, c := range append(raise, lower...) {
		if !w.DryRun {
			if err := writeValue(c.Path(), w.format(c.Value.Value)); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					res.Gone = append(res.Gone, c.Value) // removed since it was read
					continue
				}
				res.Errors = append(res.Errors, err)
				continue
			}
		}
		res.Changed = append(res.Changed, c)
	}
	return res
}

// refuse checks the memory values of vals and returns the paths not to
// write, recording an error for each reason. One bad value holds back the
// memory.min, low and high of its whole group: they were planned together.
// Its maps are the Writer's, emptied on each call: a pass with nothing to
// refuse allocates nothing.
func (w *Writer) refuse(vals []Value, res *ApplyResult) map[string]bool {
	c := &w.cache
	if c.refused == nil {
		c.refused, c.badDirs, c.groups = map[string]bool{}, map[string]bool{}, map[string]order{}
	}
	clear(c.refused)
	clear(c.badDirs)
	clear(c.groups)
	out, badDirs, groups := c.refused, c.badDirs, c.groups
	for i := range vals {
		v := &vals[i]
		if !memoryBytes[v.File] || v.Value == Unlimited {
			continue
		}
		if v.Value < 0 || (w.MaxMemory > 0 && v.Value > w.MaxMemory) {
			res.Errors = append(res.Errors, fmt.Errorf("%s: %d refused, outside [0, %s]: %w", v.Path(), v.Value, FormatValue(w.bound()), ErrOutOfRange))
			out[v.Path()] = true
			badDirs[v.Dir] = true
			continue
		}
		g, ok := groups[v.Dir]
		if !ok {
			g = order{-1, -1, -1}
		}
		switch v.File {
		case "memory.min":
			g.min = i
		case "memory.low":
			g.low = i
		case "memory.high":
			g.high = i
		}
		groups[v.Dir] = g
	}
	at := func(i int) *Value {
		if i < 0 {
			return nil
		}
		return &vals[i]
	}
	// Only the groups to hold back are sorted, for errors in a stable order.
	var held []string
	for d, g := range groups {
		if badDirs[d] || outOfOrder(at(g.min), at(g.low), at(g.high)) != nil {
			held = append(held, d)
		}
	}
	sort.Strings(held)
	for _, d := range held {
		g := groups[d]
		mn, lo, hi := at(g.min), at(g.low), at(g.high)
		if !badDirs[d] {
			bad := outOfOrder(mn, lo, hi)
			res.Errors = append(res.Errors, fmt.Errorf("%s: %d refused, memory.min ≤ memory.low ≤ memory.high does not hold for %s: %w", bad.Path(), bad.Value, d, ErrOutOfRange))
		}
		for _, v := range []*Value{mn, lo, hi} {
			if v != nil {
				out[v.Path()] = true
			}
		}
	}
	return out
}

// outOfOrder is the value that breaks memory.min ≤ memory.low ≤
// memory.high in one group, or nil.
func outOfOrder(mn, lo, hi *Value) *Value {
	switch {
	case mn != nil && lo != nil && mn.Value > lo.Value:
		return mn
	case lo != nil && hi != nil && lo.Value > hi.Value:
		return lo
	case mn != nil && hi != nil && mn.Value > hi.Value:
		return mn
	}
	return nil
}

func (w *Writer) bound() int64 {
	if w.MaxMemory > 0 {
		return w.MaxMemory
	}
	return Unlimited
}

// MissingFiles lists the file names found missing so far, sorted.
func (w *Writer) MissingFiles() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for f := range w.missing {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

func (w *Writer) noteMissing(v Value) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.missing == nil {
		w.missing = map[string]bool{}
	}
	if w.missing[v.File] {
		return
	}
	w.missing[v.File] = true
	if w.Log != nil {
		w.Log.Info("cgroup file not on this kernel; skipping it everywhere", "file", v.File, "first_seen", v.Path())
	}
}

// FormatValue prints a value as cgroup v2 takes it and people read it:
// decimal bytes, or "max" for Unlimited.
func FormatValue(v int64) string {
	if v == Unlimited {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

// format is what the Writer writes: v1 is told "unlimited" as -1.
func (w *Writer) format(v int64) string {
	if v == Unlimited && w.V1 {
		return "-1"
	}
	return FormatValue(v)
}

// Read is ReadValue(filepath.Join(dir, file)) through the Writer's kept
// paths: reading the same files pass after pass allocates nothing.
func (w *Writer) Read(dir, file string) (int64, error) {
	w.cacheMu.Lock()
	defer w.cacheMu.Unlock()
	return w.read(dir, file)
}

// read reads a value the fast way (fastread, a kept path, a buffer on the
// stack), and anything unusual (a missing file, an error, a value that
// does not parse) again through ReadValue for its usual answer.
func (w *Writer) read(dir, file string) (int64, error) {
	var buf [128]byte
	if n, ok := fastread.ReadSmall(w.cache.path(dir, file), buf[:]); ok {
		if v, ok := parseValue(buf[:n]); ok {
			return v, nil
		}
	}
	return ReadValue(filepath.Join(dir, file))
}

// path is the kept path of dir/file, marked as used by this pass.
func (c *writerCache) path(dir, file string) fastread.Path {
	if c.paths == nil {
		c.paths = map[pathKey]keptPath{}
	}
	k := pathKey{dir, file}
	e, ok := c.paths[k]
	if !ok {
		e.p = fastread.New(filepath.Join(dir, file))
	}
	if !ok || e.pass != c.pass {
		e.pass = c.pass
		c.paths[k] = e
	}
	return e.p
}

// sweep ends a pass: the paths it did not use are dropped.
func (c *writerCache) sweep() {
	for k, e := range c.paths {
		if e.pass != c.pass {
			delete(c.paths, k)
		}
	}
	c.pass++
}

// parseValue is ParseValue's common case without a string: optional
// blanks around "max" or a decimal. ok is false for anything else.
func parseValue(b []byte) (int64, bool) {
	for len(b) > 0 && isBlank(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && isBlank(b[0]) {
		b = b[1:]
	}
	if string(b) == "max" { // no allocation: a comparison
		return Unlimited, true
	}
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 { // 18 digits cannot overflow; longer ones take ParseValue
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// ReadValue reads a cgroup number file with a bounded read and parses it
// (ParseValue). A missing file is an error wrapping fs.ErrNotExist.
func ReadValue(file string) (int64, error) {
	s, ok, err := readSmall(file)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, &fs.PathError{Op: "read", Path: file, Err: fs.ErrNotExist}
	}
	return ParseValue(file, s)
}

// ParseValue parses a cgroup number file: a decimal (possibly negative,
// as memory.wmark_min_adj is), "max", or v1's page-rounded "unlimited"
// (9223372036854771712), which reads back as Unlimited.
func ParseValue(file, s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return Unlimited, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number or max", file, s)
	}
	return n, nil
}

// same reports whether the file's value already is the desired one. v1
// rounds "unlimited" down to a page, so anything above 2^62 is unlimited;
// -1, how v1 is told "unlimited", counts too where a file echoes it back.
// Same reports whether a file holding cur already holds want: Unlimited
// reads back as the kernel's page-rounded maximum ("max" on v2, about
// 2^63 on v1) or -1.
func Same(cur, want int64) bool { return same(cur, want) }

// Refused reports whether the last Apply held v back: outside the range,
// or in a min/low/high group out of order (whose error names only the
// value that broke it).
func (w *Writer) Refused(v Value) bool { return w.cache.refused[v.Path()] }

func same(cur, want int64) bool {
	if want == Unlimited {
		return cur >= 1<<62 || cur == -1
	}
	return cur == want
}

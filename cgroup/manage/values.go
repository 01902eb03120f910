package manage

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
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
}

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
	var res ApplyResult
	var raise, lower []Change
	refused := w.refuse(vals, &res)
	for _, v := range vals {
		if len(refused) > 0 && refused[v.Path()] { // no path built when nothing was refused
			continue
		}
		cur, err := w.read(v)
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
	sort.SliceStable(raise, func(i, j int) bool { return raise[i].Level < raise[j].Level })
	sort.SliceStable(lower, func(i, j int) bool { return lower[i].Level > lower[j].Level })
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
func (w *Writer) refuse(vals []Value, res *ApplyResult) map[string]bool {
	out := map[string]bool{}
	badDirs := map[string]bool{}
	type order struct{ min, low, high *Value }
	groups := map[string]*order{}
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
		g := groups[v.Dir]
		if g == nil {
			g = &order{}
			groups[v.Dir] = g
		}
		switch v.File {
		case "memory.min":
			g.min = v
		case "memory.low":
			g.low = v
		case "memory.high":
			g.high = v
		}
	}
	dirs := make([]string, 0, len(groups))
	for d := range groups {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		g := groups[d]
		if badDirs[d] {
			for _, v := range []*Value{g.min, g.low, g.high} {
				if v != nil {
					out[v.Path()] = true
				}
			}
			continue
		}
		var bad *Value
		switch {
		case g.min != nil && g.low != nil && g.min.Value > g.low.Value:
			bad = g.min
		case g.low != nil && g.high != nil && g.low.Value > g.high.Value:
			bad = g.low
		case g.min != nil && g.high != nil && g.min.Value > g.high.Value:
			bad = g.min
		}
		if bad == nil {
			continue
		}
		res.Errors = append(res.Errors, fmt.Errorf("%s: %d refused, memory.min ≤ memory.low ≤ memory.high does not hold for %s: %w", bad.Path(), bad.Value, d, ErrOutOfRange))
		for _, v := range []*Value{g.min, g.low, g.high} {
			if v != nil {
				out[v.Path()] = true
			}
		}
	}
	return out
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

func (w *Writer) read(v Value) (int64, error) { return ReadValue(v.Path()) }

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
func same(cur, want int64) bool {
	if want == Unlimited {
		return cur >= 1<<62 || cur == -1
	}
	return cur == want
}

package cgroup

// Pure parsers for the kernel's cgroup file formats. Each takes the file's
// text and returns values or a *ParseError; callers fill in the file name.
//
// Formats (Documentation/admin-guide/cgroup-v2.rst, cgroup-v1/*.rst):
//
//	cpu.max                 "$MAX $PERIOD"      e.g. "max 100000", "50000 100000"
//	cpu.cfs_quota_us        "-1" or microseconds
//	memory.max, memory.high "max" or bytes
//	memory.limit_in_bytes   bytes; 9223372036854771712 (PAGE_COUNTER_MAX) means unlimited
//	cpuset.cpus             "0-3,8,10-11" (may be empty)
//	flat keyed files        "key value" per line (cpu.stat, memory.stat, memory.events)
//	pressure files          "some avg10=0.00 avg60=0.00 avg300=0.00 total=0"

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseError reports a malformed line of a cgroup or proc file.
type ParseError struct {
	File string // path of the file, as opened
	Line int    // 1-based line number
	Text string // the offending text
	Err  error
}

func (e *ParseError) Error() string {
	file := e.File
	if file == "" {
		file = "<input>"
	}
	return fmt.Sprintf("%s:%d: malformed %q: %v", DisplayPath(file), e.Line, e.Text, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

func lineErr(line int, text string, err error) *ParseError {
	if len(text) > 120 {
		text = text[:120] + "..."
	}
	return &ParseError{Line: line, Text: text, Err: err}
}

// withFile names the file in a parse error returned by a pure parser.
func withFile(err error, file string) error {
	var pe *ParseError
	if errors.As(err, &pe) {
		pe.File = file
		return pe
	}
	if err != nil {
		return fmt.Errorf("%s: %w", DisplayPath(file), err)
	}
	return nil
}

// unlimitedV1 is the smallest value treated as "no limit" in v1 files. The
// kernel reports PAGE_COUNTER_MAX*PAGE_SIZE, which depends on the page size,
// so anything at or above 2^62 counts.
const unlimitedV1 = int64(1) << 62

// maxMicros is the largest microsecond count that fits a time.Duration.
const maxMicros = math.MaxInt64 / int64(time.Microsecond)

// parseCPUMax parses v2 cpu.max. quota is 0 when it is "max". Numbers too
// large for a time.Duration are errors, as in v1's files, not wrapped values.
func parseCPUMax(s string) (quota, period time.Duration, err error) {
	text := strings.TrimSpace(s)
	f := strings.Fields(text)
	if len(f) < 1 || len(f) > 2 {
		return 0, 0, lineErr(1, text, errors.New("want \"$MAX $PERIOD\""))
	}
	period = 100 * time.Millisecond
	if len(f) == 2 {
		p, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || p <= 0 || p > maxMicros {
			return 0, 0, lineErr(1, text, fmt.Errorf("period is not an integer between 1 and %d microseconds", maxMicros))
		}
		period = time.Duration(p) * time.Microsecond
	}
	if f[0] == "max" {
		return 0, period, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q < 0 || q > maxMicros {
		return 0, 0, lineErr(1, text, fmt.Errorf("quota is neither \"max\" nor an integer between 0 and %d microseconds", maxMicros))
	}
	return time.Duration(q) * time.Microsecond, period, nil
}

// parseV1Quota parses cpu.cfs_quota_us or cpu.cfs_period_us (microseconds,
// -1 meaning none). It returns 0 for none.
func parseV1Micros(s string) (time.Duration, error) {
	text := strings.TrimSpace(s)
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, lineErr(1, text, errors.New("not an integer"))
	}
	if v < 0 {
		if v != -1 {
			return 0, lineErr(1, text, errors.New("negative value other than -1"))
		}
		return 0, nil
	}
	if v > maxMicros {
		return 0, lineErr(1, text, errors.New("out of range"))
	}
	return time.Duration(v) * time.Microsecond, nil
}

// parseBytesLimit parses memory.max, memory.high (v2) or
// memory.limit_in_bytes (v1). It returns 0 for no limit: "max", -1, or the
// v1 unlimited sentinel.
func parseBytesLimit(s string) (int64, error) {
	text := strings.TrimSpace(s)
	if text == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		if u, uerr := strconv.ParseUint(text, 10, 64); uerr == nil && u > math.MaxInt64 {
			return 0, nil // larger than any real limit
		}
		return 0, lineErr(1, text, errors.New("neither \"max\" nor an integer"))
	}
	if v == -1 || v >= unlimitedV1 {
		return 0, nil
	}
	if v < 0 {
		return 0, lineErr(1, text, errors.New("negative limit"))
	}
	return v, nil
}

// parseUint parses a single-number file such as memory.current or cpuacct.usage.
func parseUint(s string) (uint64, error) {
	text := strings.TrimSpace(s)
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, lineErr(1, text, errors.New("not an unsigned integer"))
	}
	return v, nil
}

// parseBounded parses one unsigned integer between lo and hi, such as
// cpu.shares (2..262144) or cpu.weight (1..10000).
func parseBounded(s string, lo, hi uint64) (uint64, error) {
	text := strings.TrimSpace(s)
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil || v < lo || v > hi {
		return 0, lineErr(1, text, fmt.Errorf("not an integer between %d and %d", lo, hi))
	}
	return v, nil
}

// parseCPUSet counts the CPUs in a list such as "0-3,8,10-11". An empty list
// returns 0. A CPU named twice ("0-3,2-3") counts once.
func parseCPUSet(s string) (int, error) {
	text := strings.TrimSpace(s)
	if text == "" {
		return 0, nil
	}
	// CPU numbers fit 16 bits (checked below): a 8 KiB bitmap holds them all.
	var seen [(1 << 16) / 64]uint64
	n := 0
	for _, part := range strings.Split(text, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return 0, lineErr(1, text, fmt.Errorf("bad CPU number %q", lo))
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 16); err != nil {
				return 0, lineErr(1, text, fmt.Errorf("bad CPU number %q", hi))
			}
			if b < a {
				return 0, lineErr(1, text, fmt.Errorf("range %q runs backwards", part))
			}
		}
		for cpu := a; cpu <= b; cpu++ {
			if w, bit := cpu/64, uint64(1)<<(cpu%64); seen[w]&bit == 0 {
				seen[w] |= bit
				n++
			}
		}
	}
	return n, nil
}

// parseFlatKeyed calls fn for each "key value" line of a flat keyed file
// (cpu.stat, memory.stat, memory.events, memory.oom_control). Values must be
// unsigned integers; blank lines are skipped.
func parseFlatKeyed(s string, fn func(key string, v uint64)) error {
	return eachLine(s, func(line int, l string) error {
		key, val, ok := strings.Cut(l, " ")
		if !ok || key == "" {
			return lineErr(line, l, errors.New("want \"key value\""))
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			// Values are unsigned; a negative or textual value is malformed.
			// Large v1 sentinels fit in uint64.
			return lineErr(line, l, errors.New("value is not an unsigned integer"))
		}
		fn(key, v)
		return nil
	})
}

// eachLine calls fn with each non-blank line of s and its 1-based number,
// stopping at the first error.
func eachLine(s string, fn func(line int, text string) error) error {
	n := 0
	for len(s) > 0 {
		var l string
		l, s, _ = strings.Cut(s, "\n")
		n++
		if strings.TrimSpace(l) == "" {
			continue
		}
		if err := fn(n, l); err != nil {
			return err
		}
	}
	return nil
}

// PSILine is one line of a pressure file.
type PSILine struct {
	Avg10, Avg60, Avg300 float64       // percent of wall time stalled
	Total                time.Duration // cumulative stall time
}

// PSI is the content of cpu.pressure or memory.pressure.
type PSI struct {
	Some PSILine
	Full PSILine
}

// parsePSI parses a pressure file. Unknown keys are ignored.
func parsePSI(s string) (PSI, error) {
	var p PSI
	err := eachLine(s, func(line int, l string) error {
		f := strings.Fields(l)
		var dst *PSILine
		switch f[0] {
		case "some":
			dst = &p.Some
		case "full":
			dst = &p.Full
		default:
			return lineErr(line, l, errors.New("want \"some\" or \"full\""))
		}
		for _, kv := range f[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return lineErr(line, l, fmt.Errorf("field %q is not key=value", kv))
			}
			switch k {
			case "avg10", "avg60", "avg300":
				x, err := strconv.ParseFloat(v, 64)
				if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
					return lineErr(line, l, fmt.Errorf("%s is not a percentage", k))
				}
				switch k {
				case "avg10":
					dst.Avg10 = x
				case "avg60":
					dst.Avg60 = x
				default:
					dst.Avg300 = x
				}
			case "total":
				x, err := strconv.ParseUint(v, 10, 63)
				if err != nil {
					return lineErr(line, l, errors.New("total is not an integer"))
				}
				dst.Total = time.Duration(x) * time.Microsecond
			}
		}
		return nil
	})
	if err != nil {
		return PSI{}, err
	}
	return p, nil
}

var errNonPositivePeriod = errors.New("period must be positive")

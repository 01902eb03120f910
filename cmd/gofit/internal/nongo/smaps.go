// Package nongo measures, from outside a Go process and with nothing of
// gofit linked into it, the memory it holds that GOMEMLIMIT does not bound:
// anonymous memory outside the Go runtime (cgo's malloc, off-heap caches
// mapped with mmap, foreign thread stacks), the hot part of its file pages
// and the kernel memory of its cgroup, in the parts fit.NonGo knows.
//
// The Go runtime's share is found in /proc/PID/smaps (proc(5)), one
// mapping per entry:
//
//	15a2e800000-15a32c00000 rw-p 00000000 00:00 0
//	Size:              69632 kB
//	Rss:               62200 kB
//	Referenced:        62200 kB
//	Anonymous:         62200 kB
//	...
//	VmFlags: rd wr mr mw me ac sd
//
// by the evidence the process leaves there (Split), or from the runtime's
// own figures where the service serves them (ParseMetrics, ParseExpvar).
// Parsers take bytes; Read is the thin shell over /proc.
package nongo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Mapping is one entry of /proc/PID/smaps; sizes in bytes.
type Mapping struct {
	Start, End uint64
	Perms      string // "rw-p"
	Inode      uint64 // 0 for anonymous memory
	// Name is the pathname column: a file, "[heap]", "[stack]", a name a
	// process gave anonymous memory ("[anon: Go: heap]"), or "".
	Name       string
	Rss        int64
	Referenced int64
	Anonymous  int64
	Swap       int64
}

// Size is the mapping's virtual size.
func (m Mapping) Size() uint64 { return m.End - m.Start }

// fileBacked says whether the mapping maps a file (the binary, a shared
// library, a mapped file) rather than anonymous memory.
func (m Mapping) fileBacked() bool {
	return m.Inode != 0 && !strings.HasPrefix(m.Name, "[")
}

// maxKB bounds a size field (2^44 kB = 16 PiB) so sums cannot overflow.
const maxKB = 1 << 44

// ParseSmaps reads /proc/PID/smaps. A header line starts each mapping;
// the size fields it uses (Rss, Referenced, Anonymous, Swap) must be
// "N kB"; other fields are ignored. A malformed line is an error naming
// its number.
func ParseSmaps(s string) ([]Mapping, error) {
	var out []Mapping
	for i, line := range strings.Split(s, "\n") {
		if line == "" {
			continue
		}
		key, rest, ok := strings.Cut(line, ":")
		if ok && !strings.Contains(key, " ") && !strings.Contains(key, "-") {
			// A field line: "Rss:   2688 kB" or "VmFlags: rd wr".
			var dst *int64
			if len(out) > 0 {
				m := &out[len(out)-1]
				switch key {
				case "Rss":
					dst = &m.Rss
				case "Referenced":
					dst = &m.Referenced
				case "Anonymous":
					dst = &m.Anonymous
				case "Swap":
					dst = &m.Swap
				}
			} else {
				return nil, fmt.Errorf("line %d: field %q before any mapping", i+1, key)
			}
			if dst == nil {
				continue
			}
			num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
			kb, err := strconv.ParseInt(num, 10, 64)
			if err != nil || kb < 0 || kb > maxKB || strings.TrimSpace(unit) != "kB" {
				return nil, fmt.Errorf("line %d: malformed %q", i+1, line)
			}
			*dst = kb << 10
			continue
		}
		m, err := parseHeader(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, errors.New("no mappings")
	}
	return out, nil
}

// parseHeader reads "start-end perms offset dev inode [name]".
func parseHeader(line string) (Mapping, error) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return Mapping{}, fmt.Errorf("malformed mapping %q: want \"start-end perms offset dev inode [name]\"", line)
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	inode, err3 := strconv.ParseUint(f[4], 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil || end < start || len(f[1]) != 4 {
		return Mapping{}, fmt.Errorf("malformed mapping %q", line)
	}
	m := Mapping{Start: start, End: end, Perms: f[1], Inode: inode}
	if len(f) > 5 {
		// The name may hold spaces ("[anon: Go: heap]", a file path).
		m.Name = strings.Join(f[5:], " ")
	}
	return m, nil
}

package nongo

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Runtime is what a Go runtime reports of itself, where a service serves
// it: the memory it has mapped and not released, and how many collections
// it has run.
type Runtime struct {
	MappedBytes int64 // Sys − HeapReleased
	NumGC       int64 // -1: unknown
}

// ParseMetrics reads Prometheus text exposition for the Go collector's
// figures: go_memstats_sys_bytes less go_memstats_heap_released_bytes, or
// go_memory_classes_total_bytes less go_memory_classes_heap_released_bytes
// (client_golang's runtime/metrics names), and the number of collections
// from go_gc_duration_seconds_count. It returns an error when neither pair
// is there.
func ParseMetrics(text string) (Runtime, error) {
	vals := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || strings.Contains(f[0], "{") {
			continue
		}
		switch f[0] {
		case "go_memstats_sys_bytes", "go_memstats_heap_released_bytes",
			"go_memory_classes_total_bytes", "go_memory_classes_heap_released_bytes",
			"go_gc_duration_seconds_count":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil || v < 0 || v > 1<<60 {
				return Runtime{}, fmt.Errorf("malformed %q", line)
			}
			vals[f[0]] = v
		}
	}
	r := Runtime{NumGC: -1}
	if n, ok := vals["go_gc_duration_seconds_count"]; ok {
		r.NumGC = int64(n)
	}
	for _, pair := range [][2]string{{"go_memory_classes_total_bytes", "go_memory_classes_heap_released_bytes"}, {"go_memstats_sys_bytes", "go_memstats_heap_released_bytes"}} {
		total, ok1 := vals[pair[0]]
		released, ok2 := vals[pair[1]]
		if ok1 && ok2 {
			r.MappedBytes = int64(max(total-released, 0))
			return r, nil
		}
	}
	return Runtime{}, errors.New("no go_memstats_sys_bytes and go_memstats_heap_released_bytes (nor go_memory_classes_*)")
}

// ParseExpvar reads expvar's /debug/vars for the runtime's memstats.
func ParseExpvar(b []byte) (Runtime, error) {
	var v struct {
		Memstats *struct {
			Sys          *uint64
			HeapReleased *uint64
			NumGC        uint32
		} `json:"memstats"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return Runtime{}, err
	}
	if v.Memstats == nil || v.Memstats.Sys == nil || v.Memstats.HeapReleased == nil {
		return Runtime{}, errors.New("no memstats with Sys and HeapReleased")
	}
	sys, rel := min(*v.Memstats.Sys, 1<<60), min(*v.Memstats.HeapReleased, 1<<60)
	return Runtime{MappedBytes: int64(max(sys, rel) - rel), NumGC: int64(v.Memstats.NumGC)}, nil
}

// GCTrace is what GODEBUG=gctrace=1 lines on a process's stderr say:
//
//	gc 7 @0.612s 3%: 0.020+1.2+0.031 ms clock, ..., 30->31->16 MB, 33 MB goal, 0 MB stacks, 0 MB globals, 2 P
type GCTrace struct {
	// Cycles is the highest cycle number seen: the count since the
	// process started, even when only the output's tail was kept.
	Cycles       int
	LastLiveByte int64 // the heap live after the last cycle's mark
	LastGoalByte int64
}

// ParseGCTrace reads gctrace lines out of a process's output; other lines
// are ignored.
func ParseGCTrace(out string) GCTrace {
	var g GCTrace
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "gc ") || !strings.Contains(line, " MB goal") {
			continue
		}
		if f := strings.Fields(line); len(f) > 1 {
			if n, err := strconv.Atoi(f[1]); err == nil && n > g.Cycles {
				g.Cycles = n
			}
		}
		for _, part := range strings.Split(line, ",") {
			part = strings.TrimSpace(part)
			if sizes, ok := strings.CutSuffix(part, " MB"); ok && strings.Count(sizes, "->") == 2 {
				f := strings.Split(sizes, "->")
				if n, err := strconv.ParseInt(f[2], 10, 64); err == nil && n >= 0 && n < 1<<40 {
					g.LastLiveByte = n << 20
				}
			}
			if goal, ok := strings.CutSuffix(part, " MB goal"); ok {
				if n, err := strconv.ParseInt(goal, 10, 64); err == nil && n >= 0 && n < 1<<40 {
					g.LastGoalByte = n << 20
				}
			}
		}
	}
	return g
}

package nongo

import (
	"fmt"
	"strings"
)

// Method names how the Go runtime's share was found.
type Method string

const (
	// Named: the runtime named its mappings ("[anon: Go: heap]", Go ≥ 1.25
	// on kernels with CONFIG_ANON_VMA_NAME): every mapping of the runtime,
	// its heap, stacks and metadata, is labelled.
	Named Method = "smaps-named"
	// Arenas: the runtime's heap arenas, found by their shape: anonymous
	// memory reserved in whole 64 MiB-aligned units (heapArenaBytes) away
	// from the area where mmap places memory by itself (libc's malloc
	// arenas are 64 MiB-aligned too, but live there). The runtime's own
	// metadata outside the arenas (span structures, GC bitmaps, profiling
	// buckets: typically 1 to 3% of the heap) is counted as non-Go.
	Arenas Method = "smaps-arenas"
	// Metrics: the service's own go_memstats_* or /debug/vars memstats:
	// the runtime's mapped memory less what it released (Sys −
	// HeapReleased), as gofit's library measures itself. Mapped but never
	// touched heap counts as Go's, so non-Go memory reads a little low.
	Metrics Method = "metrics"
)

// heapArena is the Go runtime's arena size and alignment on 64-bit Linux
// (runtime.heapArenaBytes).
const heapArena = 64 << 20

// mmapAreaSlack is how far below the lowest shared mapping (a library,
// [vdso]) the area where the kernel places mmap(nil) memory is taken to
// reach: the heap hints Go uses (0xc000000000, or a random base under
// 2^46 since Go 1.26) lie far below it, libc's malloc arenas inside it.
const mmapAreaSlack = 1 << 40

// Split is a process's resident memory split between the Go runtime and
// the rest, from its smaps.
type Split struct {
	Method Method `json:"method"`
	// GoBytes is the Go runtime's resident anonymous memory (heap arenas,
	// or every named Go mapping).
	GoBytes int64 `json:"go_bytes"`
	// AnonBytes is resident anonymous memory outside it: cgo, off-heap
	// mmap, libc, foreign thread stacks, the binary's written data.
	AnonBytes int64 `json:"anon_bytes"`
	// FileBytes is resident file-backed memory the process maps (its
	// binary, libraries, mapped files); FileReferencedBytes the part the
	// kernel saw referenced (since the last clear_refs).
	FileBytes           int64 `json:"file_bytes"`
	FileReferencedBytes int64 `json:"file_referenced_bytes"`
	// Arenas is how many 64 MiB units of Go heap reservation were found;
	// LibcArenas how many 64 MiB-aligned units were left to libc's malloc.
	Arenas     int `json:"arenas"`
	LibcArenas int `json:"libc_arenas,omitempty"`
}

// ErrNoGoRuntime says the mappings show no Go runtime: not a Go process,
// or one whose heap this cannot find.
var ErrNoGoRuntime = fmt.Errorf("no Go heap found in the process's mappings")

// SplitMappings finds the Go runtime's share of a process's mappings. It
// uses the runtime's mapping names where there are any, else its heap
// arenas; it returns ErrNoGoRuntime where neither is found.
func SplitMappings(maps []Mapping) (Split, error) {
	var s Split
	named := false
	for _, m := range maps {
		if strings.HasPrefix(m.Name, "[anon: Go: ") {
			named = true
			break
		}
	}
	goMem := make([]bool, len(maps))
	if named {
		s.Method = Named
		var heap uint64
		for i, m := range maps {
			goMem[i] = strings.HasPrefix(m.Name, "[anon: Go: ")
			if strings.HasPrefix(m.Name, "[anon: Go: heap") {
				heap += m.Size()
			}
		}
		s.Arenas = int(heap / heapArena)
	} else {
		s.Method = Arenas
		s.Arenas, s.LibcArenas = markArenas(maps, goMem)
		if s.Arenas == 0 {
			return s, ErrNoGoRuntime
		}
	}
	for i, m := range maps {
		switch {
		case goMem[i]:
			s.GoBytes = add(s.GoBytes, m.Anonymous)
		case m.fileBacked():
			s.AnonBytes = add(s.AnonBytes, m.Anonymous) // written private pages of a file mapping (.data)
			s.FileBytes = add(s.FileBytes, max(m.Rss-m.Anonymous, 0))
			s.FileReferencedBytes = add(s.FileReferencedBytes, max(min(m.Referenced, m.Rss)-m.Anonymous, 0))
		default:
			s.AnonBytes = add(s.AnonBytes, m.Anonymous)
		}
	}
	return s, nil
}

// markArenas marks the mappings of Go's heap arenas in goMem and counts
// the 64 MiB units it found, and those it left as libc's.
func markArenas(maps []Mapping, goMem []bool) (goUnits, libcUnits int) {
	floor := uint64(1<<64 - 1)
	for _, m := range maps {
		if m.fileBacked() && m.Name != "" && strings.Contains(m.Name, ".so") || m.Name == "[vdso]" {
			floor = min(floor, m.Start)
		}
	}
	if floor != 1<<64-1 {
		floor = max(floor, mmapAreaSlack) - mmapAreaSlack
	}
	// Runs of adjacent anonymous mappings, of any protection: a heap
	// reservation is PROT_NONE where not yet in use.
	for i := 0; i < len(maps); {
		j := i
		if maps[i].Name != "" || maps[i].Inode != 0 {
			i++
			continue
		}
		for j+1 < len(maps) && maps[j+1].Name == "" && maps[j+1].Inode == 0 && maps[j+1].Start == maps[j].End {
			j++
		}
		start, end := maps[i].Start, maps[j].End
		if start%heapArena == 0 && end%heapArena == 0 {
			units := int((end - start) / heapArena)
			if start < floor {
				goUnits += units
				for k := i; k <= j; k++ {
					goMem[k] = true
				}
			} else {
				libcUnits += units
			}
		}
		i = j + 1
	}
	return goUnits, libcUnits
}

// add sums sizes saturating at 2^60: each is at most 2^54 (ParseSmaps
// bounds the fields), so a file of many huge mappings cannot overflow.
func add(a, b int64) int64 { return min(a+b, 1<<60) }

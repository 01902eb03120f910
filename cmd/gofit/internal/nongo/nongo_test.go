package nongo

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func readFixture(t *testing.T, name string) []Mapping {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	maps, err := ParseSmaps(string(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return maps
}

// Recorded /proc/PID/smaps of examples/offheap with 48 MiB off the heap
// and a 32 MiB live heap, after 400 requests: a static binary
// (CGO_ENABLED=0) mapping it with mmap, a cgo binary allocating it with
// malloc in 1 MiB pieces (beside glibc's 64 MiB thread arenas), the static
// one as Go ≥ 1.25 names its mappings on kernels with anonymous VMA names
// (synthesized from the static recording), and sleep(1), not Go. The
// expected figures were summed from the files with awk.
func TestSplitRecorded(t *testing.T) {
	for _, tc := range []struct {
		file              string
		method            Method
		goKB, anonKB      int64
		arenas, libcUnits int
		err               error
	}{
		{file: "static-mmap48.smaps", method: Arenas, goKB: 64444, anonKB: 115484 - 64444, arenas: 2},
		{file: "cgo-malloc48.smaps", method: Arenas, goKB: 63316, anonKB: 114708 - 63316, arenas: 2, libcUnits: 4},
		{file: "named-mmap48.smaps", method: Named, goKB: 64444, anonKB: 115484 - 64444, arenas: 2},
		{file: "nongo-sleep.smaps", err: ErrNoGoRuntime},
	} {
		s, err := SplitMappings(readFixture(t, tc.file))
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: %v, want %v", tc.file, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		if s.Method != tc.method || s.GoBytes != tc.goKB<<10 || s.AnonBytes != tc.anonKB<<10 || s.Arenas != tc.arenas || s.LibcArenas != tc.libcUnits {
			t.Errorf("%s: %+v, want method %s, Go %d kB, anon %d kB, %d arenas, %d libc", tc.file, s, tc.method, tc.goKB, tc.anonKB, tc.arenas, tc.libcUnits)
		}
		// Off the heap: 48 MiB, and within 8 MiB of it.
		if d := s.AnonBytes - 48<<20; d < 0 || d > 8<<20 {
			t.Errorf("%s: %d MiB outside the Go heap, want 48 to 56", tc.file, s.AnonBytes>>20)
		}
	}
}

func TestEstimate(t *testing.T) {
	static := readFixture(t, "static-mmap48.smaps")
	vars, err := os.ReadFile("testdata/static-mmap48.vars.json")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := ParseExpvar(vars)
	if err != nil {
		t.Fatal(err)
	}
	if rt.MappedBytes != 72001816-761856 || rt.NumGC != 8 {
		t.Fatalf("expvar: %+v", rt)
	}
	sleep := readFixture(t, "nongo-sleep.smaps")
	// The same beside 12 MiB off the heap and 40 MiB of referenced text.
	bigText := []Mapping{
		{Start: 0x400000, End: 0x3000000, Perms: "r-xp", Inode: 7, Name: "/app", Rss: 40 << 20, Referenced: 40 << 20},
		{Start: 0xc000000000, End: 0xc004000000, Perms: "rw-p", Rss: 20 << 20, Anonymous: 20 << 20},
		{Start: 0x7f0000000000, End: 0x7f0000c00000, Perms: "rw-p", Rss: 12 << 20, Anonymous: 12 << 20},
	}
	// A heap arena and 3 MiB of anonymous memory beside it (libc, bss).
	pureGo := []Mapping{
		{Start: 0xc000000000, End: 0xc004000000, Perms: "rw-p", Rss: 20 << 20, Anonymous: 20 << 20},
		{Start: 0x7f0000000000, End: 0x7f0000300000, Perms: "rw-p", Rss: 3 << 20, Anonymous: 3 << 20},
		{Start: 0x7f0000400000, End: 0x7f0000500000, Perms: "r-xp", Inode: 9, Name: "/usr/lib/libc.so.6", Rss: 1 << 20},
	}
	// Only the static file's own anonymous mappings but no arena: the
	// metrics method is what is left.
	var noArena []Mapping
	for _, m := range static {
		if m.Start>>40 != 0x7f && m.Inode == 0 && m.Name == "" && m.Start > 0x10000000000 {
			continue
		}
		noArena = append(noArena, m)
	}
	for _, tc := range []struct {
		name    string
		ev      Evidence
		method  Method
		bytes   int64
		trusted bool
		caveat  string
		err     error
	}{
		{name: "smaps with metrics", ev: Evidence{Maps: static, GoVersion: "go1.26.8", Runtime: &rt, KernelBytes: 3 << 20, Window: time.Minute, ClearedRefs: true},
			method: Arenas, bytes: 50<<20 + 3<<20 + 6<<20, trusted: true, caveat: "metadata"},
		{name: "no GC yet", ev: Evidence{Maps: static, GoVersion: "go1.26.8", Runtime: &Runtime{MappedBytes: rt.MappedBytes}, Window: time.Minute},
			method: Arenas, bytes: 56 << 20, caveat: "no garbage collection"},
		{name: "short window, collections seen", ev: Evidence{Maps: static, GoVersion: "go1.26.8", GCTrace: &GCTrace{Cycles: 3}, Window: 2 * time.Second},
			method: Arenas, bytes: 56 << 20, trusted: true, caveat: "declare that by hand"},
		{name: "short window, collections unknown", ev: Evidence{Maps: static, GoVersion: "go1.26.8", Window: 2 * time.Second},
			method: Arenas, bytes: 56 << 20, caveat: "under 10s"},
		{name: "long window, collections unknown", ev: Evidence{Maps: static, GoVersion: "go1.26.8", Window: time.Hour},
			method: Arenas, bytes: 56 << 20, trusted: true, caveat: "collections not seen"},
		{name: "metrics only", ev: Evidence{Maps: noArena, GoVersion: "go1.26.8", Runtime: &rt, Window: time.Minute},
			method: Metrics, bytes: 0, trusted: true},
		{name: "pure Go: 3 MiB outside the heap, nothing declared", ev: Evidence{Maps: pureGo, GoVersion: "go1.26.8", KernelBytes: 26 << 20, CgroupProcs: 40, GCTrace: &GCTrace{Cycles: 5}, Window: time.Hour},
			method: Arenas, bytes: 0, trusted: true, caveat: "holds 40 processes"},
		{name: "no window: referenced file pages over the hot-text floor count as the floor", ev: Evidence{Maps: bigText, GoVersion: "go1.26.8", GCTrace: &GCTrace{Cycles: 5}, Window: time.Hour},
			method: Arenas, bytes: 12<<20 + 8<<20, trusted: true, caveat: "counted as 8MiB hot"},
		{name: "no arena, no metrics", ev: Evidence{Maps: noArena, GoVersion: "go1.26.8", Window: time.Minute}, err: ErrNoGoRuntime},
		{name: "not Go", ev: Evidence{Maps: sleep, Window: time.Minute}, err: ErrNotGo},
	} {
		m, err := Estimate(tc.ev)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || m.Method != tc.method || m.Trusted != tc.trusted {
			t.Errorf("%s: %+v, %v; want method %s, trusted %v", tc.name, m, err, tc.method, tc.trusted)
			continue
		}
		if tc.method != Metrics && m.Bytes != tc.bytes {
			t.Errorf("%s: declares %d MiB, want %d", tc.name, m.Bytes>>20, tc.bytes>>20)
		}
		if tc.caveat != "" && !strings.Contains(strings.Join(m.Caveats, "; "), tc.caveat) {
			t.Errorf("%s: caveats %q, want one on %q", tc.name, m.Caveats, tc.caveat)
		}
	}
}

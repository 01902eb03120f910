package nongo

import (
	"strings"
	"testing"
	"time"
)

func TestParseSmapsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "no mappings"},
		{"Rss: 4 kB\n", "line 1: field \"Rss\" before any mapping"},
		{"00400000-00401000 r-xp 00000000 fe:00 12 /bin/x\nRss: 4 MB\n", "line 2: malformed"},
		{"00400000-00401000 r-xp 00000000 fe:00 12 /bin/x\nRss: -4 kB\n", "line 2: malformed"},
		{"00401000-00400000 r-xp 00000000 fe:00 12 /bin/x\n", "line 1: malformed mapping"},
		{"zz-00400000 r-xp 00000000 fe:00 12\n", "line 1: malformed mapping"},
		{"00400000-00401000 r-xp\n", "line 1: malformed mapping"},
	} {
		if _, err := ParseSmaps(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSmaps(%q): %v, want %q", tc.in, err, tc.want)
		}
	}
	maps, err := ParseSmaps("7f00-8f00 rw-p 00000000 00:00 0 [anon: Go: heap]\nRss: 4 kB\nAnonymous: 4 kB\nVmFlags: rd wr\n")
	if err != nil || len(maps) != 1 || maps[0].Name != "[anon: Go: heap]" || maps[0].Anonymous != 4096 {
		t.Errorf("named mapping: %+v, %v", maps, err)
	}
}

func TestParseMetrics(t *testing.T) {
	const memstats = "# HELP go_memstats_sys_bytes x\ngo_memstats_sys_bytes 7.2e+07\ngo_memstats_heap_released_bytes 2e+06\ngo_gc_duration_seconds_count 12\ngo_gc_duration_seconds{quantile=\"0.5\"} 1e-05\n"
	r, err := ParseMetrics(memstats)
	if err != nil || r.MappedBytes != 70e6 || r.NumGC != 12 {
		t.Errorf("memstats: %+v, %v", r, err)
	}
	r, err = ParseMetrics("go_memory_classes_total_bytes 5e+07\ngo_memory_classes_heap_released_bytes 1e+07\ngo_memstats_sys_bytes 9e+07\ngo_memstats_heap_released_bytes 0\n")
	if err != nil || r.MappedBytes != 40e6 || r.NumGC != -1 {
		t.Errorf("memory classes first: %+v, %v", r, err)
	}
	if _, err := ParseMetrics("go_goroutines 8\n"); err == nil {
		t.Error("no memstats: no error")
	}
	if _, err := ParseMetrics("go_memstats_sys_bytes lots\n"); err == nil || !strings.Contains(err.Error(), "lots") {
		t.Errorf("malformed value: %v", err)
	}
	if _, err := ParseExpvar([]byte(`{"cmdline":["x"]}`)); err == nil {
		t.Error("expvar without memstats: no error")
	}
}

func TestParseGCTrace(t *testing.T) {
	out := "listening\ngc 41 @0.011s 2%: 0.010+0.5+0.002 ms clock, 0.02+0.1/0.2/0+0.005 ms cpu, 3->4->2 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"gc 42 @0.120s 3%: 0.010+0.5+0.002 ms clock, 0.02+0.1/0.2/0+0.005 ms cpu, 30->31->16 MB, 33 MB goal, 0 MB stacks, 0 MB globals, 2 P\nGET /work\n"
	g := ParseGCTrace(out)
	if g.Cycles != 42 || g.LastLiveByte != 16<<20 || g.LastGoalByte != 33<<20 {
		t.Errorf("%+v", g)
	}
	if g := ParseGCTrace("gc is a word\n"); g.Cycles != 0 {
		t.Errorf("non-trace line counted: %+v", g)
	}
}

func TestParseUptime(t *testing.T) {
	stat := "1234 (my (odd) cmd) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 8 0 5000 123456 789"
	d, err := parseUptime(stat, "80.00 150.00\n")
	if err != nil || d != 30*time.Second {
		t.Errorf("%v, %v; want 30s", d, err)
	}
	if _, err := parseUptime("1 (x) S 1", "80"); err == nil {
		t.Error("short stat: no error")
	}
}

// Whatever /proc/PID/smaps holds, parsing and splitting it neither
// panics nor returns negative sizes.
func FuzzParseSmaps(f *testing.F) {
	f.Add("00400000-00401000 r-xp 00000000 fe:00 12 /bin/x\nRss: 4 kB\nAnonymous: 0 kB\n")
	f.Add("c000000000-c004000000 rw-p 00000000 00:00 0\nRss: 65536 kB\nAnonymous: 65536 kB\nReferenced: 17592186044416 kB\n7f00-8f00 rw-p 00000000 00:00 0 [anon: Go: heap]\nRss: 4 kB\n")
	huge := strings.Repeat("7f00-8f00 rw-p 00000000 00:00 0\nAnonymous: 17592186044416 kB\n", 600)
	f.Add("c000000000-c004000000 rw-p 00000000 00:00 0\nAnonymous: 4 kB\n" + huge)
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := ParseSmaps(s)
		if err != nil {
			return
		}
		sp, err := SplitMappings(maps)
		if err != nil {
			return
		}
		if sp.GoBytes < 0 || sp.AnonBytes < 0 || sp.FileBytes < 0 || sp.FileReferencedBytes < 0 {
			t.Errorf("negative split %+v", sp)
		}
		if _, err := Estimate(Evidence{Maps: maps, GoVersion: "go1.26"}); err != nil {
			t.Errorf("estimate of a split that worked: %v", err)
		}
	})
}

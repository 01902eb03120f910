package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
)

func TestParseErrorsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-offheap-mib", "-1"}, "-offheap-mib -1"},
		{[]string{"-via", "brk"}, `-via "brk"`},
		{[]string{"-slot-kib", "1"}, "-slot-kib 1"},
		{[]string{"-live-mib", "0", "extra"}, `unexpected argument "extra"`},
		{[]string{"-live-mib", "1", "-slot-kib", "2048"}, "-live-mib 1 is under one -slot-kib 2048"},
	} {
		if _, err := parse(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q): %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

// goMapped is the memory the Go runtime has mapped (heap, stacks, its
// own structures).
func goMapped() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// resident is the process's resident set from /proc/self/statm.
func resident(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// The cache is resident but not the Go runtime's: GOMEMLIMIT cannot see
// it, whether mapped with mmap or allocated with cgo's malloc. The live
// heap is the runtime's.
func TestCacheIsOffHeap(t *testing.T) {
	for _, via := range []string{"mmap", "malloc"} {
		t.Run(via, func(t *testing.T) {
			if via == "malloc" && !haveCgo {
				t.Skip("skipping: a build without cgo has no malloc")
			}
			const off = 64 << 20
			goBefore, rssBefore := goMapped(), resident(t)
			s, err := newService(config{offheap: off, via: via, live: 4 << 20, slot: 64 << 10, garbage: 16 << 10, touchPages: 4, hashRepeats: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			goGrew, rssGrew := goMapped()-goBefore, resident(t)-rssBefore
			if rssGrew < off {
				t.Errorf("resident set grew %d MiB, want at least the %d MiB cache", rssGrew>>20, off>>20)
			}
			if goGrew >= off {
				t.Errorf("the Go runtime's mapped memory grew %d MiB: the cache is on its books", goGrew>>20)
			}
			if len(s.slots) != 64 {
				t.Errorf("%d live slots, want 64 of 64 KiB", len(s.slots))
			}
			rec := httptest.NewRecorder()
			s.work(rec, httptest.NewRequest(http.MethodGet, "/work", nil))
			if rec.Code != http.StatusOK || len(rec.Body.String()) != 9 {
				t.Errorf("/work: %d %q", rec.Code, rec.Body.String())
			}
		})
	}
}

package cgroup

import (
	"math"
	"testing"
	"time"
)

// Each parser must return a value or an error for any input, never panic.
// The seeds run in every plain `go test`; `make fuzz` explores further.

func FuzzParseCPUMax(f *testing.F) {
	for _, s := range []string{"max 100000", "50000 100000", "", "x", "1 0", "99999999999999999999 1",
		"8000000000000000000", "18446744073709552 100000", "50000 18446744073709552", "max 9223372036854776"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, p, err := parseCPUMax(s)
		// A value that overflowed shows as a negative duration or as a
		// quota or period too large to be the number written.
		if err == nil && (q < 0 || p <= 0 || q/time.Microsecond > math.MaxInt64/1000 || p/time.Microsecond > math.MaxInt64/1000) {
			t.Fatalf("parseCPUMax(%q) = %v, %v without error", s, q, p)
		}
	})
}

func FuzzParseBytesLimit(f *testing.F) {
	for _, s := range []string{"max", "-1", "104857600", "9223372036854771712", "1e9", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := parseBytesLimit(s); err == nil && v < 0 {
			t.Fatalf("parseBytesLimit(%q) = %d", s, v)
		}
	})
}

func FuzzParseV1Micros(f *testing.F) {
	for _, s := range []string{"-1", "100000", "x", "-9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := parseV1Micros(s); err == nil && v < 0 {
			t.Fatalf("parseV1Micros(%q) = %v", s, v)
		}
	})
}

func FuzzParseCPUSet(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "5-", "-", ",", "0-65535", "0-3,2-3", "0-65535,0-65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := parseCPUSet(s); err == nil && (n < 0 || n > 65536) {
			t.Fatalf("parseCPUSet(%q) = %d", s, n)
		}
	})
}

func FuzzParseFlatKeyed(f *testing.F) {
	for _, s := range []string{"a 1\nb 2\n", "a\n", " 1", "a -1", "\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _ = parseFlatKeyed(s, func(string, uint64) {}) })
}

func FuzzParsePSI(f *testing.F) {
	for _, s := range []string{"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0", "some x", "full avg10=Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _, _ = parsePSI(s) })
}

func FuzzParseProcCgroup(f *testing.F) {
	for _, s := range []string{"0::/", "4:memory:/a/b\n3:cpu,cpuacct:/", "::", "1:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _, _ = parseProcCgroup(s) })
}

func FuzzParseMountinfo(f *testing.F) {
	for _, s := range []string{
		"32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu",
		"41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
		"1 2 3 \\04 \\0 x - cgroup",
		" - ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { _, _ = parseMountinfo(s) })
}

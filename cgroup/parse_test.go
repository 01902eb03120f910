package cgroup

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseCPUMax(t *testing.T) {
	for _, tc := range []struct {
		in             string
		quota, period  time.Duration
		wantErrContain string
	}{
		{in: "max 100000\n", quota: 0, period: 100 * time.Millisecond},
		{in: "50000 100000", quota: 50 * time.Millisecond, period: 100 * time.Millisecond},
		{in: "150000 200000", quota: 150 * time.Millisecond, period: 200 * time.Millisecond},
		{in: "max", quota: 0, period: 100 * time.Millisecond},
		{in: "fifty 100000", wantErrContain: `"fifty 100000"`},
		{in: "50000 0", wantErrContain: "period"},
		{in: "", wantErrContain: "want"},
		{in: "1 2 3", wantErrContain: "want"},
		{in: "-5 100000", wantErrContain: "quota"},
		// Values whose microseconds overflow a time.Duration are rejected,
		// as v1's parser does, instead of wrapping to nonsense.
		{in: "18446744073709552 100000", wantErrContain: "quota"},
		{in: "8000000000000000000", wantErrContain: "quota"},
		{in: "50000 18446744073709552", wantErrContain: "period"},
		{in: "max 9223372036854776", wantErrContain: "period"},
		{in: "9223372036854775 100000", quota: 9223372036854775 * time.Microsecond, period: 100 * time.Millisecond},
	} {
		q, p, err := parseCPUMax(tc.in)
		if tc.wantErrContain != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErrContain) {
				t.Errorf("parseCPUMax(%q) error = %v, want one containing %s", tc.in, err, tc.wantErrContain)
			}
			continue
		}
		if err != nil || q != tc.quota || p != tc.period {
			t.Errorf("parseCPUMax(%q) = %v, %v, %v; want %v, %v", tc.in, q, p, err, tc.quota, tc.period)
		}
	}
}

func TestParseBytesLimit(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"max\n", 0, false},
		{"104857600\n", 104857600, false},
		{"-1", 0, false},
		{"9223372036854771712", 0, false}, // v1 unlimited with 4 KiB pages
		{"9223372036854710272", 0, false}, // v1 unlimited with 64 KiB pages
		{"18446744073709551615", 0, false},
		{"100M", 0, true},
		{"-2", 0, true},
		{"", 0, true},
	} {
		got, err := parseBytesLimit(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseBytesLimit(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseV1Micros(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"-1\n", 0, false},
		{"50000", 50 * time.Millisecond, false},
		{"0", 0, false},
		{"-7", 0, true},
		{"x", 0, true},
		{"9223372036854775807", 0, true},
	} {
		got, err := parseV1Micros(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseV1Micros(%q) = %v, %v; want %v, err=%v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseCPUSet(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"0-3\n", 4, false},
		{"0-3,8,10-11", 7, false},
		{"5", 1, false},
		{"", 0, false},
		{"\n", 0, false},
		{"3-1", 0, true},
		{"a-b", 0, true},
		{"0,,1", 0, true},
		// Overlapping ranges count each CPU once.
		{"0-3,2-3", 4, false},
		{"1,1,1", 1, false},
		{"0-65535,7", 65536, false},
	} {
		got, err := parseCPUSet(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseCPUSet(%q) = %d, %v; want %d, err=%v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseFlatKeyed(t *testing.T) {
	got := map[string]uint64{}
	err := parseFlatKeyed("nr_periods 40\nnr_throttled 12\n\nthrottled_time 850000000\n", func(k string, v uint64) { got[k] = v })
	if err != nil || got["nr_periods"] != 40 || got["nr_throttled"] != 12 || got["throttled_time"] != 850000000 {
		t.Fatalf("got %v, %v", got, err)
	}
	err = parseFlatKeyed("a 1\nb two\n", func(string, uint64) {})
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line != 2 || pe.Text != "b two" {
		t.Fatalf("error = %#v, want a ParseError on line 2 quoting %q", err, "b two")
	}
	if err := parseFlatKeyed("lonely\n", func(string, uint64) {}); err == nil {
		t.Fatal("a line without a value parsed")
	}
}

func TestParsePSI(t *testing.T) {
	p, err := parsePSI("some avg10=1.50 avg60=0.75 avg300=0.10 total=123456\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=7\n")
	if err != nil {
		t.Fatal(err)
	}
	if p.Some.Avg10 != 1.5 || p.Some.Avg60 != 0.75 || p.Some.Total != 123456*time.Microsecond || p.Full.Avg10 != 0.25 || p.Full.Total != 7*time.Microsecond {
		t.Fatalf("got %+v", p)
	}
	for _, bad := range []string{"none avg10=1", "some avg10=x", "some avg10", "some total=-1", "some avg10=NaN"} {
		if _, err := parsePSI(bad); err == nil {
			t.Errorf("parsePSI(%q) succeeded", bad)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	es, err := parseProcCgroup("12:memory:/docker/abc\n11:cpu,cpuacct:/docker/abc\n0::/\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 || es[1].controllers[1] != "cpuacct" || es[2].path != "/" || len(es[2].controllers) != 0 {
		t.Fatalf("got %+v", es)
	}
	for _, bad := range []string{"memory:/x", "x:memory:/a", "1:memory:relative"} {
		if _, err := parseProcCgroup(bad); err == nil {
			t.Errorf("parseProcCgroup(%q) succeeded", bad)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	ms, err := parseMountinfo(`600 590 0:50 / / rw,relatime - overlay overlay rw
611 610 0:30 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid master:11 - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified\040dir rw,relatime shared:1 - cgroup2 cgroup2 rw,nsdelegate
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("got %d cgroup mounts, want 2: %+v", len(ms), ms)
	}
	if ms[0].root != "/docker/abc" || ms[0].point != "/sys/fs/cgroup/cpu,cpuacct" || !ms[0].has("cpu") || !ms[0].has("cpuacct") || ms[0].v2 {
		t.Errorf("v1 mount = %+v", ms[0])
	}
	if !ms[1].v2 || ms[1].point != "/sys/fs/cgroup/unified dir" {
		t.Errorf("v2 mount = %+v", ms[1])
	}
	if _, err := parseMountinfo("25 20 0:22 garbage\n"); err == nil {
		t.Error("malformed mountinfo parsed")
	}
}

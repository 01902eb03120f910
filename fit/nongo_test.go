package fit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
)

const mib = 1 << 20

func memPlan(t *testing.T, limit int64, n NonGo) Plan {
	t.Helper()
	return mustPolicy(t, Options{}).Plan(Input{Limits: cgroup.Limits{Memory: cgroup.MemoryLimits{Version: 2, Max: limit, MaxGroup: "/ctr"}}, CPUs: 1, NonGo: n})
}

// The numbers (issue 15). Before a process runs nothing is
// measured and nothing is budgeted: the plan is the ratio, whatever the
// binary's size. Measured in-process, a hot file and kernel memory smaller
// than the ratio's headroom leave the ratio too.
func TestNonGoRule(t *testing.T) {
	ratio := func(limit int64) int64 { return int64(float64(limit) * DefaultMemoryRatio) }
	for _, tc := range []struct {
		name   string
		limit  int64
		c      Container // before it runs: PlanContainer, as the webhook plans
		n      *NonGo    // in-process: Plan with what the library measured
		want   int64
		reason Reason
	}{
		// The lab's 61 MB sample at 128 MiB: 115.2 MiB (the old static
		// budget gave 114 MiB; budgeting its whole PT_LOAD gave 61 MiB).
		{name: "61 MB binary at 128MiB before it runs", limit: 128 * mib, c: Container{MemoryLimit: 128 * mib}, want: ratio(128 * mib), reason: ReasonRatio},
		{name: "61 MB binary at 128MiB measured 4MiB hot + 2MiB kernel", limit: 128 * mib, n: &NonGo{HotFile: 4 * mib, Kernel: 2 * mib}, want: ratio(128 * mib), reason: ReasonRatio},
		// go-httpbin at 24 MiB: 21.6 MiB. The static budget gave
		// 24 − 10 − 1 = 13 MiB and served a tenth of the ratio's requests.
		{name: "go-httpbin at 24MiB before it runs", limit: 24 * mib, c: Container{MemoryLimit: 24 * mib}, want: ratio(24 * mib), reason: ReasonRatio},
		// 48 MiB declared off-heap at 128 MiB: 128 − 48 − 4 (margin) = 76 MiB.
		{name: "48MiB declared off-heap at 128MiB", limit: 128 * mib, c: Container{MemoryLimit: 128 * mib, NonGo: 48 * mib}, want: 76 * mib, reason: ReasonUnmanaged},
		// Measured in-process, with 2 MiB of kernel memory:
		// 128 − 48 − 2 − 4 (margin) = 74 MiB.
		{name: "48MiB measured off-heap + 2MiB kernel at 128MiB", limit: 128 * mib, n: &NonGo{Anon: 48 * mib, Kernel: 2 * mib}, want: 74 * mib, reason: ReasonUnmanaged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Plan
			if tc.n != nil {
				p = memPlan(t, tc.limit, *tc.n)
			} else {
				p = mustPolicy(t, Options{}).PlanContainer(tc.c)
			}
			if p.GOMEMLIMIT != tc.want || p.GOMEMLIMITReason != tc.reason {
				t.Errorf("GOMEMLIMIT %s (%s), want %s (%s); %v", FormatBytes(p.GOMEMLIMIT), p.GOMEMLIMITReason, FormatBytes(tc.want), tc.reason, p.Reasons)
			}
			if p.GOMEMLIMIT > ratio(tc.limit) {
				t.Errorf("GOMEMLIMIT %s above the ratio's %s", FormatBytes(p.GOMEMLIMIT), FormatBytes(ratio(tc.limit)))
			}
		})
	}
}

// A service with 48 MiB of off-heap memory (an mmap'd cache) at 128 MiB:
// the ratio alone lets the heap grow to 115 MiB beside 48 MiB it cannot
// see, past the limit; gofit keeps heap + off-heap + kernel + hot text
// under the limit. At 1 GiB the ratio leaves room and wins.
func TestOffHeapService(t *testing.T) {
	n := NonGo{Anon: 48 * mib, Kernel: 2 * mib, HotFile: 8 * mib}
	p := memPlan(t, 128*mib, n)
	if p.GOMEMLIMIT+n.Total() > 128*mib || p.GOMEMLIMITReason != ReasonUnmanaged {
		t.Errorf("GOMEMLIMIT %s + non-Go %s exceeds 128MiB (%s)", FormatBytes(p.GOMEMLIMIT), FormatBytes(n.Total()), p.GOMEMLIMITReason)
	}
	if want := int64(128*mib - 58*mib - 4*mib); p.GOMEMLIMIT != want {
		t.Errorf("GOMEMLIMIT %s, want %s", FormatBytes(p.GOMEMLIMIT), FormatBytes(want))
	}
	if !contains(p.Reasons, "48MiB anonymous outside the Go heap, 2MiB kernel, 8MiB hot file pages") {
		t.Errorf("reasons do not name the parts: %v", p.Reasons)
	}
	if p := memPlan(t, 1<<30, n); p.GOMEMLIMIT != int64(float64(1<<30)*Policy{}.Options().MemoryRatio) || p.GOMEMLIMITReason != ReasonRatio {
		t.Errorf("at 1GiB: GOMEMLIMIT %s (%s), want the ratio", FormatBytes(p.GOMEMLIMIT), p.GOMEMLIMITReason)
	}
}

// gofit's GOMEMLIMIT is never above the ratio's, whatever the non-Go
// estimate: it cannot let the heap into an OOM kill the ratio avoids.
func TestNeverAboveTheRatio(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		limit := int64(r.IntN(4<<30)) + 1
		n := NonGo{Anon: r.Int64N(1 << 30), Kernel: r.Int64N(64 * mib), HotFile: r.Int64N(256 * mib)}
		p := memPlan(t, limit, n)
		if p.GOMEMLIMIT > int64(float64(limit)*DefaultMemoryRatio) {
			t.Fatalf("limit %d non-Go %+v: GOMEMLIMIT %d above the ratio", limit, n, p.GOMEMLIMIT)
		}
	}
}

// kernelModel is a fake kernel for FileBudget: the process's hot file set
// is hot bytes; when the budget leaves less than that resident and the
// heap presses (it always does here: the worst case), each second reads
// back the missing part, page by page.
type kernelModel struct {
	hot, resident int64
	faults        uint64
}

func (k *kernelModel) second(budget int64) {
	if budget < k.hot {
		k.faults += uint64(k.hot-budget) / 4096
	}
}

func runBudget(t *testing.T, k *kernelModel, seconds int, noise func(i int) uint64) []int64 {
	t.Helper()
	start := time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC)
	var b FileBudget
	var trace []int64
	for i := range seconds {
		k.second(b.Bytes)
		if noise != nil {
			k.faults += noise(i)
		}
		b = b.Next(FileSample{At: start.Add(time.Duration(i) * time.Second), Resident: k.resident, Faults: k.faults})
		if b.Bytes < b.Floor || b.Bytes > b.Max || b.Floor < 0 {
			t.Fatalf("second %d: budget %+v out of its bounds", i, b)
		}
		trace = append(trace, b.Bytes)
	}
	return trace
}

// directionChanges counts how often the budget turned from falling to
// rising or back.
func directionChanges(trace []int64) int {
	n, dir := 0, 0
	for i := 1; i < len(trace); i++ {
		d := 0
		switch {
		case trace[i] > trace[i-1]:
			d = 1
		case trace[i] < trace[i-1]:
			d = -1
		}
		if d != 0 && dir != 0 && d != dir {
			n++
		}
		if d != 0 {
			dir = d
		}
	}
	return n
}

func TestFileBudgetConvergesWithoutOscillating(t *testing.T) {
	for _, tc := range []struct {
		name          string
		hot, resident int64
		noise         func(int) uint64
	}{
		{name: "hot set above the allowance: one turn, then it holds", hot: 20 * mib, resident: 34 * mib},
		{name: "hot set below the allowance: falls to the floor and stays", hot: 4 * mib, resident: 34 * mib},
		{name: "all of it hot", hot: 34 * mib, resident: 34 * mib},
		{name: "small binary", hot: 5 * mib, resident: 9 * mib},
		{name: "noisy faults", hot: 12 * mib, resident: 40 * mib, noise: func(i int) uint64 {
			if i%97 == 0 {
				return 300 // a burst from a cold code path
			}
			return uint64(i % 7) // a trickle below the threshold
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &kernelModel{hot: tc.hot, resident: tc.resident}
			trace := runBudget(t, k, 3*3600, tc.noise)
			if c := directionChanges(trace); c > 1 {
				t.Errorf("the budget turned %d times; want at most once", c)
			}
			last := trace[len(trace)-1]
			if want := min(max(tc.hot, min(tc.resident, FileBudgetFloor)), tc.resident); last < want {
				t.Errorf("settled at %s, below the hot set %s (floor %s)", FormatBytes(last), FormatBytes(tc.hot), FormatBytes(min(tc.resident, FileBudgetFloor)))
			}
			// Settled: the last hour does not move.
			hour := trace[len(trace)-3600:]
			if hour[0] != last {
				t.Errorf("still moving in the last hour: %s -> %s", FormatBytes(hour[0]), FormatBytes(last))
			}
			// Converging costs at most one step of headroom above the hot set.
			if step := max(int64(minFileStep), tc.resident/16); tc.hot > FileBudgetFloor && last > tc.hot+2*step {
				t.Errorf("settled at %s, more than two steps above the hot set %s", FormatBytes(last), FormatBytes(tc.hot))
			}
		})
	}
}

func TestFileBudgetStartsWithEveryResidentPage(t *testing.T) {
	start := time.Unix(0, 0)
	b := FileBudget{}.Next(FileSample{At: start, Resident: 30 * mib, Faults: 5})
	if b.Bytes != 30*mib || b.Floor != FileBudgetFloor || b.Max != 30*mib {
		t.Fatalf("first sample: %+v", b)
	}
	// Quiet for less than the hold: nothing moves.
	if c := b.Next(FileSample{At: start.Add(FileBudgetHold - time.Second), Resident: 30 * mib, Faults: 5}); c.Bytes != b.Bytes {
		t.Errorf("moved before the hold: %s", c)
	}
	// A counter reset (smaller value) is no evidence.
	c := b.Next(FileSample{At: start.Add(FileBudgetHold), Resident: 30 * mib, Faults: 0})
	if c.Bytes >= b.Bytes || c.Floor != b.Floor {
		t.Errorf("after a quiet hold with a counter reset: %s", c)
	}
}

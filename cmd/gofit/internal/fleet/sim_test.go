package fleet

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// goProc is a simulated Go service under steady load, as client_golang's
// default collector and cAdvisor report it: the heap runs a GC sawtooth
// from the live heap to GOGC's goal, sweeping takes the first tenth of a
// cycle (dead objects stay counted as allocated until swept), spans in
// use carry a quarter more than the objects in them and do not drop to the
// live heap after a GC, and the spans freed stay resident (idle, not yet
// released), so the working set sits at the heap's peak plus what lies
// outside the heap.
type goProc struct {
	live, nonGo, gogc float64 // bytes, bytes, percent
	runtime           float64 // the runtime's own memory outside the heap (stacks, metadata)
	// old: client_golang before v1.20, no GOGC or GOMEMLIMIT gauges.
	old bool
	// gomemlimit, where set (0: unset), far above the heap: it does not
	// lower the goal.
	gomemlimit float64
}

// scrape is one scrape at phase phi (0 just after a GC, 1 at the goal).
type scrape struct{ alloc, inuse, idle, released, nextGC, ws float64 }

func (g goProc) at(phi float64) scrape {
	h := g.gogc / 100
	goal := g.live * (1 + h)
	alloc := g.live*(1+h*phi) + g.live*h*math.Max(0, 1-phi/0.1)
	inuse := math.Min(goal*1.05, alloc*1.25)
	peak := goal * 1.05 // the spans the heap reached, kept resident
	s := scrape{alloc: alloc, inuse: inuse, idle: peak - inuse + 4*mib, released: 4 * mib, nextGC: goal}
	s.ws = s.inuse + s.idle - s.released + g.runtime + g.nonGo
	return s
}

// pod reduces n scrapes a step at random phases as Fetch's queries do.
func (g goProc) pod(name string, steps, n int, rng *rand.Rand) Pod {
	p := newPod(name)
	p.GOGC, p.GOMEMLIMIT, p.GOMAXPROCS, p.GoVersion = g.gogc, math.MaxInt64, 1, "go1.24.4"
	if g.gomemlimit > 0 {
		p.GOMEMLIMIT = g.gomemlimit
	}
	if g.old {
		p.GOGC, p.GOMEMLIMIT, p.GOMAXPROCS = math.NaN(), math.NaN(), math.NaN()
	}
	for i := range steps {
		var wsMax, wsSum, allocMin, goalMax, residentSum float64
		allocMin = math.Inf(1)
		for range n {
			s := g.at(rng.Float64())
			wsMax = math.Max(wsMax, s.ws)
			wsSum += s.ws
			allocMin = math.Min(allocMin, s.alloc)
			goalMax = math.Max(goalMax, s.nextGC)
			residentSum += s.inuse + s.idle - s.released
		}
		p.CPU.put(i, steps, 0.2)
		p.WorkingSet.put(i, steps, wsMax)
		p.HeapAllocLow.put(i, steps, allocMin)
		p.HeapGoal.put(i, steps, goalMax)
		p.NonHeap.put(i, steps, (wsSum-residentSum)/float64(n))
	}
	return *p
}

// TestMemoryNotCountedTwice: a service planned from realistic series
// (the heap in use does not fall to the live heap after a GC, and idle
// spans stay resident) gets memory between the working set it peaked at
// and 1.3× it. Counting the GC's headroom twice planned 1.6–2× (issue 52).
func TestMemoryNotCountedTwice(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	for _, tc := range []struct {
		name string
		g    goProc
	}{
		{"48MiB live, GOGC=100", goProc{live: 48 * mib, nonGo: 4 * mib, gogc: 100, runtime: 6 * mib}},
		{"200MiB live, GOGC=100, cgo memory", goProc{live: 200 * mib, nonGo: 80 * mib, gogc: 100, runtime: 12 * mib}},
		{"100MiB live, GOGC=50", goProc{live: 100 * mib, nonGo: 10 * mib, gogc: 50, runtime: 8 * mib}},
		{"48MiB live, GOGC=100 not exported", goProc{live: 48 * mib, nonGo: 4 * mib, gogc: 100, runtime: 6 * mib, old: true}},
		{"100MiB live, GOGC=50 not exported", goProc{live: 100 * mib, nonGo: 10 * mib, gogc: 50, runtime: 8 * mib, old: true}},
		{"100MiB live, GOGC=300 not exported", goProc{live: 100 * mib, nonGo: 10 * mib, gogc: 300, runtime: 8 * mib, old: true}},
		{"48MiB live, GOGC=100, GOMEMLIMIT 1GiB", goProc{live: 48 * mib, nonGo: 4 * mib, gogc: 100, runtime: 6 * mib, gomemlimit: 1 << 30}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			// 30 s scrapes in 5-minute steps: 10 a step.
			in := input(week, step, tc.g.pod("web-1", week, 10, rng), tc.g.pod("web-2", week, 10, rng))
			c := Analyze(in, Options{}).Containers[0]
			peak := float64(c.Observed.WorkingSet.Max)
			got := float64(c.Gofit.Memory)
			t.Logf("live %s: working set peak %s, planned %s (%.2f×); live heap read %s, outside the heap %s",
				fmtBytes(tc.g.live), fmtBytes(peak), fmtBytes(got), got/peak, fmtBytes(float64(c.Observed.LiveHeap.Max)), fmtBytes(float64(c.Observed.NonHeap)))
			if !(got >= peak && got <= 1.3*peak) {
				t.Errorf("planned %s, want between the working set's peak %s and 1.3× it", fmtBytes(got), fmtBytes(peak))
			}
		})
	}
}

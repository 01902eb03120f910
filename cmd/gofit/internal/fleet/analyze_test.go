package fleet

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/fit"
)

const mib = 1 << 20

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// shape describes a synthetic container: constant figures with a daily
// wave on CPU, and a GC sawtooth on the heap.
type shape struct {
	cpu, wave, throttled, gc     float64 // cores, cores, share, cores
	live, nonHeap, heapTop       float64 // bytes: the live heap, memory outside it, the heap's peak before a GC
	gomaxprocs, gomemlimit, gogc float64
	req, lim                     Resources
	oom                          float64
	noHeap, noWS                 bool
}

func series(n int, f func(i int) float64) Track {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(f(i))
	}
	return Track{V: s}
}

func (s shape) pod(name string, steps int, step time.Duration) Pod {
	perDay := float64(24*time.Hour) / float64(step)
	p := Pod{Name: name, Requests: s.req, Limits: s.lim, GOMAXPROCS: s.gomaxprocs, GOMEMLIMIT: s.gomemlimit, GOGC: s.gogc,
		GoVersion: "go1.24.4", OOMKills: s.oom}
	p.CPU = series(steps, func(i int) float64 { return s.cpu + s.wave*math.Sin(2*math.Pi*float64(i)/perDay) })
	p.Throttled = series(steps, func(int) float64 { return s.throttled })
	p.GC = series(steps, func(int) float64 { return s.gc })
	top := s.heapTop
	if top == 0 {
		top = 2 * s.live
	}
	if !s.noWS {
		p.WorkingSet = series(steps, func(int) float64 { return top + s.nonHeap })
	}
	if !s.noHeap && !s.noWS {
		p.NonHeap = series(steps, func(int) float64 { return s.nonHeap })
	}
	if !s.noHeap {
		// As the runtime reports them: the allocated heap's low in a
		// step still holds objects not yet swept, and the goal is GOGC's
		// (a GOMEMLIMIT it nears lowers it: then the fleet does not use it).
		p.HeapAllocLow = series(steps, func(int) float64 { return 1.3 * s.live })
		if s.gogc > 0 {
			p.HeapGoal = series(steps, func(int) float64 { return s.live * (1 + s.gogc/100) })
		}
	}
	return p
}

func input(steps int, step time.Duration, pods ...Pod) Input {
	return Input{Start: t0, Step: step, Steps: steps, GCSource: "go_cpu_classes_gc_total_cpu_seconds_total",
		Groups: []Group{{Workload: Workload{Namespace: "shop", Kind: "Deployment", Name: "web"}, Container: "app", Pods: pods}}}
}

func codes(c Container) []string {
	var out []string
	for _, f := range c.Findings {
		out = append(out, f.Code)
	}
	return out
}

func TestAnalyze(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	unset := float64(math.MaxInt64)
	for _, tc := range []struct {
		name    string
		s       shape
		steps   int
		want    []string // finding codes, in order
		check   func(t *testing.T, c Container)
		missing string // in gofit's Missing
	}{
		{name: "unfitted: GOMAXPROCS 4 at 250m, no GOMEMLIMIT", steps: week,
			s: shape{cpu: 0.1, wave: 0.03, throttled: 0.3, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 4, gomemlimit: unset, gogc: 100,
				req: Resources{0.25, 256 * mib}, lim: Resources{0.25, 256 * mib}},
			want: []string{CodeGOMAXPROCSAboveLimit, CodeGOMEMLIMITUnset, CodeThrottledByGOMAXPROCS, CodeOverProvisioned},
			check: func(t *testing.T, c Container) {
				g := c.Gofit
				if g.GOMAXPROCS != 1 || g.Env["GOMAXPROCS"] != "1" {
					t.Errorf("GOMAXPROCS %d, env %v: want 1", g.GOMAXPROCS, g.Env)
				}
				// Throttling from GOMAXPROCS is not demand: no correction.
				if float64(g.CPURequest) != 0.13 {
					t.Errorf("CPU request %v, want p95 of usage 0.13", g.CPURequest)
				}
			}},
		{name: "fitted: nothing to say", steps: week,
			s: shape{cpu: 0.5, wave: 0.1, gc: 0.02, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gomemlimit: 0.9 * 400 * mib, gogc: 100,
				req: Resources{0.65, 400 * mib}, lim: Resources{1, 400 * mib}},
			want: nil},
		{name: "GOMEMLIMIT at the memory limit", steps: week,
			s: shape{cpu: 0.5, wave: 0.1, gc: 0.02, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gomemlimit: 400 * mib, gogc: 100,
				req: Resources{0.65, 400 * mib}, lim: Resources{1, 400 * mib}},
			want: []string{CodeGOMEMLIMITAtLimit}},
		{name: "GOMEMLIMIT above the memory limit", steps: week,
			s: shape{cpu: 0.5, wave: 0.1, gc: 0.02, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gomemlimit: 512 * mib, gogc: 100,
				req: Resources{0.65, 400 * mib}, lim: Resources{1, 400 * mib}},
			want: []string{CodeGOMEMLIMITAtLimit}},
		{name: "GOMEMLIMIT just below the memory limit", steps: week,
			s: shape{cpu: 0.5, wave: 0.1, gc: 0.02, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gomemlimit: 399 * mib, gogc: 100,
				req: Resources{0.65, 400 * mib}, lim: Resources{1, 400 * mib}},
			want: nil},
		{name: "too little history", steps: 20,
			s:    shape{cpu: 0.5, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gomemlimit: unset, gogc: 100, req: Resources{1, 512 * mib}, lim: Resources{1, 512 * mib}},
			want: []string{CodeGOMEMLIMITUnset, CodeNotEnoughData}, missing: "history: 40 samples over 1.7h, want at least 60 over 1d"},
		{name: "no Go heap series", steps: week,
			s:    shape{cpu: 0.5, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gogc: 100, gomemlimit: math.NaN(), noHeap: true, req: Resources{1, 512 * mib}, lim: Resources{1, 512 * mib}},
			want: []string{CodeNotEnoughData}, missing: "live heap (go_gc_heap_live_bytes, or go_memstats_heap_alloc_bytes"},
		{name: "no working set", steps: week,
			s:    shape{cpu: 0.5, live: 100 * mib, gomaxprocs: 1, gogc: 100, gomemlimit: unset, noWS: true},
			want: []string{CodeNotEnoughData}, missing: "working set (container_memory_working_set_bytes"},
		{name: "heap pinned at GOMEMLIMIT", steps: week,
			s: shape{cpu: 0.5, gc: 0.2, live: 180 * mib, heapTop: 190 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: 200 * mib, gogc: 100,
				req: Resources{0.6, 256 * mib}, lim: Resources{1, 256 * mib}},
			want: []string{CodeHeapPinned, CodeUnderProvisioned}},
		{name: "over-provisioned", steps: week,
			s: shape{cpu: 0.2, live: 50 * mib, nonHeap: 20 * mib, gomaxprocs: 4, gomemlimit: 1.8 * (1 << 30), gogc: 100,
				req: Resources{4, 2 << 30}, lim: Resources{4, 2 << 30}},
			want: []string{CodeOverProvisioned},
			check: func(t *testing.T, c Container) {
				if c.Gofit.GOMAXPROCS != 1 || float64(c.Gofit.CPULimit) != 0.25 {
					t.Errorf("limit %v GOMAXPROCS %d: want 250m and 1", c.Gofit.CPULimit, c.Gofit.GOMAXPROCS)
				}
			}},
		{name: "throttled by its limit: demand corrected, under-provisioned", steps: week,
			s: shape{cpu: 0.95, throttled: 0.4, live: 50 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: 230 * mib, gogc: 100,
				req: Resources{1, 256 * mib}, lim: Resources{1, 256 * mib}},
			want: []string{CodeUnderProvisioned},
			check: func(t *testing.T, c Container) {
				if float64(c.Gofit.CPURequest) < 0.95*1.4-0.01 || float64(c.Gofit.CPULimit) != 2 || c.Gofit.GOMAXPROCS != 2 {
					t.Errorf("request %v limit %v GOMAXPROCS %d: want usage ×1.4 and 2 whole cores", c.Gofit.CPURequest, c.Gofit.CPULimit, c.Gofit.GOMAXPROCS)
				}
			}},
		{name: "OOM killed", steps: week,
			s: shape{cpu: 0.3, live: 100 * mib, nonHeap: 30 * mib, gomaxprocs: 1, gomemlimit: unset, gogc: 100, oom: 3,
				req: Resources{0.3, 200 * mib}, lim: Resources{1, 200 * mib}},
			want: []string{CodeGOMEMLIMITUnset, CodeOOMKilled, CodeUnderProvisioned},
			check: func(t *testing.T, c Container) {
				if float64(c.VPA.Memory) < 200*mib*1.2*1.15 {
					t.Errorf("VPA memory %v: want the OOM bump (200MiB×1.2 + 15%%)", c.VPA.Memory)
				}
			}},
		{name: "GC-bound with memory to spare: GOGC raised", steps: week,
			s: shape{cpu: 0.8, gc: 0.25, live: 60 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: 0.9 * (1 << 30), gogc: 100,
				req: Resources{0.9, 1 << 30}, lim: Resources{1, 1 << 30}},
			want: []string{CodeOverProvisioned},
			check: func(t *testing.T, c Container) {
				if c.Gofit.GOGC != "200" || c.Gofit.Env["GOGC"] != "200" {
					t.Errorf("GOGC %q env %v: want 200", c.Gofit.GOGC, c.Gofit.Env)
				}
			}},
		{name: "GC-bound without memory to spare: GOGC left alone", steps: week,
			s: shape{cpu: 0.8, gc: 0.25, live: 60 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: 180 * mib, gogc: 100,
				req: Resources{0.9, 200 * mib}, lim: Resources{1, 200 * mib}},
			want: nil,
			check: func(t *testing.T, c Container) {
				if c.Gofit.GOGC != "" || !strings.Contains(strings.Join(c.Gofit.Reasons, "\n"), "GOGC left alone") {
					t.Errorf("GOGC %q reasons %q", c.Gofit.GOGC, c.Gofit.Reasons)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(tc.steps, step, tc.s.pod("web-1", tc.steps, step), tc.s.pod("web-2", tc.steps, step))
			r := Analyze(in, Options{})
			if len(r.Containers) != 1 {
				t.Fatalf("%d containers", len(r.Containers))
			}
			c := r.Containers[0]
			if got := codes(c); !slices.Equal(got, tc.want) {
				t.Errorf("findings %q, want %q\n%+v", got, tc.want, c.Findings)
			}
			if tc.missing != "" {
				if !strings.Contains(strings.Join(c.Gofit.Missing, "\n"), tc.missing) {
					t.Errorf("missing %q, want %q", c.Gofit.Missing, tc.missing)
				}
				if c.Gofit.CPURequest.Valid() || c.Gofit.Memory.Valid() || c.Gofit.GOMEMLIMIT != 0 || c.Gofit.Env != nil {
					t.Errorf("not enough data, yet figures: %+v", c.Gofit)
				}
			} else {
				checkMemory(t, c, tc.s)
			}
			if _, err := json.Marshal(r); err != nil {
				t.Errorf("results.json: %v", err)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// checkMemory: the memory limit rests on the live heap with GOGC's
// headroom, the non-heap memory and the margin; GOMEMLIMIT and GOMAXPROCS
// are fit's for the recommended limits.
func checkMemory(t *testing.T, c Container, s shape) {
	t.Helper()
	g := c.Gofit
	if !g.Enough() {
		t.Fatalf("not enough data: %q", g.Missing)
	}
	h := 2.0
	if g.GOGC == "200" {
		h = 3
	}
	live := s.live
	goal := s.live * (1 + s.gogc/100)
	if s.gogc <= 0 || (!math.IsNaN(s.gomemlimit) && s.gomemlimit < math.MaxInt64/2 && goal > s.gomemlimit/2) {
		live = 1.3 * s.live // the allocated heap's low, a bound above the live heap
	}
	base := live*h + s.nonHeap
	want := roundUp(base+math.Max(0.1*base, 16*mib), mib)
	if math.Abs(float64(g.Memory)-want) > mib {
		t.Errorf("memory %v, want %v (live %v × %v + non-heap %v + margin)", fmtBytes(float64(g.Memory)), fmtBytes(want), fmtBytes(s.live), h, fmtBytes(s.nonHeap))
	}
	opt := fit.Options{}
	if g.GOGC != "" {
		opt.GOGC = g.GOGC
	}
	pol, err := fit.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	plan := pol.PlanContainer(fit.Container{CPULimit: float64(g.CPULimit), LeafCPULimit: float64(g.CPULimit), CPURequest: float64(g.CPURequest),
		MemoryLimit: int64(g.Memory), NonGo: g.NonGo, GoVersion: "go1.24.4"})
	if plan.GOMEMLIMIT != g.GOMEMLIMIT || plan.GOMAXPROCS != g.GOMAXPROCS {
		t.Errorf("GOMEMLIMIT %d GOMAXPROCS %d, fit says %d and %d", g.GOMEMLIMIT, g.GOMAXPROCS, plan.GOMEMLIMIT, plan.GOMAXPROCS)
	}
	if g.GOMEMLIMIT <= 0 || g.GOMEMLIMIT >= int64(g.Memory) {
		t.Errorf("GOMEMLIMIT %d not below the limit %v", g.GOMEMLIMIT, g.Memory)
	}
}

func TestKRRAndVPA(t *testing.T) {
	// KRR's simple strategy reads each pod: its CPU p95 and its working
	// set's peak, then the highest pod's.
	const kstep = 5 * time.Minute
	ksteps := 100
	in := input(ksteps, kstep, Pod{Name: "a"}, Pod{Name: "b"})
	for i := range ksteps {
		in.Groups[0].Pods[0].CPU.put(i, ksteps, float64(i+1)/100) // 0.01 … 1.00: p95 0.9505
		in.Groups[0].Pods[1].CPU.put(i, ksteps, 0.5)
		in.Groups[0].Pods[0].WorkingSet.put(i, ksteps, 100*mib)
		in.Groups[0].Pods[1].WorkingSet.put(i, ksteps, float64(200+i%3*50)*mib) // peak 300MiB
	}
	k := KRR(in, in.Groups[0], nil, Options{})
	if got := float64(k.CPURequest); got != 0.951 {
		t.Errorf("KRR CPU %v, want the highest pod's p95 0.9505, up to the millicore", got)
	}
	if k.CPULimit.Valid() {
		t.Errorf("KRR CPU limit %v, want none", k.CPULimit)
	}
	if got := float64(k.Memory); got != math.Ceil(300*1.15)*mib {
		t.Errorf("KRR memory %v, want 345MiB", fmtBytes(got))
	}
	// Its minimums: 10m and 100MiB.
	for i := range ksteps {
		in.Groups[0].Pods[0].CPU.V[i], in.Groups[0].Pods[1].CPU.V[i] = 0.001, 0.001
		in.Groups[0].Pods[0].WorkingSet.V[i], in.Groups[0].Pods[1].WorkingSet.V[i] = 20*mib, 20*mib
	}
	if k := KRR(in, in.Groups[0], nil, Options{}); float64(k.CPURequest) != 0.01 || float64(k.Memory) != 100*mib {
		t.Errorf("KRR minimums: %v %v, want 10m and 100MiB", k.CPURequest, fmtBytes(float64(k.Memory)))
	}
	// Fewer than 100 points: not enough data; an HPA on CPU: no CPU figure.
	short := input(40, kstep, in.Groups[0].Pods[0])
	if k := KRR(short, short.Groups[0], nil, Options{}); k.Enough() || k.CPURequest.Valid() {
		t.Errorf("KRR on 40 points: %+v", k)
	}
	if k := KRR(in, in.Groups[0], &HPA{Name: "h", CPU: true}, Options{}); k.CPURequest.Valid() || !k.Memory.Valid() {
		t.Errorf("KRR under an HPA on CPU: %v %v", k.CPURequest, k.Memory)
	}

	// VPA: a flat 0.5 core and a flat 400MiB over two days.
	const step = 10 * time.Minute
	steps := 2 * 24 * 6
	s := shape{cpu: 0.5, live: 150 * mib, nonHeap: 100 * mib, req: Resources{0.5, 512 * mib}}
	in = input(steps, step, s.pod("p", steps, step))
	v := VPA(in, in.Groups[0], 1)
	// The histogram answers a bucket's upper end: within 5% above.
	if got := float64(v.CPURequest) / 1.15; got < 0.5 || got > 0.5*1.08 {
		t.Errorf("VPA CPU %v/1.15 = %v, want 0.5 to its bucket's end", float64(v.CPURequest), got)
	}
	if got := float64(v.Memory) / 1.15; got < 400*mib || got > 400*mib*1.08 {
		t.Errorf("VPA memory %v/1.15 = %v, want 400MiB to its bucket's end", fmtBytes(float64(v.Memory)), fmtBytes(got))
	}
	// A small container gets VPA's minimums.
	s = shape{cpu: 0.001, live: 10 * mib, nonHeap: 5 * mib}
	in = input(steps, step, s.pod("p", steps, step))
	v = VPA(in, in.Groups[0], 1)
	if float64(v.CPURequest) != vpaMinCPU || float64(v.Memory) != vpaMinMemory {
		t.Errorf("VPA minimums: %v %v", v.CPURequest, v.Memory)
	}
}

// TestFeedbackLoop: a service whose GOMEMLIMIT follows its memory limit
// (90%, GOGC=off) lets its heap grow to it, so its working set follows the
// limit. Each round applies a method's memory figure as the next limit:
// KRR's and VPA's, read from the working set, rise every round; gofit's,
// read from the live heap, stays where it was.
func TestFeedbackLoop(t *testing.T) {
	const live, nonHeap = 60 * mib, 25 * mib
	const step = 10 * time.Minute
	steps := 7 * 24 * 6
	run := func(limit float64) Container {
		gml := 0.9 * limit
		s := shape{cpu: 0.3, live: live, nonHeap: nonHeap, heapTop: gml - nonHeap, gomaxprocs: 1, gomemlimit: gml, gogc: -1,
			req: Resources{0.3, limit}, lim: Resources{1, limit}}
		r := Analyze(input(steps, step, s.pod("p1", steps, step), s.pod("p2", steps, step)), Options{})
		return r.Containers[0]
	}
	limits := map[string]float64{"gofit": 512 * mib, "krr-simple": 512 * mib, "vpa": 512 * mib}
	first := map[string]float64{}
	for round := range 4 {
		for method, lim := range limits {
			c := run(lim)
			var rec Recommendation
			switch method {
			case "gofit":
				rec = c.Gofit
			case "krr-simple":
				rec = c.KRR
			case "vpa":
				rec = c.VPA
			}
			next := float64(rec.Memory)
			t.Logf("round %d %-10s limit %-8s → %s", round, method, fmtBytes(lim), fmtBytes(next))
			if round == 0 {
				first[method] = next
			}
			switch {
			case method == "gofit" && next != first[method]:
				t.Errorf("round %d: gofit's memory moved from %s to %s", round, fmtBytes(first[method]), fmtBytes(next))
			case method != "gofit" && round > 0 && next <= lim:
				t.Errorf("round %d: %s's memory %s did not rise above the limit %s it was given", round, method, fmtBytes(next), fmtBytes(lim))
			}
			limits[method] = next
		}
	}
}

// TestRoundUp: figures land on whole millicores, as the reasons and the
// patches print them (0.30000000000000004 cores was printed once).
func TestRoundUp(t *testing.T) {
	for _, tc := range []struct{ x, unit, want float64 }{
		{0.253 * 1.1, 0.05, 0.3}, {0.1285, 0.01, 0.13}, {0.25, 0.05, 0.25}, {2.0000001, 0.01, 2.01}, {0.07, 0.01, 0.07},
	} {
		if got := roundUp(tc.x, tc.unit); got != tc.want {
			t.Errorf("roundUp(%v, %v) = %v, want %v", tc.x, tc.unit, got, tc.want)
		}
	}
	pol := fit.Policy{}
	if p := pol.PlanContainer(fit.Container{CPULimit: roundUp(0.253*1.1, 0.05)}); !strings.Contains(fit.Texts(p.Reasons)[0], "CPU limit 0.3 cores") {
		t.Errorf("reason %q", fit.Texts(p.Reasons))
	}
}

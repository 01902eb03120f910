package metrics

import (
	"math"
	"runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// The Go runtime's side of the container, from runtime/metrics: what the
// runtime counts against GOMEMLIMIT, the heap goal, and GC CPU time. They
// let one scrape put the runtime next to the container's limits (the
// alerts in deploy/monitoring divide one by the other), whether or not the
// service also registers client_golang's Go collector.
var (
	goCPU        = newDesc("gofit_go_cpu_seconds_total", "The Go runtime's estimate of CPU time by class (GOMAXPROCS × wall time, split): gc (mark assists, dedicated mark workers, pauses), gc_idle (mark work on otherwise idle Ps), scavenge, user, idle. rate(gc) / rate(gc+scavenge+user) is GC's share of the busy CPU.", prometheus.CounterValue, "class")
	goMemory     = newDesc("gofit_go_memory_bytes", "Memory the Go runtime has mapped and not returned to the OS: what it holds against GOMEMLIMIT.", prometheus.GaugeValue)
	goHeapObj    = newDesc("gofit_go_heap_objects_bytes", "Heap memory held by objects, live or not yet swept.", prometheus.GaugeValue)
	goHeapLive   = newDesc("gofit_go_heap_live_bytes", "Heap memory the last GC marked live.", prometheus.GaugeValue)
	goHeapGoal   = newDesc("gofit_go_heap_goal_bytes", "The heap size at which the next GC cycle ends (from GOGC and GOMEMLIMIT).", prometheus.GaugeValue)
	goGCCycles   = newDesc("gofit_go_gc_cycles_total", "Completed GC cycles.", prometheus.CounterValue)
	goGCPauses   = newDesc("gofit_go_gc_pause_seconds", "Stop-the-world pauses for the GC (the sum is estimated from the runtime's buckets).", prometheus.UntypedValue)
	runtimeDescs = []desc{goCPU, goMemory, goHeapObj, goHeapLive, goHeapGoal, goGCCycles, goGCPauses}
)

// runtimeNames are the runtime/metrics samples read at each scrape; every
// one exists since Go 1.22, below the library's go 1.24.
var runtimeNames = []string{
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
	"/cpu/classes/scavenge/total:cpu-seconds",
	"/cpu/classes/user:cpu-seconds",
	"/cpu/classes/idle:cpu-seconds",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/gc/cycles/total:gc-cycles",
	"/sched/pauses/total/gc:seconds",
}

// pauseBounds are the exported pause histogram's upper bounds, seconds.
var pauseBounds = []float64{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

func collectRuntime(ch chan<- prometheus.Metric) {
	s := make([]metrics.Sample, len(runtimeNames))
	for i, n := range runtimeNames {
		s[i].Name = n
	}
	metrics.Read(s)
	v := map[string]metrics.Value{}
	for _, x := range s {
		v[x.Name] = x.Value
	}
	f := func(name string) (float64, bool) {
		switch x := v[name]; x.Kind() {
		case metrics.KindFloat64:
			return x.Float64(), true
		case metrics.KindUint64:
			return float64(x.Uint64()), true
		}
		return 0, false // not on this Go: leave the series out
	}
	gc, okGC := f("/cpu/classes/gc/total:cpu-seconds")
	gcIdle, okIdle := f("/cpu/classes/gc/mark/idle:cpu-seconds")
	if okGC && okIdle {
		emit(ch, goCPU, gc-gcIdle, "gc")
		emit(ch, goCPU, gcIdle, "gc_idle")
	}
	for class, name := range map[string]string{"scavenge": "/cpu/classes/scavenge/total:cpu-seconds", "user": "/cpu/classes/user:cpu-seconds", "idle": "/cpu/classes/idle:cpu-seconds"} {
		if x, ok := f(name); ok {
			emit(ch, goCPU, x, class)
		}
	}
	total, okT := f("/memory/classes/total:bytes")
	released, okR := f("/memory/classes/heap/released:bytes")
	if okT && okR {
		emit(ch, goMemory, total-released)
	}
	for d, name := range map[desc]string{goHeapObj: "/memory/classes/heap/objects:bytes", goHeapLive: "/gc/heap/live:bytes", goHeapGoal: "/gc/heap/goal:bytes", goGCCycles: "/gc/cycles/total:gc-cycles"} {
		if x, ok := f(name); ok {
			emit(ch, d, x)
		}
	}
	if h := v["/sched/pauses/total/gc:seconds"]; h.Kind() == metrics.KindFloat64Histogram {
		count, sum, buckets := pauseHistogram(h.Float64Histogram(), pauseBounds)
		ch <- prometheus.MustNewConstHistogram(goGCPauses.Desc, count, sum, buckets)
	}
}

// pauseHistogram folds the runtime's fine histogram into cumulative counts
// at bounds: a runtime bucket counts toward a bound when its upper edge is
// at or below it. The sum takes each bucket at its midpoint (at its finite
// edge when the other is infinite).
func pauseHistogram(h *metrics.Float64Histogram, bounds []float64) (uint64, float64, map[float64]uint64) {
	out := make(map[float64]uint64, len(bounds))
	var count uint64
	var sum float64
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		count += n
		mid := (lo + hi) / 2
		switch {
		case math.IsInf(lo, -1):
			mid = hi
		case math.IsInf(hi, 1):
			mid = lo
		}
		sum += mid * float64(n)
		for _, b := range bounds {
			if hi <= b {
				out[b] += n
			}
		}
	}
	for _, b := range bounds {
		out[b] += 0 // every bound present, counted or not
	}
	return count, sum, out
}

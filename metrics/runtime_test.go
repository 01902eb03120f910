package metrics

import (
	"math"
	"runtime"
	rtmetrics "runtime/metrics"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The runtime's values are real: the Go memory covers the heap, the heap
// goal is set, and a forced GC shows up in the cycle count, the pause
// histogram and the GC CPU time.
func TestRuntimeValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(nil))
	before := gather(t, reg)
	keep := make([]byte, 8<<20)
	runtime.GC()
	runtime.GC()
	after := gather(t, reg)
	runtime.KeepAlive(keep)

	if after["gofit_go_gc_cycles_total"] < before["gofit_go_gc_cycles_total"]+2 {
		t.Errorf("gc cycles %v -> %v after two runtime.GC", before["gofit_go_gc_cycles_total"], after["gofit_go_gc_cycles_total"])
	}
	if after["gofit_go_memory_bytes"] < after["gofit_go_heap_objects_bytes"] || after["gofit_go_heap_objects_bytes"] < 8<<20 {
		t.Errorf("go memory %v, heap objects %v: want memory ≥ objects ≥ 8 MiB", after["gofit_go_memory_bytes"], after["gofit_go_heap_objects_bytes"])
	}
	if after["gofit_go_heap_goal_bytes"] < after["gofit_go_heap_live_bytes"] || after["gofit_go_heap_live_bytes"] < 8<<20 {
		t.Errorf("heap goal %v, live %v: want goal ≥ live ≥ 8 MiB", after["gofit_go_heap_goal_bytes"], after["gofit_go_heap_live_bytes"])
	}
	if after["gofit_go_cpu_seconds_total,class=gc"] <= 0 {
		t.Errorf("no GC CPU time after two GCs: %v", after)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var pauses uint64
	for _, mf := range mfs {
		if mf.GetName() == "gofit_go_gc_pause_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			pauses = h.GetSampleCount()
			if len(h.GetBucket()) != len(pauseBounds) {
				t.Errorf("%d buckets, want %d", len(h.GetBucket()), len(pauseBounds))
			}
		}
	}
	if pauses < 2 {
		t.Errorf("%d GC pauses counted after two GCs", pauses)
	}
}

func TestPauseHistogram(t *testing.T) {
	h := &rtmetrics.Float64Histogram{
		Buckets: []float64{math.Inf(-1), 1e-5, 2e-5, 1e-3, math.Inf(1)},
		Counts:  []uint64{1, 2, 3, 4},
	}
	count, sum, b := pauseHistogram(h, []float64{1e-5, 1e-4, 1e-3})
	if count != 10 {
		t.Errorf("count %d, want 10", count)
	}
	// 1 at 1e-5 (its finite edge), 2 at 1.5e-5, 3 at 5.1e-4, 4 at 1e-3.
	if want := 1e-5 + 2*1.5e-5 + 3*5.1e-4 + 4*1e-3; math.Abs(sum-want) > 1e-12 {
		t.Errorf("sum %v, want %v", sum, want)
	}
	for bound, want := range map[float64]uint64{1e-5: 1, 1e-4: 3, 1e-3: 6} {
		if b[bound] != want {
			t.Errorf("bucket le=%v: %d, want %d", bound, b[bound], want)
		}
	}
}

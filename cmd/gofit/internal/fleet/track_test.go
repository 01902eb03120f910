package fleet

import (
	"math"
	"testing"
	"time"
)

// TestTrack: a series holds the steps from its first value to the end of
// the chunk of its last, grows chunk by chunk, and reads NaN and steps
// outside it as no value.
func TestTrack(t *testing.T) {
	var tr Track
	if tr.Any() || tr.Last() != -1 || tr.End() != 0 {
		t.Fatalf("empty track: any %v, last %d, end %d", tr.Any(), tr.Last(), tr.End())
	}
	// A pod born at step 290 of a week, read in chunks of 288 steps.
	tr.put(290, 576, 1)
	tr.put(300, 576, 2)
	if tr.From != 290 || len(tr.V) != 286 {
		t.Fatalf("after the first chunk: from %d, %d steps held; want 290 and 286 (to the chunk's end)", tr.From, len(tr.V))
	}
	tr.put(600, 864, 3) // the next chunk: one allocation to its end
	if tr.From != 290 || tr.End() != 864 {
		t.Fatalf("after the second chunk: from %d to %d, want 290 to 864", tr.From, tr.End())
	}
	for _, c := range []struct {
		i    int
		want float64
		ok   bool
	}{{0, 0, false}, {289, 0, false}, {290, 1, true}, {291, 0, false}, {300, 2, true}, {600, 3, true}, {863, 0, false}, {864, 0, false}, {2015, 0, false}} {
		if v, ok := tr.At(c.i); ok != c.ok || (ok && v != c.want) {
			t.Errorf("At(%d) = %v, %v; want %v, %v", c.i, v, ok, c.want, c.ok)
		}
	}
	if tr.Last() != 600 || !tr.Any() {
		t.Errorf("last %d, any %v: want 600, true", tr.Last(), tr.Any())
	}
	// A point before the track (out of order) grows it at the front and
	// keeps what it held.
	tr.put(100, 576, 4)
	if v, ok := tr.At(100); tr.From != 100 || !ok || v != 4 {
		t.Errorf("after a point at 100: from %d, At(100) %v %v", tr.From, v, ok)
	}
	if v, ok := tr.At(600); !ok || v != 3 || tr.End() != 864 {
		t.Errorf("after growing in front: At(600) %v %v, end %d; want 3, true, 864", v, ok, tr.End())
	}
	if _, ok := (Track{V: []float32{float32(math.NaN())}}).At(0); ok {
		t.Error("a NaN step reads as a value")
	}
}

// TestHeldSteps: the heap bound counts each container's steps from its
// pod's creation, the whole window for a pod older than it or whose
// creation is unknown.
func TestHeldSteps(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	older := key{"", "a", "old-1", ""}
	born := key{"", "a", "new-1", ""}
	last := key{"", "a", "late-1", ""}
	pods := map[key]*Pod{
		{"", "a", "old-1", "app"}: {}, {"", "a", "old-1", "sidecar"}: {},
		{"", "a", "new-1", "app"}: {}, {"", "a", "unknown-1", "app"}: {},
		{"", "a", "late-1", "app"}: {},
	}
	created := map[key]float64{
		older: float64(t0.Unix() - 3600),
		born:  float64(t0.Unix() + 1800), // step 5's point is at t0+30m: 7 steps
		last:  float64(t0.Unix() + 7200), // after the window: its last step only
	}
	if got, want := heldSteps(pods, created, Query{From: t0, Step: 5 * time.Minute}, 12), 12+12+7+12+1; got != want {
		t.Errorf("heldSteps = %d, want %d", got, want)
	}
}

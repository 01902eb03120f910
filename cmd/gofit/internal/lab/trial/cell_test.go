package trial

import (
	"math"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
)

func TestGCShareExcludesIdlePs(t *testing.T) {
	// The same work, 0.1 s of GC in 0.5 s of busy P time, over 1 s of
	// wall: with GOMAXPROCS 1 (0.5 s idle) and 4 (3.5 s idle). The
	// runtime's total is GOMAXPROCS × wall; a share of it would read 10%
	// and 2.5%.
	for _, procs := range []float64{1, 4} {
		a := sandbox.RuntimeVars{GCCPUSeconds: 1, TotalCPUSeconds: 10, IdleCPUSeconds: 5}
		b := sandbox.RuntimeVars{GCCPUSeconds: 1.1, TotalCPUSeconds: 10 + procs, IdleCPUSeconds: 5 + procs - 0.5}
		if s := gcShare(a, b); s == nil || math.Abs(*s-0.2) > 1e-9 {
			t.Errorf("GOMAXPROCS %v: gcShare = %v, want 0.2", procs, s)
		}
	}
	if gcShare(sandbox.RuntimeVars{}, sandbox.RuntimeVars{GCCPUSeconds: 1, TotalCPUSeconds: 1}) != nil {
		t.Error("a share without the idle class")
	}
}

const miB = 1 << 20

// A start under a memory limit waits 4 × the slowest start without one
// (at least 5 s), never longer than the target's own readiness timeout;
// without a limit, or before any start without one, the target's own.
func TestStartWait(t *testing.T) {
	for _, tc := range []struct {
		slowest, own time.Duration
		limit        int64
		want         time.Duration
	}{
		{0, 0, 64 * miB, sandbox.DefaultReadyTimeout},
		{800 * time.Millisecond, 0, 0, sandbox.DefaultReadyTimeout},
		{800 * time.Millisecond, 0, 64 * miB, minStartWait},
		{3 * time.Second, 0, 64 * miB, 12 * time.Second},
		{3 * time.Second, 10 * time.Second, 64 * miB, 10 * time.Second},
		{20 * time.Second, 0, 64 * miB, sandbox.DefaultReadyTimeout},
	} {
		if got := StartWait(sandbox.Target{ReadyTimeout: tc.own}, tc.limit, tc.slowest); got != tc.want {
			t.Errorf("slowest start %v, --ready-timeout %v, limit %d MiB: waits %v, want %v", tc.slowest, tc.own, tc.limit/miB, got, tc.want)
		}
	}
}

package lab

import (
	"math"
	"testing"

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

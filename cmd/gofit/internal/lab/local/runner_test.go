package local

import (
	"testing"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
)

// A probe whose referenced bits cannot be cleared (the process is gone,
// or no permission) does not claim a measured window for its file pages.
func TestStartNonGoWithoutClearRefs(t *testing.T) {
	r := &runner{}
	if began := r.startNonGo(&sandbox.Trial{Pid: 1 << 30}); !began.IsZero() {
		t.Errorf("clear_refs of no process: window began %v, want none", began)
	}
}

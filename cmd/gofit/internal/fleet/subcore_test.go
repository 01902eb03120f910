package fleet

import (
	"slices"
	"testing"
	"time"
)

// TestAnalyzeSubCoreLimit: a busy Go process fitted to a limit under one
// core runs GOMAXPROCS=1, the least there is, and is throttled because it
// wants more CPU than the limit, not because of GOMAXPROCS. Found on the
// e2e node's fleet step (examples/service fitted by gofit at 250m, 94% of
// periods throttled, was flagged throttled_by_gomaxprocs): GOMAXPROCS was
// compared with the limit itself rather than with the limit rounded up,
// as gomaxprocs_above_limit, the rules and fit compare it.
func TestAnalyzeSubCoreLimit(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.24, throttled: 0.9, live: 20 * mib, nonHeap: 10 * mib, gomaxprocs: 1, gomemlimit: 100 * mib, gogc: 100,
		req: Resources{0.25, 128 * mib}, lim: Resources{0.25, 128 * mib}}
	r := Analyze(input(week, step, s.pod("web-1", week, step), s.pod("web-2", week, step)), Options{})
	if len(r.Containers) != 1 {
		t.Fatalf("%d containers", len(r.Containers))
	}
	c := r.Containers[0]
	if got, want := codes(c), []string{CodeUnderProvisioned}; !slices.Equal(got, want) {
		t.Errorf("findings %q, want %q\n%+v", got, want, c.Findings)
	}
	// The throttling capped demand: the request is usage raised by it.
	if float64(c.Gofit.CPURequest) < 0.24*1.9-0.01 || c.Gofit.GOMAXPROCS != 1 {
		t.Errorf("request %v GOMAXPROCS %d: want usage ×1.9 and 1", c.Gofit.CPURequest, c.Gofit.GOMAXPROCS)
	}
}

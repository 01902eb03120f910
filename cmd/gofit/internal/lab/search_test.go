package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
)

const mib = 1 << 20

// fake is a target whose outcome at each limit is scripted.
type fake struct {
	floor int64            // passes at or above this
	flaky map[int64][]bool // scripted outcomes per limit, consumed in order
	runs  []int64
}

func (f *fake) run(_ context.Context, limit int64) result.MemTrial {
	f.runs = append(f.runs, limit)
	ok := limit >= f.floor
	if seq := f.flaky[limit]; len(seq) > 0 {
		ok, f.flaky[limit] = seq[0], seq[1:]
	}
	out := result.Errored
	if ok {
		out = result.OK
	}
	return result.MemTrial{LimitBytes: limit, Outcome: out}
}

func TestFloorSearch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		s         floorSearch
		f         *fake
		want      int64
		maxTrials int
	}{
		{"monotonic, within 12 trials", floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 3, Of: 3},
			&fake{floor: 47 * mib}, 47 * mib, 12},
		{"floor at the resolution", floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 2, Of: 3},
			&fake{floor: 11 * mib}, 11 * mib, 12},
		{"hi fails: raised by doubling", floorSearch{Lo: 10 * mib, Hi: 40 * mib, Max: 800 * mib, Resolution: mib, Need: 1, Of: 1},
			&fake{floor: 150 * mib}, 150 * mib, 12},
		{"nothing passes up to max", floorSearch{Lo: 10 * mib, Hi: 40 * mib, Max: 100 * mib, Resolution: mib, Need: 1, Of: 1},
			&fake{floor: 1000 * mib}, 0, 5},
		{"non-monotonic edge: a lucky pass is not confirmed", floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 3, Of: 3},
			&fake{floor: 52 * mib, flaky: map[int64][]bool{48 * mib: {true, false, true}}}, 52 * mib, 20},
		{"2 of 3 tolerates one flake at the floor", floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 2, Of: 3},
			&fake{floor: 30 * mib, flaky: map[int64][]bool{30 * mib: {true, false, true}}}, 30 * mib, 12},
		{"floor below Lo is found, not reported as Lo + 1 MiB", floorSearch{Lo: 40 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 1, Of: 1},
			&fake{floor: 13 * mib}, 13 * mib, 12},
		{"an edge that never confirms climbs in doubling steps, bounded", floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 2, Of: 2, MaxTrials: 30},
			&fake{floor: 90 * mib, flaky: map[int64][]bool{20 * mib: {true, false}}}, 90 * mib, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.s.Find(context.Background(), tc.f.run)
			floor, trials := r.Floor, r.Trials
			if err != nil {
				t.Fatal(err)
			}
			if floor != tc.want {
				t.Errorf("floor %d MiB, want %d MiB; runs %v", floor/mib, tc.want/mib, mibs(tc.f.runs))
			}
			if len(trials) > tc.maxTrials || len(trials) != len(tc.f.runs) {
				t.Errorf("%d trials (ran %d), want at most %d: %v", len(trials), len(tc.f.runs), tc.maxTrials, mibs(tc.f.runs))
			}
		})
	}
}

func TestFloorSearchHealthyPredicate(t *testing.T) {
	// Healthy from 60 MiB although it survives from 30 MiB.
	run := func(_ context.Context, limit int64) result.MemTrial {
		return result.MemTrial{LimitBytes: limit, Outcome: result.OK, Healthy: limit >= 60*mib}
	}
	s := floorSearch{Lo: 30 * mib, Hi: 90 * mib, Max: 800 * mib, Resolution: mib, Need: 1, Of: 1, Pass: func(t result.MemTrial) bool { return t.Healthy }}
	r, err := s.Find(context.Background(), run)
	if floor := r.Floor; err != nil || floor != 60*mib {
		t.Errorf("healthy floor %d MiB, %v; want 60 MiB", floor/mib, err)
	}
}

func TestFloorSearchCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	r, err := floorSearch{Lo: 16 * mib, Hi: 64 * mib, Max: 64 * mib, Resolution: mib, Need: 1, Of: 1}.Find(ctx, func(context.Context, int64) result.MemTrial {
		n++
		if n == 3 {
			cancel()
		}
		return result.MemTrial{Outcome: result.OK}
	})
	if err == nil || len(r.Trials) != 2 {
		t.Errorf("err %v, %d trials recorded; want the cancellation and the 2 trials before it", err, len(r.Trials))
	}
}

// One unlucky failure where a failure costs a climb (the upper bound, or
// the step after an edge that did not hold) is run again before the search
// goes up: issue 15's healthy floor climbed from 192 to 759 MiB on such
// coin flips. Without FailConfirm the same script climbs.
func TestFloorSearchConfirmsFailureBeforeClimbing(t *testing.T) {
	for _, confirm := range []int{0, 2} {
		f := &fake{floor: 40 * mib, flaky: map[int64][]bool{120 * mib: {false}}}
		s := floorSearch{Lo: 40 * mib, Min: 40 * mib, Hi: 120 * mib, Max: 960 * mib, Resolution: 4 * mib, Need: 1, Of: 1, FailConfirm: confirm}
		r, err := s.Find(context.Background(), f.run)
		if err != nil {
			t.Fatal(err)
		}
		climbed := false
		for _, l := range f.runs {
			climbed = climbed || l > 120*mib
		}
		if want := confirm < 2; climbed != want {
			t.Errorf("FailConfirm %d: runs %v MiB; climbed above the first bound: %v, want %v", confirm, mibs(f.runs), climbed, want)
		}
		if confirm == 2 && (r.Floor != 40*mib || len(r.Trials) != 3) {
			t.Errorf("FailConfirm 2: floor %d MiB in %d trials (%v), want 40 MiB in 3 (120 twice, then Min)", r.Floor/mib, len(r.Trials), mibs(f.runs))
		}
	}
	// Two failures are a failure: it climbs.
	f := &fake{floor: 200 * mib}
	r, _ := floorSearch{Lo: 40 * mib, Hi: 120 * mib, Max: 960 * mib, Resolution: 4 * mib, Need: 1, Of: 1, FailConfirm: 2}.Find(context.Background(), f.run)
	if r.Floor != 200*mib {
		t.Errorf("floor %d MiB (runs %v), want 200", r.Floor/mib, mibs(f.runs))
	}
}

// Min bounds the search from below: a healthy search never tries under
// the survival floor.
// count is how many times the search tried limit.
func (f *fake) count(limit int64) int {
	n := 0
	for _, l := range f.runs {
		if l == limit {
			n++
		}
	}
	return n
}

func TestFloorSearchMin(t *testing.T) {
	f := &fake{floor: 0}
	r, err := floorSearch{Lo: 64 * mib, Min: 48 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: 4 * mib, Need: 1, Of: 1}.Find(context.Background(), f.run)
	if err != nil || r.Floor != 48*mib {
		t.Errorf("floor %d MiB, %v; want 48 (Min)", r.Floor/mib, err)
	}
	for _, l := range f.runs {
		if l < 48*mib {
			t.Errorf("tried %d MiB, under Min: %v", l/mib, mibs(f.runs))
		}
	}
}

// A search with a deadline starts no trial the trials so far say would
// end after it, and says it was cut; so does one that hits MaxTrials. The
// floor is then the lowest limit that passed.
func TestFloorSearchBudget(t *testing.T) {
	clock := time.Unix(0, 0)
	f := &fake{floor: 47 * mib}
	run := func(ctx context.Context, limit int64) result.MemTrial {
		clock = clock.Add(10 * time.Second)
		return f.run(ctx, limit)
	}
	s := floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 1, Of: 1,
		Deadline: clock.Add(35 * time.Second), Now: func() time.Time { return clock }}
	r, err := s.Find(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	if !r.BudgetLimited || len(r.Trials) != 3 || r.Floor != 55*mib {
		t.Errorf("cut %v after %d trials (%v), floor %d MiB; want cut after 3 (the 4th would end at 40s), floor 55 MiB (100 passed, 10 failed, 55 passed)", r.BudgetLimited, len(r.Trials), mibs(f.runs), r.Floor/mib)
	}
	f = &fake{floor: 47 * mib}
	r, _ = floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 1, Of: 1, MaxTrials: 4}.Find(context.Background(), f.run)
	if !r.BudgetLimited || len(r.Trials) != 4 || r.Floor == 0 || r.Floor < 47*mib {
		t.Errorf("MaxTrials 4: cut %v, %d trials, floor %d MiB", r.BudgetLimited, len(r.Trials), r.Floor/mib)
	}
	f = &fake{floor: 47 * mib}
	r, _ = floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 1, Of: 1}.Find(context.Background(), f.run)
	if r.BudgetLimited || r.Floor != 47*mib {
		t.Errorf("no bound: cut %v, floor %d MiB", r.BudgetLimited, r.Floor/mib)
	}
}

func TestSurvivalCurve(t *testing.T) {
	c := survivalCurve([]result.MemTrial{{LimitBytes: 2, Outcome: result.OK}, {LimitBytes: 1, Outcome: result.Stalled}, {LimitBytes: 2, Outcome: result.OOMKilled}, {LimitBytes: 3, Outcome: result.OK}})
	if len(c) != 3 || c[0] != (result.Survival{LimitBytes: 1, Passed: 0, Runs: 1}) || c[1] != (result.Survival{LimitBytes: 2, Passed: 1, Runs: 2}) || c[2] != (result.Survival{LimitBytes: 3, Passed: 1, Runs: 1}) {
		t.Errorf("curve %+v", c)
	}
}

func mibs(v []int64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = x / mib
	}
	return out
}

// A floor at Min is confirmed as a bisected edge is: the healthy search
// starts at the survival floor, and one healthy trial there is a coin
// that came up heads. When the confirmation fails, the search climbs.
func TestFloorSearchConfirmsAtMin(t *testing.T) {
	s := floorSearch{Lo: 80 * mib, Min: 80 * mib, Hi: 100 * mib, Max: 200 * mib, Resolution: 4 * mib, Need: 2, Of: 2, FailConfirm: 2}
	f := &fake{floor: 0}
	r, err := s.Find(context.Background(), f.run)
	if err != nil || r.Floor != 80*mib {
		t.Fatalf("floor %d MiB, %v; want 80 (Min); runs %v", r.Floor/mib, err, mibs(f.runs))
	}
	if at := f.count(80 * mib); at < 2 {
		t.Errorf("the floor at Min rests on %d trial(s) there: %v", at, mibs(f.runs))
	}
	// Healthy once at 80, then not: 80 is no floor, and the climb finds 84.
	f = &fake{floor: 84 * mib, flaky: map[int64][]bool{80 * mib: {true, false}}}
	r, err = s.Find(context.Background(), f.run)
	if err != nil || r.Floor != 84*mib {
		t.Errorf("floor %d MiB, %v; want 84 after 80 failed its confirmation; runs %v", r.Floor/mib, err, mibs(f.runs))
	}
}

// A setting that fails at every limit up to Max has no floor, and the
// result says how far the search looked.
func TestFloorSearchCeiling(t *testing.T) {
	f := &fake{floor: 1 << 40}
	r, err := floorSearch{Lo: 32 * mib, Hi: 96 * mib, Max: 256 * mib, Resolution: 4 * mib, Need: 2, Of: 3}.Find(context.Background(), f.run)
	if err != nil || r.Floor != 0 || r.BudgetLimited || r.Max != 256*mib {
		t.Fatalf("floor %d, max %d MiB, cut %v, %v; want no floor, searched to 256 MiB", r.Floor, r.Max/mib, r.BudgetLimited, err)
	}
	for _, l := range f.runs {
		if l > 256*mib {
			t.Errorf("tried %d MiB, over Max: %v", l/mib, mibs(f.runs))
		}
	}
	m := result.MemResult{Setting: "x", SearchedToBytes: r.Max, SurvivalFinding: findingOf(r, nil), HealthyFinding: result.Finding{Status: result.NotMeasured}}
	if s, h := m.FloorLabels(); !strings.HasPrefix(s, "above 256MiB (") || h != "not measured" {
		t.Errorf("labels %q, %q; want \"above 256MiB\", and no healthy search", s, h)
	}
	// A search the budget cut is bounded below by what it tried, not by
	// the ceiling it never reached.
	r.Trials, r.BudgetLimited = r.Trials[:2], true
	m.SurvivalFinding = findingOf(r, nil)
	if s, _ := m.FloorLabels(); strings.Contains(s, "256MiB") || !strings.Contains(s, "the budget cut the search") {
		t.Errorf("a search the budget cut after 2 trials: %q", s)
	}
}

// One failure in bisection just below the edge is taken at face value
// nowhere else: two default runs put gofit's survival floor at 84 and 92
// MiB on one stalled trial at 88. The step below a confirmed edge that
// failed once gets a second look, and when it passes the search goes on
// below it.
func TestFloorSearchSecondLookBelowTheEdge(t *testing.T) {
	s := floorSearch{Lo: 68 * mib, Hi: 200 * mib, Max: 528 * mib, Resolution: 4 * mib, Need: 2, Of: 3}
	f := &fake{floor: 84 * mib, flaky: map[int64][]bool{88 * mib: {false}}}
	r, err := s.Find(context.Background(), f.run)
	if err != nil || r.Floor != 84*mib {
		t.Errorf("floor %d MiB, %v; want 84 (88 failed once, by chance); runs %v", r.Floor/mib, err, mibs(f.runs))
	}
	// A failure that holds on the second look leaves the floor where it was.
	f = &fake{floor: 92 * mib}
	r, err = s.Find(context.Background(), f.run)
	if err != nil || r.Floor != 92*mib {
		t.Errorf("floor %d MiB, %v; want 92; runs %v", r.Floor/mib, err, mibs(f.runs))
	}
	if at88 := f.count(88 * mib); at88 != 2 {
		t.Errorf("88 MiB, under the edge, ran %d times, want 2 (one look, one second look): %v", at88, mibs(f.runs))
	}
}

// An edge two steps wide (60 and 64 MiB pass every other run, 68 every
// run): one step's k of n lands in the band, where the next run may well
// not; pooled with the step above, the floor is the band's top. A single
// stall on a step that otherwise holds is outvoted, not climbed on.
func TestFloorSearchSpan(t *testing.T) {
	band := func() map[int64][]bool {
		alt := func() []bool {
			var s []bool
			for i := 0; i < 20; i++ {
				s = append(s, i%2 == 0)
			}
			return s
		}
		return map[int64][]bool{60 * mib: alt(), 64 * mib: alt()}
	}
	base := floorSearch{Lo: 32 * mib, Hi: 128 * mib, Max: 512 * mib, Resolution: 4 * mib, MaxTrials: 40}
	for _, tc := range []struct {
		name           string
		need, of, span int
		f              *fake
		want           int64
	}{
		{"one step, 2 of 3: in the band", 2, 3, 1, &fake{floor: 68 * mib, flaky: band()}, 60 * mib},
		{"two steps, 12 of 14: the band's top", 6, 7, 2, &fake{floor: 68 * mib, flaky: band()}, 68 * mib},
		{"two steps: one stall above the floor is outvoted", 6, 7, 2, &fake{floor: 60 * mib, flaky: map[int64][]bool{64 * mib: {true, false}}}, 60 * mib},
	} {
		s := base
		s.Need, s.Of, s.Span = tc.need, tc.of, tc.span
		r, err := s.Find(context.Background(), tc.f.run)
		if err != nil || r.Floor != tc.want {
			t.Errorf("%s: floor %d MiB (%v), want %d; runs %v", tc.name, r.Floor/mib, err, tc.want/mib, mibs(tc.f.runs))
		}
	}
}

// The search is a pure rule over the trials it ran: its trials, replayed,
// reach the floor the search found and ask for nothing more; a prefix of
// them asks for the very limit the search tried next, as if cut there; and
// a rule changed since (a stricter k of n) leaves the records where they
// stop following it, its floor cut there.
func TestFloorSearchReplays(t *testing.T) {
	s := floorSearch{Lo: 10 * mib, Hi: 100 * mib, Max: 800 * mib, Resolution: mib, Need: 2, Of: 3, Span: 2}
	f := &fake{floor: 47 * mib, flaky: map[int64][]bool{46 * mib: {true, false}}}
	r, err := s.Find(context.Background(), f.run)
	if err != nil {
		t.Fatal(err)
	}
	got, _, more, diverged := s.replay(r.Trials)
	if more || diverged || got.Floor != r.Floor || len(got.Trials) != len(r.Trials) || got.BudgetLimited {
		t.Errorf("replayed: floor %d MiB, more %v, diverged %v, %d trials; the search found %d MiB in %d", got.Floor/mib, more, diverged, len(got.Trials), r.Floor/mib, len(r.Trials))
	}
	for n := 0; n < len(r.Trials); n++ {
		cut, next, more, _ := s.replay(r.Trials[:n])
		if !more || next != r.Trials[n].LimitBytes || !cut.BudgetLimited {
			t.Errorf("after %d trials: next %d MiB (more %v, cut %v), the search tried %d MiB", n, next/mib, more, cut.BudgetLimited, r.Trials[n].LimitBytes/mib)
		}
	}
	strict := s
	strict.Need, strict.Of = 3, 3
	if got, _, _, diverged := strict.replay(r.Trials); !diverged || !got.BudgetLimited {
		t.Errorf("a stricter rule over the same trials: diverged %v, cut %v, floor %d MiB", diverged, got.BudgetLimited, got.Floor/mib)
	}
}

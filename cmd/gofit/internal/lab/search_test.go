package lab

import (
	"context"
	"testing"
)

const mib = 1 << 20

// fake is a target whose outcome at each limit is scripted.
type fake struct {
	floor int64            // passes at or above this
	flaky map[int64][]bool // scripted outcomes per limit, consumed in order
	runs  []int64
}

func (f *fake) run(_ context.Context, limit int64) MemTrial {
	f.runs = append(f.runs, limit)
	ok := limit >= f.floor
	if seq := f.flaky[limit]; len(seq) > 0 {
		ok, f.flaky[limit] = seq[0], seq[1:]
	}
	out := Errored
	if ok {
		out = OK
	}
	return MemTrial{LimitBytes: limit, Outcome: out}
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
			floor, trials, err := tc.s.Find(context.Background(), tc.f.run)
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
	run := func(_ context.Context, limit int64) MemTrial {
		return MemTrial{LimitBytes: limit, Outcome: OK, Healthy: limit >= 60*mib}
	}
	s := floorSearch{Lo: 30 * mib, Hi: 90 * mib, Max: 800 * mib, Resolution: mib, Need: 1, Of: 1, Pass: func(t MemTrial) bool { return t.Healthy }}
	floor, _, err := s.Find(context.Background(), run)
	if err != nil || floor != 60*mib {
		t.Errorf("healthy floor %d MiB, %v; want 60 MiB", floor/mib, err)
	}
}

func TestFloorSearchCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, trials, err := floorSearch{Lo: 16 * mib, Hi: 64 * mib, Max: 64 * mib, Resolution: mib, Need: 1, Of: 1}.Find(ctx, func(context.Context, int64) MemTrial {
		n++
		if n == 3 {
			cancel()
		}
		return MemTrial{Outcome: OK}
	})
	if err == nil || len(trials) != 2 {
		t.Errorf("err %v, %d trials recorded; want the cancellation and the 2 trials before it", err, len(trials))
	}
}

func TestSurvivalAndSummary(t *testing.T) {
	c := survivalCurve([]MemTrial{{LimitBytes: 2, Outcome: OK}, {LimitBytes: 1, Outcome: Stalled}, {LimitBytes: 2, Outcome: OOMKilled}, {LimitBytes: 3, Outcome: OK}})
	if len(c) != 3 || c[0] != (Survival{1, 0, 1}) || c[1] != (Survival{2, 1, 2}) || c[2] != (Survival{3, 1, 1}) {
		t.Errorf("curve %+v", c)
	}
	for _, tc := range []struct {
		in   []float64
		want summary
	}{
		{[]float64{3, 1, 2}, summary{1, 2, 3}},
		{[]float64{4, 1, 2, 3}, summary{1, 2.5, 4}},
		{[]float64{5}, summary{5, 5, 5}},
		{nil, summary{}},
	} {
		if got := summarize(tc.in); got != tc.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func mibs(v []int64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = x / mib
	}
	return out
}

package stats

import (
	"math"
	"math/rand"
	"testing"
)

// TestLabIntervalsUnchanged holds the lab's intervals to the bit: a
// stored run replayed (gofit lab --replay) must give the same
// results.json, so the core may not change the lab's draws, the level
// it reads them at or their widening. The figures were recorded from the
// lab's own loop before the experiments' intervals joined the core. The
// last three reach 0 or infinity at one end (a run that served nothing):
// the lab left them as drawn, and the core now carries the other, finite
// end to α as for any interval (the experiments' pod-paired windows had
// widened each end on its own; leaving them as drawn read rare-event
// ratios at 98% where a sequential look asks far more, review of
// 2026-12-07). Their finite ends are recorded from the core as it is.
func TestLabIntervalsUnchanged(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	a, base := runs(3, fakeBlocks(rng, 30, 300, 0.1, 3)), runs(3, fakeBlocks(rng, 30, 300, 0.1, 3.3))
	pa, pb := runs(4, fakeBlocks(rng, 24, 200, 0.05, 5)), runs(4, fakeBlocks(rng, 24, 200, 0.05, 5.5))
	empty := make([]Block, 10)
	for i := range empty {
		empty[i].Seconds = 1
	}
	dead := append(runs(2, fakeBlocks(rng, 20, 300, 0.1, 3)), empty)
	at := func(alpha float64) *Bootstrap {
		b := NewBootstrap(1000, 7)
		b.Alpha = alpha
		return b
	}
	inf := math.Inf(1)
	for _, tc := range []struct {
		name string
		got  Interval
		want Interval
	}{
		{"ratio p99", at(0.05).Ratio(a, base, StatP99), Interval{0.909588218787987, 0.7716897174250077, 1.1003249422852757}},
		{"ratio rps", at(0.05).Ratio(a, base, StatRPS), Interval{1.012428619415519, 0.9003660450431596, 1.1187861859395014}},
		{"ratio p99 at 3%", at(0.03).Ratio(a, base, StatP99), Interval{0.909588218787987, 0.7415785563382331, 1.136566902440583}},
		{"paired p99 at 3%", at(0.03).PairedRatio(pa, pb, StatP99), Interval{0.9187068406813356, 0.7672288780934164, 1.1000918802901396}},
		{"paired rps", at(0.05).PairedRatio(pa, pb, StatRPS), Interval{0.9896736885584468, 0.9532519333772548, 1.030163692720282}},
		{"ci p99", at(0.05).CI(a, StatP99), Interval{14.16633006587417, 13.145176749865414, 15.040078306487516}},
		{"ci rps", at(0.05).CI(base, StatRPS), Interval{297.7, 285.03333333333336, 310.1666666666667}},
		{"base that served nothing in a run", at(0.05).Ratio(a, dead, StatP99), Interval{1.0050000000000012, 0.8165333335715148, inf}},
		{"arm that served nothing in a run", at(0.05).Ratio(dead, base, StatP99), Interval{0.9050629042666527, 0, 1.1334096860655298}},
		{"arm that served nothing in a run, rps at 3%", at(0.03).Ratio(dead, base, StatRPS), Interval{0.6694659052737656, 0, 1.5400191568513633}},
	} {
		for _, x := range [][2]float64{{tc.got.Value, tc.want.Value}, {tc.got.Low, tc.want.Low}, {tc.got.High, tc.want.High}} {
			if math.Float64bits(x[0]) != math.Float64bits(x[1]) {
				t.Errorf("%s: %v, want %v to the bit", tc.name, tc.got, tc.want)
				break
			}
		}
	}
}

// Expansion is the lab's few-runs widening, 1.73 at 3 runs a side and
// α = 5%, 1.31 at 5 (its doc); under 2 runs there is nothing to widen
// from.
func TestExpansion(t *testing.T) {
	for _, tc := range []struct {
		n     int
		alpha float64
		want  float64
	}{{3, 0.05, 1.73}, {5, 0.05, 1.31}, {100, 0.05, 1.01}} {
		if got := Expansion(tc.n, tc.alpha); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("Expansion(%d, %g) = %.4f, want %.2f", tc.n, tc.alpha, got, tc.want)
		}
	}
	if !math.IsInf(Expansion(1, 0.05), 1) {
		t.Error("Expansion of 1 run is finite")
	}
}

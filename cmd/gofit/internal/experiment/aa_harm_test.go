package experiment

import (
	"math"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// harmWorld adds to synth's series what harm is judged on, as A/A pods
// have them: each pod's own lasting propensity to stall (unready for a
// few windows at a time), rare restarts, and in some experiments one pod
// that crash-loops for a while on its own (a bad node); errors at 0.1%;
// and in some, unequal traffic (a least-request balancer sending 30%
// less to one arm).
type harmWorld struct {
	stall     float64 // chance a pod starts a stall in a window
	restart   float64 // restarts per pod-window
	crashLoop float64 // chance one pod of the experiment crash-loops
	unequal   float64 // chance the arms' traffic differs
}

func (hw harmWorld) apply(rng *rand.Rand, in *Input, armStall, armRestart float64) {
	in.Have["ready"] = true
	loopArm, loopPod, loopFrom := -1, -1, 0
	if rng.Float64() < hw.crashLoop {
		loopArm, loopPod, loopFrom = rng.Intn(len(in.Arms)), rng.Intn(2), rng.Intn(len(in.Arms[0].Windows[0])-20)
	}
	unequal := rng.Float64() < hw.unequal
	for a := range in.Arms {
		for p, ws := range in.Arms[a].Windows {
			own := math.Exp(0.5 * rng.NormFloat64()) // the pod's lasting propensity
			stall, restart := hw.stall*own, hw.restart*own
			if a == 1 {
				stall, restart = stall*armStall, restart*armRestart
			}
			left := 0
			for i := range ws {
				w := &ws[i]
				w.Has |= HasReady
				w.Errors = float64(distuv.Poisson{Lambda: w.Requests * 0.001, Src: rng}.Rand())
				if unequal && a == 1 {
					// Less traffic, and less of the CPU it costs.
					w.Requests = math.Round(w.Requests * 0.7)
					w.Errors = math.Round(w.Errors * 0.7)
					w.CPUSeconds, w.GoBusy, w.GCSeconds = 0.7*w.CPUSeconds, 0.7*w.GoBusy, 0.7*w.GCSeconds
					for j := range w.Latency {
						w.Latency[j].Count = math.Round(w.Latency[j].Count * 0.7)
					}
				}
				if left == 0 && rng.Float64() < math.Min(stall, 1) {
					left = 1 + rng.Intn(5)
				}
				if left > 0 {
					w.Unready = 0.3 + 0.7*rng.Float64()
					left--
				}
				if restart > 0 {
					w.Restarts = float64(distuv.Poisson{Lambda: restart, Src: rng}.Rand())
				}
				if a == loopArm && p == loopPod && i >= loopFrom && i < loopFrom+20 && (i-loopFrom)%2 == 0 {
					w.Restarts++
					w.Unready = 1
				}
			}
		}
	}
}

// firstStop is the minute of window at which the guard's decision (the
// anytime-valid harm of Analyze, alone: harmEvidence on the grid Analyze
// builds) first stops arm 1 at 5%, -1 never.
func firstStop(in Input) int {
	ev := harmOf(in)
	return ev.First
}

func harmOf(in Input) HarmEvidence {
	newGrid(in.Arms)
	n := len(in.Arms[0].Windows[0])
	return harmEvidence(&in.Arms[1], &in.Arms[0], n, DefaultHarm(), in.Have, in.Seed, 1/0.05)
}

// wilson is the 95% Wilson interval of k in n.
func wilson(k, n int) (lo, hi float64) {
	z := 1.959963984540054
	p, nn := float64(k)/float64(n), float64(n)
	c := (p + z*z/(2*nn)) / (1 + z*z/nn)
	h := z * math.Sqrt(p*(1-p)/nn+z*z/(4*nn*nn)) / (1 + z*z/nn)
	return math.Max(0, c-h), math.Min(1, c+h)
}

// TestAAHarmFalseStopRate is issue 53's measure of the guard's harm
// tests: sequential A/A experiments of 2 hours (120 one-minute windows,
// every window a look), 2 pods an arm with lasting offsets in latency
// and CPU (synth's podSpread) and in how often they stall, stalls of 1-5
// windows, rare restarts, one pod crash-looping for 20 minutes in 30%
// of experiments, 0.1% errors, and unequal traffic (30% less to one
// arm) in half. A stop at any window is false. It also measures the
// power and the time to stop of a harmful arm: p99 ×1.6 (the margin is
// 1.25×), 2× the restarts, unready half the time.
// docs/results/experiment.md quotes its log:
//
//	GOFIT_AA_HARM=1000 go test ./cmd/gofit/internal/experiment -run TestAAHarmFalseStopRate -v
//
// The default run is 1000 experiments as well (about a minute on a
// loaded 2-core machine); it fails when the 95% interval's upper end of
// the false-stop rate is above 5%.
func TestAAHarmFalseStopRate(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: 1000 simulated sequential experiments")
	}
	experiments := 1000
	if v, err := strconv.Atoi(os.Getenv("GOFIT_AA_HARM")); err == nil && v >= 100 {
		experiments = v
	}
	hw := harmWorld{stall: 0.02, restart: 0.01, crashLoop: 0.3, unequal: 0.5}
	const n = 120
	false_ := 0
	for e := range experiments {
		rng := rand.New(rand.NewSource(int64(90_000 + e)))
		in := synth(rng, n, []arm{{name: "a", latency: 1, cpu: 1, oomInWindow: -1, podSpread: aaPodSpread}, {name: "a-again", latency: 1, cpu: 1, oomInWindow: -1, podSpread: aaPodSpread}})
		hw.apply(rng, &in, 1, 1)
		in.Seed = int64(e)
		if ev := harmOf(in); ev.First >= 0 {
			false_++
			t.Logf("A/A experiment %d: stopped at minute %d: %v", e, ev.First+1, ev.reasons(ev.First, n-1))
		}
	}
	lo, hi := wilson(false_, experiments)
	t.Logf("%d A/A experiments, 2 pods an arm, %d one-minute windows: false stops %d (%.2f%%, 95%% interval %.2f%% to %.2f%%)", experiments, n, false_, 100*float64(false_)/float64(experiments), 100*lo, 100*hi)
	if hi > 0.05 {
		t.Errorf("false stops in %d of %d A/A experiments: the 95%% interval's upper end %.2f%% is above 5%%", false_, experiments, 100*hi)
	}
	// Power and time to stop.
	power := experiments / 5
	for _, h := range []struct {
		name            string
		latency         float64
		stall, restarts float64
		unreadyHalf     bool
	}{
		{"p99 ×1.6", 1.6, 1, 1, false},
		{"2× restarts", 1, 1, 2, false},
		{"unready 50%", 1, 1, 1, true},
	} {
		stopped := 0
		var mins []float64
		for e := range power {
			rng := rand.New(rand.NewSource(int64(190_000 + e)))
			in := synth(rng, n, []arm{{name: "a", latency: 1, cpu: 1, oomInWindow: -1, podSpread: aaPodSpread}, {name: "h", latency: h.latency, cpu: 1, oomInWindow: -1, podSpread: aaPodSpread}})
			hw.apply(rng, &in, h.stall, h.restarts)
			if h.unreadyHalf {
				for _, ws := range in.Arms[1].Windows {
					for i := range ws {
						if rng.Float64() < 0.5 {
							ws[i].Unready = 1
						}
					}
				}
			}
			in.Seed = int64(e)
			if at := firstStop(in); at >= 0 {
				stopped++
				mins = append(mins, float64(at+1))
			}
		}
		lo, hi := wilson(stopped, power)
		med := math.NaN()
		if len(mins) > 0 {
			sortFloats(mins)
			med = mins[len(mins)/2]
		}
		t.Logf("%-12s stopped in %d of %d (%.1f%%, 95%% interval %.1f%% to %.1f%%), median minute %v", h.name, stopped, power, 100*float64(stopped)/float64(power), 100*lo, 100*hi, med)
	}
	_ = time.Minute
}

func sortFloats(xs []float64) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

package stats

import (
	"math"
	"math/rand"
	"slices"
)

// Stat picks the statistic a comparison is about.
type Stat int

// The statistics compared.
const (
	StatRPS Stat = iota // successful requests per second; higher is better
	StatP99             // 99th-percentile latency; lower is better
)

// Margin is how close to 1 a ratio's whole interval must lie for "same"
// to count as decided: p99 is the noisier statistic.
func (st Stat) Margin() float64 {
	if st == StatP99 {
		return 0.10
	}
	return 0.05
}

// Verdicts of a setting against its baseline.
const (
	Better = "better"
	Worse  = "worse"
	Same   = "same"
)

// Interval is a point estimate and its bootstrap interval (95% unless
// Bootstrap.Alpha says otherwise).
type Interval struct {
	// snake_case like the rest of the lab's results.json.
	Value float64 `json:"value"`
	Low   float64 `json:"ci_low"`
	High  float64 `json:"ci_high"`
}

// Finite reports whether all three numbers are finite (JSON can carry
// them).
func (iv Interval) Finite() bool {
	for _, v := range []float64{iv.Value, iv.Low, iv.High} {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return false
		}
	}
	return true
}

// Verdict is RatioVerdict for the lab's statistics (requests/s improve
// upwards, the rest downwards), said the lab's way: an undecided interval
// reads "same", with decided false while it is wider than ±margin and
// more repeats could still tell the two apart. One rule serves both.
func Verdict(r Interval, st Stat, margin float64) (verdict string, decided bool) {
	if v := RatioVerdict(r, st.Direction(), margin); v != Undecided {
		return v, true
	}
	return Same, false
}

// Direction is the way st improves.
func (st Stat) Direction() Direction {
	if st == StatRPS {
		return HigherIsBetter
	}
	return LowerIsBetter
}

// Bootstrap draws resamples with a fixed seed, so a report can be
// reproduced from its results.
type Bootstrap struct {
	Resamples int
	// Alpha is the two-sided error rate of every interval it draws: 0.05
	// for 95%. A procedure that looks at an interval several times before
	// it stops divides its 5% among the looks (see the lab's CPU study
	// and the experiments' confidence sequence); how an interval is read
	// at any α is the core's one rule (core.go).
	Alpha  float64
	rng    *rand.Rand
	counts []int32 // scratch: one resample's latency histogram
}

// NewBootstrap returns a Bootstrap of n resamples seeded with seed, whose
// intervals are 95% ones.
func NewBootstrap(n int, seed int64) *Bootstrap {
	return &Bootstrap{Resamples: n, Alpha: 0.05, rng: rand.New(rand.NewSource(seed))}
}

// CI is the percentile interval of st over resamples of s (runs, then
// blocks within them), at level 1−b.Alpha and not widened: a cell's own
// figure for its report, which no verdict reads.
func (b *Bootstrap) CI(s Sample, st Stat) Interval {
	p := prepare(s, st)
	v := b.of(p.all(), st)
	if s.Blocks() < 2 {
		return Interval{Value: v, Low: v, High: v}
	}
	buf := make([]*pblock, 0, s.Blocks())
	return b.interval(v, draws{resample: func() float64 {
		buf = b.resample(p, buf[:0])
		return b.of(buf, st)
	}})
}

// MinRuns is the fewest runs a side a verdict may rest on. Two were too
// few on a shared machine: resampling two runs has three distinct
// outcomes, so a neighbour's burst that fell on both runs of one setting
// and neither of the other decided a verdict that the next study reversed
// (go-httpbin, gomaxprocs=ncpu at 500m, open loop: worse, then better,
// docs/results/lab-real-services.md). With three, one bursty run widens
// the interval instead, and the adaptive repeats get their chance.
const MinRuns = 3

// Ratio is the interval of st(a)/st(base), resampling both independently.
// With fewer than MinRuns runs or MinBlocks blocks on a side the interval
// is (-Inf, +Inf): too few runs cannot show how runs differ, and a handful
// of blocks has a handful of distinct resamples.
func (b *Bootstrap) Ratio(a, base Sample, st Stat) Interval {
	ok := len(a) >= MinRuns && len(base) >= MinRuns
	return b.ratio(a, base, st, ok, runsLevel(min(len(a), len(base))), func(pa, pb prepared, ba, bb []*pblock) ([]*pblock, []*pblock) {
		return b.resample(pa, ba), b.resample(pb, bb)
	})
}

// PairedRatio is the interval of st(a)/st(base) where a[i] and base[i]
// ran side by side (a reference run and the run under test, one moment of
// a shared machine): each resample draws whole pairs, then blocks within
// each run, so that moment stays out of the ratio's spread, as in a paired
// test. Its interval is at b.Alpha and widened for the pairs it rests on
// as Ratio's is for its runs a side (Expansion): the health trials' A/A
// simulation (lab's TestHealthAAFalseVerdictRate) keeps its false
// verdicts under 5% with it. Unequal lengths, fewer
// than two pairs or fewer than MinBlocks blocks a side give (-Inf, +Inf).
func (b *Bootstrap) PairedRatio(a, base Sample, st Stat) Interval {
	ok := len(a) == len(base) && len(a) >= 2
	return b.ratio(a, base, st, ok, runsLevel(len(a)), func(pa, pb prepared, ba, bb []*pblock) ([]*pblock, []*pblock) {
		for range pa {
			k := b.rng.Intn(len(pa))
			for range pa[k] {
				ba = append(ba, pa[k][b.rng.Intn(len(pa[k]))])
			}
			for range pb[k] {
				bb = append(bb, pb[k][b.rng.Intn(len(pb[k]))])
			}
		}
		return ba, bb
	})
}

// ratio is Ratio's and PairedRatio's draw: the estimate from all
// blocks; unless ok is false or a side has under MinBlocks blocks (then
// (-Inf, +Inf)), the core's interval (interval) over resamples each
// drawn by draw (appending to the two buffers it is given), widened for
// the runs or pairs few rests on.
func (b *Bootstrap) ratio(a, base Sample, st Stat, ok bool, few level, draw func(pa, pb prepared, ba, bb []*pblock) ([]*pblock, []*pblock)) Interval {
	pa, pb := prepare(a, st), prepare(base, st)
	v := safeDiv(b.of(pa.all(), st), b.of(pb.all(), st))
	if !ok || a.Blocks() < MinBlocks || base.Blocks() < MinBlocks {
		return Interval{Value: v, Low: math.Inf(-1), High: math.Inf(1)}
	}
	ba := make([]*pblock, 0, a.Blocks())
	bb := make([]*pblock, 0, base.Blocks())
	return b.interval(v, draws{few: few, resample: func() float64 {
		ba, bb = draw(pa, pb, ba[:0], bb[:0])
		return safeDiv(b.of(ba, st), b.of(bb, st))
	}})
}

// Latency quantiles in resamples are read from a histogram of log-spaced
// bins 0.5% wide, not by sorting every resample's latencies: at 16,000
// requests a second a cell pools ~10⁵ latencies, and a thousand sorts of
// them per interval kept a study busy for minutes between its windows.
// A bin's value is its geometric middle, within 0.25% of every latency
// in it.
const (
	binMinMs   = 0.001 // 1µs; anything faster shares the first bin
	binLogStep = 0.004987541511038968
	binCount   = 4156 // up to 10⁶ ms
)

func binOf(ms float32) int32 {
	if !(ms > binMinMs) {
		return 0
	}
	i := int(math.Log(float64(ms)/binMinMs) / binLogStep)
	return int32(min(i, binCount-1))
}

func binValue(i int) float64 { return binMinMs * math.Exp((float64(i)+0.5)*binLogStep) }

// pblock is a Block prepared for resampling: its latencies as sparse
// histogram bins.
type pblock struct {
	sec  float64
	ok   int
	n    int
	bins []bin
}

type bin struct{ i, n int32 }

type prepared [][]*pblock

func (p prepared) all() []*pblock {
	var out []*pblock
	for _, r := range p {
		out = append(out, r...)
	}
	return out
}

func prepare(s Sample, st Stat) prepared {
	p := make(prepared, len(s))
	for i, run := range s {
		p[i] = make([]*pblock, len(run))
		for j, b := range run {
			pb := &pblock{sec: b.Seconds, ok: b.OK, n: len(b.Lat)}
			if st == StatP99 && len(b.Lat) > 0 {
				idx := make([]int32, len(b.Lat))
				for k, ms := range b.Lat {
					idx[k] = binOf(ms)
				}
				slices.Sort(idx)
				for _, x := range idx {
					if l := len(pb.bins); l > 0 && pb.bins[l-1].i == x {
						pb.bins[l-1].n++
					} else {
						pb.bins = append(pb.bins, bin{x, 1})
					}
				}
			}
			p[i][j] = pb
		}
	}
	return p
}

// resample draws runs with replacement, then blocks within each drawn
// run, appending them to buf.
func (b *Bootstrap) resample(p prepared, buf []*pblock) []*pblock {
	for range p {
		run := p[b.rng.Intn(len(p))]
		for range run {
			buf = append(buf, run[b.rng.Intn(len(run))])
		}
	}
	return buf
}

func (b *Bootstrap) of(bs []*pblock, st Stat) float64 {
	if st == StatRPS {
		var n, sec float64
		for _, x := range bs {
			n, sec = n+float64(x.ok), sec+x.sec
		}
		return perSecond(n, sec)
	}
	if b.counts == nil {
		b.counts = make([]int32, binCount)
	}
	// Only the bins between the lowest and highest latency are touched,
	// read and cleared again: a few hundred of the 4,156 on a service.
	n, lo, hi := 0, int32(binCount), int32(-1)
	for _, x := range bs {
		n += x.n
		for _, c := range x.bins {
			b.counts[c.i] += c.n
			lo, hi = min(lo, c.i), max(hi, c.i)
		}
	}
	if n == 0 {
		return 0
	}
	defer clear(b.counts[lo : hi+1])
	want := int32(rank(n, 0.99) + 1)
	var seen int32
	for i := lo; i <= hi; i++ {
		if seen += b.counts[i]; seen >= want {
			return binValue(int(i))
		}
	}
	return binValue(binCount - 1)
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

package lab

import (
	"math"
	"math/rand"
	"slices"
	"sort"
)

// blockSeconds is the length of the stretches a load window is cut into
// for the bootstrap. Requests close in time share a GC cycle, a throttled
// period or a noisy neighbour, so resampling single requests would treat
// them as independent and give intervals that are too narrow; a second
// spans ten CFS periods and several GC cycles of the sample.
const blockSeconds = 1.0

// minBlocks is the fewest blocks per side a comparison needs.
const minBlocks = 8

// Block is one stretch of a load window: what completed in it (closed
// loop) or what was sent in it (open loop), with every latency in ms,
// failed and cancelled requests included.
type Block struct {
	Seconds float64   // length of the stretch (the last one may be short)
	OK      int       // requests that succeeded
	Errors  int       // requests that failed or were cancelled
	Lat     []float32 // latency of every request counted, ms
}

// Sample is the measurements of one summary cell: the blocks of each of
// its repeats (runs). The bootstrap resamples at both levels, runs and
// then blocks within them, because on a shared machine one run can differ
// from the next (a neighbour's build, a migration) by more than the
// requests within a run suggest; resampling blocks alone would call such
// a run's excursion significant.
type Sample [][]Block

func (s Sample) blocks() int {
	n := 0
	for _, r := range s {
		n += len(r)
	}
	return n
}

func (s Sample) rps() float64 {
	var n, sec float64
	for _, r := range s {
		for _, b := range r {
			n += float64(b.OK)
			sec += b.Seconds
		}
	}
	if sec == 0 {
		return 0
	}
	return n / sec
}

func (s Sample) count() int {
	n := 0
	for _, r := range s {
		for _, b := range r {
			n += len(b.Lat)
		}
	}
	return n
}

// p99 is the 99th percentile of the pooled latencies (nearest rank).
func (s Sample) p99() float64 { return s.quantile(0.99) }

func (s Sample) quantile(q float64) float64 {
	return quantile32(s.latencies(), q)
}

func (s Sample) latencies() []float32 {
	all := make([]float32, 0, s.count())
	for _, r := range s {
		for _, b := range r {
			all = append(all, b.Lat...)
		}
	}
	return all
}

// quantile32 sorts xs in place and returns the nearest-rank quantile.
func quantile32(xs []float32, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return float64(xs[min(max(i, 0), len(xs)-1)])
}

// Stat picks the statistic a comparison is about.
type Stat int

// The statistics the lab compares.
const (
	StatRPS Stat = iota // higher is better
	StatP99             // lower is better
)

func (st Stat) of(s Sample) float64 {
	if st == StatRPS {
		return s.rps()
	}
	return s.p99()
}

// Verdicts of a setting against go-default at the same quota and mode.
const (
	Better = "better"
	Worse  = "worse"
	Same   = "same"
)

// Interval is a point estimate and its 95% bootstrap interval.
type Interval struct {
	// snake_case like the rest of results.json (verdict_ratio is one).
	Value float64 `json:"value"`
	Low   float64 `json:"ci_low"`
	High  float64 `json:"ci_high"`
}

func (iv Interval) finite() bool {
	for _, v := range []float64{iv.Value, iv.Low, iv.High} {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return false
		}
	}
	return true
}

// Bootstrap draws resamples of blocks with a fixed seed, so a report can
// be reproduced from its results.
type Bootstrap struct {
	Resamples int
	rng       *rand.Rand
}

// NewBootstrap returns a Bootstrap of n resamples seeded with seed.
func NewBootstrap(n int, seed int64) *Bootstrap {
	return &Bootstrap{Resamples: n, rng: rand.New(rand.NewSource(seed))}
}

// resample draws runs with replacement, then blocks within each drawn run.
func (b *Bootstrap) resample(s Sample, buf Sample) Sample {
	buf = buf[:len(s)]
	for i := range s {
		run := s[b.rng.Intn(len(s))]
		out := buf[i][:0]
		for range run {
			out = append(out, run[b.rng.Intn(len(run))])
		}
		buf[i] = out
	}
	return buf
}

func newBuf(s Sample) Sample { return make(Sample, len(s)) }

// CI is the percentile interval of st over block resamples of s.
func (b *Bootstrap) CI(s Sample, st Stat) Interval {
	iv := Interval{Value: st.of(s)}
	if s.blocks() < 2 {
		iv.Low, iv.High = iv.Value, iv.Value
		return iv
	}
	xs := make([]float64, b.Resamples)
	buf := newBuf(s)
	for i := range xs {
		buf = b.resample(s, buf)
		xs[i] = st.of(buf)
	}
	iv.Low, iv.High = percentiles(xs)
	return iv
}

// Ratio is the interval of st(a)/st(base), resampling both independently.
func (b *Bootstrap) Ratio(a, base Sample, st Stat) Interval {
	va, vb := st.of(a), st.of(base)
	iv := Interval{Value: safeDiv(va, vb)}
	if len(a) < 2 || len(base) < 2 || a.blocks() < minBlocks || base.blocks() < minBlocks {
		// One run cannot show how runs differ, and a handful of blocks
		// has a handful of distinct resamples: an interval from either
		// would look sure and mean nothing.
		iv.Low, iv.High = math.Inf(-1), math.Inf(1)
		return iv
	}
	xs := make([]float64, b.Resamples)
	ba, bb := newBuf(a), newBuf(base)
	for i := range xs {
		ba, bb = b.resample(a, ba), b.resample(base, bb)
		xs[i] = safeDiv(st.of(ba), st.of(bb))
	}
	iv.Low, iv.High = percentiles(xs)
	return iv
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

func percentiles(xs []float64) (lo, hi float64) {
	sort.Float64s(xs)
	at := func(q float64) float64 { return xs[min(int(q*float64(len(xs))), len(xs)-1)] }
	return at(0.025), at(0.975)
}

// Verdict reads a ratio interval (setting ÷ go-default): better or worse
// only when the interval excludes 1, otherwise same. decided is false while
// "same" rests on an interval wider than ±margin: more repeats could still
// tell the two apart.
func Verdict(r Interval, st Stat, margin float64) (verdict string, decided bool) {
	switch {
	case r.Low > 1:
		if st == StatRPS {
			return Better, true
		}
		return Worse, true
	case r.High < 1:
		if st == StatRPS {
			return Worse, true
		}
		return Better, true
	}
	return Same, r.Low >= 1-margin && r.High <= 1+margin
}

// blocksOf cuts latencies stamped with offsets from a window's start into
// blocks of blockSeconds; window is the window's length.
func blocksOf(stamps []stamp, window float64) []Block {
	n := int(math.Ceil(window / blockSeconds))
	if n < 1 {
		n = 1
	}
	bs := make([]Block, n)
	for i := range bs {
		bs[i].Seconds = math.Min(blockSeconds, window-float64(i)*blockSeconds)
	}
	// A stretch shorter than a third of a block would weigh a handful of
	// requests like a full second's worth: merge it into the one before.
	if n > 1 && bs[n-1].Seconds < blockSeconds/3 {
		bs[n-2].Seconds += bs[n-1].Seconds
		bs = bs[:n-1]
	}
	for _, s := range stamps {
		i := min(max(int(s.at/blockSeconds), 0), len(bs)-1)
		bs[i].Lat = append(bs[i].Lat, s.ms)
		if s.ok {
			bs[i].OK++
		} else {
			bs[i].Errors++
		}
	}
	return bs
}

// stamp is one request: when (seconds from the window's start), how long
// and whether it succeeded.
type stamp struct {
	at float64
	ms float32
	ok bool
}

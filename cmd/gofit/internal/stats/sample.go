package stats

import "math"

// BlockSeconds is the length of the stretches a load window is cut into
// for the bootstrap. Requests close in time share a GC cycle, a throttled
// period or a noisy neighbour, so resampling single requests would treat
// them as independent and give intervals that are too narrow; a second
// spans ten CFS periods and several GC cycles of a typical service.
const BlockSeconds = 1.0

// MinBlocks is the fewest blocks per side a comparison needs.
const MinBlocks = 8

// Block is one stretch of a load window: what completed in it (closed
// loop) or what was sent in it (open loop), with every latency in ms,
// failed and cancelled requests included.
type Block struct {
	Seconds float64   `json:"s"`      // length of the stretch (the last one may be short)
	OK      int       `json:"ok"`     // requests that succeeded
	Errors  int       `json:"errors"` // requests that failed or were cancelled
	Lat     []float32 `json:"lat"`    // latency of every request counted, ms
}

// Stamp is one request: when (seconds from the window's start), how long
// (ms) and whether it succeeded.
type Stamp struct {
	At float64
	Ms float32
	OK bool
}

// BlocksOf cuts requests stamped with offsets from a window's start into
// blocks of BlockSeconds; window is the window's length in seconds.
func BlocksOf(stamps []Stamp, window float64) []Block {
	n := max(int(math.Ceil(window/BlockSeconds)), 1)
	bs := make([]Block, n)
	for i := range bs {
		bs[i].Seconds = math.Min(BlockSeconds, window-float64(i)*BlockSeconds)
	}
	// A stretch shorter than a third of a block would weigh a handful of
	// requests like a full second's worth: merge it into the one before.
	if n > 1 && bs[n-1].Seconds < BlockSeconds/3 {
		bs[n-2].Seconds += bs[n-1].Seconds
		bs = bs[:n-1]
	}
	for _, s := range stamps {
		i := min(max(int(s.At/BlockSeconds), 0), len(bs)-1)
		bs[i].Lat = append(bs[i].Lat, s.Ms)
		if s.OK {
			bs[i].OK++
		} else {
			bs[i].Errors++
		}
	}
	return bs
}

// Sample is the measurements of one cell: the blocks of each of its
// repeats (runs). The bootstrap resamples at both levels, runs and then
// blocks within them, because on a shared machine one run can differ from
// the next (a neighbour's build, a migration) by more than the requests
// within a run suggest; resampling blocks alone would call such a run's
// excursion significant.
type Sample [][]Block

// Blocks is the number of blocks over all runs.
func (s Sample) Blocks() int {
	n := 0
	for _, r := range s {
		n += len(r)
	}
	return n
}

// RPS is the successful requests per second over all runs.
func (s Sample) RPS() float64 {
	var n, sec float64
	for _, r := range s {
		for _, b := range r {
			n, sec = n+float64(b.OK), sec+b.Seconds
		}
	}
	return perSecond(n, sec)
}

// perSecond is n per second of sec, 0 over no time.
func perSecond(n, sec float64) float64 {
	if sec == 0 {
		return 0
	}
	return n / sec
}

// Count is the number of latencies over all runs.
func (s Sample) Count() int {
	n := 0
	for _, r := range s {
		for _, b := range r {
			n += len(b.Lat)
		}
	}
	return n
}

// Quantile is the nearest-rank quantile of the pooled latencies, exact.
func (s Sample) Quantile(q float64) float64 { return Quantile32(s.Latencies(), q) }

// Latencies is a copy of every latency, pooled.
func (s Sample) Latencies() []float32 {
	all := make([]float32, 0, s.Count())
	for _, r := range s {
		for _, b := range r {
			all = append(all, b.Lat...)
		}
	}
	return all
}

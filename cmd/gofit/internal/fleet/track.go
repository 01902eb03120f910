package fleet

import "math"

// Track is one of a pod's series per step, held from the step of its
// first value (From) to the end of the chunk of its last, NaN where a step
// has none. A pod that lived a day of a week's window holds about a day,
// not a week of NaN: with a third of 2,500 Deployments rolled out once in
// the week, 6,668 pods ran for 5,000 containers (docs/results/fleet.md).
type Track struct {
	From int       // the step V[0] is
	V    []float32 // steps From, From+1, …
}

// At is step i's value, and whether it has one.
func (t Track) At(i int) (float64, bool) {
	j := i - t.From
	if j < 0 || j >= len(t.V) || math.IsNaN(float64(t.V[j])) {
		return 0, false
	}
	return float64(t.V[j]), true
}

// End is the step after the last one held.
func (t Track) End() int { return t.From + len(t.V) }

// Any reports whether any step has a value.
func (t Track) Any() bool {
	for _, v := range t.V {
		if !math.IsNaN(float64(v)) {
			return true
		}
	}
	return false
}

// Last is the last step with a value, or -1.
func (t Track) Last() int {
	for j := len(t.V) - 1; j >= 0; j-- {
		if !math.IsNaN(float64(t.V[j])) {
			return t.From + j
		}
	}
	return -1
}

// put sets step i to v. A step outside the track grows it: to end
// (exclusive; the end of the chunk being read, so a chunk's points cost
// one allocation, not one each) after it, or to i before it. Range
// queries hand a series' points in time order, chunk after chunk.
func (t *Track) put(i, end int, v float64) {
	switch {
	case t.V == nil:
		t.From, t.V = i, nans(max(end, i+1)-i)
	case i < t.From:
		grown := nans(t.End() - i)
		copy(grown[t.From-i:], t.V)
		t.From, t.V = i, grown
	case i >= t.End():
		grown := nans(max(end, i+1) - t.From)
		copy(grown, t.V)
		t.V = grown
	}
	t.V[i-t.From] = float32(v)
}

// nans is n steps without values.
func nans(n int) []float32 {
	s := make([]float32, n)
	nan := float32(math.NaN())
	for i := range s {
		s[i] = nan
	}
	return s
}

package stats

import "testing"

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Spread
	}{
		{[]float64{3, 1, 2}, Spread{Min: 1, Median: 2, Max: 3}},
		{[]float64{4, 1, 2, 3}, Spread{Min: 1, Median: 2.5, Max: 4}},
		{[]float64{5}, Spread{Min: 5, Median: 5, Max: 5}},
		{nil, Spread{}},
	} {
		if got := SpreadOf(tc.in); got != tc.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

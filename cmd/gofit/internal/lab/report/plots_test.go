package report

import "testing"

func TestLogTicksLabelNarrowRanges(t *testing.T) {
	for _, r := range [][2]float64{{70, 100}, {1, 1000}, {4.2, 4.9}} {
		n := 0
		for _, tk := range (logTicks{}).Ticks(r[0], r[1]) {
			if tk.Label != "" {
				n++
			}
		}
		if n < 2 {
			t.Errorf("log axis %v: %d labelled ticks, want at least 2", r, n)
		}
	}
}

package qoslab

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func TestHog(t *testing.T) {
	if err := Hog(context.Background(), 1, 0.2); err == nil {
		t.Error("tiny size accepted")
	}
	if err := Hog(context.Background(), 8<<20, 2); err == nil {
		t.Error("churn 2 accepted")
	}
	// A NaN churn must be refused at once, not run until the context ends.
	nanCtx, nanCancel := context.WithTimeout(context.Background(), time.Second)
	defer nanCancel()
	if err := Hog(nanCtx, 8<<20, math.NaN()); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("churn NaN: %v, want a --churn error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := Hog(ctx, 8<<20, 0.5); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hog ended with %v, want the context's end", err)
	}
}

func TestChangeAndQuantile(t *testing.T) {
	c := change([]float64{10, 11, 9}, []float64{5, 5.5, 4.5})
	if c[0] != -0.5 || c[1] > c[0] || c[2] < c[0] || c[2] >= 0 {
		t.Errorf("change %v: want -50%% inside an interval that excludes 0", c)
	}
	// One trial a mode: no interval to speak of.
	if c := change([]float64{10}, []float64{5}); c != [3]float64{-0.5, -0.5, -0.5} {
		t.Errorf("change of single trials %v, want the estimate at both ends", c)
	}
	if q := quantile([]float64{1, 2, 3, 4}, 0.5); q != 2 {
		t.Errorf("median %v", q)
	}
}

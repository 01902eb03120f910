package qoslab

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
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

// blocks is n one-second blocks of rps requests at ms each.
func blocks(n, rps int, ms float32) []stats.Block {
	bs := make([]stats.Block, n)
	for i := range bs {
		bs[i] = stats.Block{Seconds: 1, OK: rps, Lat: make([]float32, rps)}
		for j := range bs[i].Lat {
			bs[i].Lat[j] = ms * (1 + float32(j%10)/10)
		}
	}
	return bs
}

// The experiment's comparison is the lab's: a ratio interval over trials
// and blocks, and a verdict only where it excludes "no change".
func TestChange(t *testing.T) {
	boot := stats.NewBootstrap(500, 1)
	off := stats.Sample{blocks(8, 100, 10), blocks(8, 100, 11), blocks(8, 100, 9)}
	auto := stats.Sample{blocks(8, 100, 5), blocks(8, 100, 5.5), blocks(8, 100, 4.5)}
	c, v := change(boot, auto, off, stats.StatP99)
	if math.Abs(c[0]+0.5) > 0.01 || c[1] > c[0] || c[2] < c[0] || c[2] >= 0 || v != stats.Better {
		t.Errorf("p99 change %v (%s): want -50%% inside an interval that excludes 0, better", c, v)
	}
	if c, v := change(boot, auto, off, stats.StatRPS); c[0] != 0 || v != stats.Same {
		t.Errorf("rps change %v (%s): want 0, same", c, v)
	}
	// One trial a mode: no interval to speak of.
	c, v = change(boot, auto[:1], off[:1], stats.StatP99)
	if c[0] != c[1] || c[1] != c[2] || v != "" {
		t.Errorf("change of single trials %v (%q), want the estimate at both ends and no verdict", c, v)
	}
}

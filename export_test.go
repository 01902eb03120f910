package gofit

import (
	"time"

	"github.com/gofit-dev/gofit/internal/seam"
)

// The test seams, as this package's tests write them.
func withRoot(dir string) Option { return withSeams(seam.Seams{Root: dir}) }
func withLookupEnv(lookup func(string) (string, bool)) Option {
	return withSeams(seam.Seams{LookupEnv: lookup})
}
func withTicker(t func(time.Duration) (<-chan time.Time, func())) Option {
	return withSeams(seam.Seams{Ticker: t})
}

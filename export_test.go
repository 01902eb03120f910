package gofit

import "time"

// withTicker drives refreshes by hand; the memory watch is then off unless
// withWatch turns it on after it.
func withTicker(t func(time.Duration) (<-chan time.Time, func())) Option {
	return func(c *config) { c.ticker, c.watch = t, nil }
}

// withWatch replaces the memory watch's clock.
func withWatch(w func(time.Duration) (<-chan time.Time, func())) Option {
	return func(c *config) { c.watch = w }
}

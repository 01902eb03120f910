// Package seam carries the runtime library's test seams (the directory
// /proc and /sys are read under, the environment lookup, the refresh clock)
// from gofit's own packages and their tests to package gofit, without
// putting them in its public API.
package seam

import "time"

// Seams replace what the runtime library reads from the real system. Zero
// fields keep the real thing.
type Seams struct {
	// Root is the directory /proc and /sys are read under ("" for "/").
	Root string
	// LookupEnv replaces os.LookupEnv for GOFIT and the Go runtime's
	// variables (fit.VarNames).
	LookupEnv func(string) (string, bool)
	// Ticker replaces the clock that drives refreshes: it returns a channel
	// of ticks and a stop function.
	Ticker func(time.Duration) (<-chan time.Time, func())
	// Watch replaces the clock of the memory watch (gofit.MemoryWatch).
	// Setting Ticker alone turns the watch off.
	Watch func(time.Duration) (<-chan time.Time, func())
}

// Option turns seams into a gofit.Option. Package gofit sets it when it is
// initialised; it is typed any because this package cannot import gofit.
var Option func(Seams) any

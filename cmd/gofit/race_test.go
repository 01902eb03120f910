//go:build race

package main

// raceEnabled: the race detector's shadow memory sits outside the Go
// heap, so a process measured for non-Go memory carries it too.
const raceEnabled = true

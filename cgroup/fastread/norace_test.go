//go:build !race

package fastread

const raceEnabled = false

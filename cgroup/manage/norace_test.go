//go:build !race

package manage

const raceEnabled = false

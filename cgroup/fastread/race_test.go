//go:build race

package fastread

// raceEnabled: the race detector makes buffers passed to syscalls escape,
// so allocation counts do not hold under it.
const raceEnabled = true

//go:build race

package manage

// raceEnabled: the race detector makes buffers passed to syscalls escape,
// so allocation counts do not hold under it.
const raceEnabled = true

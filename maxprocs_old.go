//go:build !go1.25

package gofit

// setDefaultGOMAXPROCS is unavailable before Go 1.25.
var setDefaultGOMAXPROCS func()

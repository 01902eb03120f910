//go:build go1.25

package gofit

import "runtime"

// setDefaultGOMAXPROCS hands GOMAXPROCS back to the runtime's own
// container-aware default, which then follows the cgroup again.
var setDefaultGOMAXPROCS = runtime.SetDefaultGOMAXPROCS

package gofit

import (
	"os"
	"runtime"
	"runtime/debug"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

// goEnvVars are the variables fit reads from the environment.
var goEnvVars = []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG"}

// Env returns the Go runtime variables set in the environment, for fit.Input.
func Env(lookup func(string) (string, bool)) map[string]string {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env := map[string]string{}
	for _, k := range goEnvVars {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	return env
}

// SelfInput describes the calling process for fit.Compute: its limits, the
// CPUs it may use, its Go runtime variables and its Go version.
func SelfInput(l cgroup.Limits) fit.Input {
	in := fit.Input{
		Limits:    l,
		CPUs:      AffinityCPUs(),
		Env:       Env(nil),
		GoVersion: runtime.Version(),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		in.DefaultGODEBUG = buildSetting(bi, "DefaultGODEBUG")
	}
	return in
}

func buildSetting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

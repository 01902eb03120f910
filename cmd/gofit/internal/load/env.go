package load

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit/fit"
)

// CleanEnv is this process's environment without the Go runtime
// variables, so a service started with it gets exactly the setting a
// trial gives it. GOFIT_RUN goes too: a lab started under `gofit run`
// carries one, and a target importing gofit's auto package would take a
// trial's GOMAXPROCS=1 for gofit's own value and follow the cgroup.
func CleanEnv() []string {
	env, _ := WithoutRuntimeVars(os.Environ())
	return env
}

// WithoutRuntimeVars is env without the variables the lab's settings
// set (GOMAXPROCS, GOMEMLIMIT, GOGC, GODEBUG, GOFIT and gofit's marker),
// and the names it took out: one left in would become every trial's
// setting, the baseline's too.
func WithoutRuntimeVars(env []string) (kept, dropped []string) {
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", "GOFIT", fit.MarkerVar:
			dropped = append(dropped, k)
			continue
		}
		kept = append(kept, kv)
	}
	return kept, dropped
}

// FreePort is a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// SelfCPU is the CPU time this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

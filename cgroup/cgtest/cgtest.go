// Package cgtest creates real cgroups for integration tests (cgrouptest,
// beside it, writes fake cgroup trees instead). It skips the
// test, with a one-line reason, only where the machine cannot allow it (not
// root, no cgroupfs, a read-only or permission-denied cgroupfs); any other
// failure to create a group fails the test. It removes what it made when the
// test ends, pass or fail.
//
// It is public because every one of gofit's modules has such tests: the
// library's, the gofit command's, the node agent's (module kube) and the
// Prometheus rule tests (module tools). It is not meant for other projects:
// it may change with them.
package cgtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

var seq atomic.Int64

// Prefix starts the name of every cgroup the tests create.
const Prefix = "gofit-test-"

// NewGroup creates a child of the test process's own cgroups, or skips.
func NewGroup(t testing.TB) *manage.Group {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: creating cgroups needs root")
	}
	self, err := cgroup.NewFS("/").Self()
	if errors.Is(err, cgroup.ErrNoCgroup) {
		t.Skipf("skipping: no cgroups here: %v", err)
	}
	if err != nil {
		t.Fatalf("find this process's cgroups: %v", err)
	}
	g, err := manage.NewChild(self, fmt.Sprintf("%s%d-%d", Prefix, os.Getpid(), seq.Add(1)))
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		t.Skipf("skipping: cannot create a cgroup here: %v", err)
	}
	if err != nil {
		t.Fatalf("create a test cgroup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Remove(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return g
}

// NeedV2 skips the test, with one line, unless g's memory controller is on
// cgroup v2 (where memory.min, memory.high, memory.oom.group and per-group
// PSI exist). `make test-v2` runs such tests on a v2 kernel in a VM.
func NeedV2(t testing.TB, g *manage.Group) {
	t.Helper()
	if g.Memory == nil || g.Memory.Version != 2 {
		t.Skip("skipping: needs the memory controller on cgroup v2 (make test-v2 runs it in a VM)")
	}
}

// Spin keeps one CPU busy for at least wall of wall time and at least cpu
// of this process's CPU time, giving up after a minute. A helper process
// spinning in a test group then uses a known amount of CPU however busy
// the machine is: other work may take the CPUs away for a while, and a
// loop timed by the wall clock alone would then use too little to be
// throttled or counted.
func Spin(wall, cpu time.Duration) {
	start := time.Now()
	for time.Since(start) < wall || cpuTime() < cpu && time.Since(start) < time.Minute {
	}
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

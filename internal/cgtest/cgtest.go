// Package cgtest creates real cgroups for integration tests. It skips the
// test, with a one-line reason, where the machine does not allow it, and
// removes what it made when the test ends, pass or fail.
package cgtest

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
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
	if err != nil {
		t.Skipf("skipping: no cgroups here: %v", err)
	}
	g, err := manage.NewChild(self, fmt.Sprintf("%s%d-%d", Prefix, os.Getpid(), seq.Add(1)))
	if err != nil {
		t.Skipf("skipping: cannot create a cgroup here: %v", err)
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

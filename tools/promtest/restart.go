package promtest

import (
	"context"
	"errors"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Restarting is a service StartRestarting keeps running as the kubelet
// keeps a container: started again in the same cgroup after each exit,
// after the kubelet's crash-loop back-off.
type Restarting struct {
	Process
	mu          sync.Mutex
	restarts    int
	ends        int
	lastOOM     bool
	first, last time.Time
}

// Restarts is how many times the service was started again: the
// kubelet's restart count, which grows when it starts the next container,
// after the back-off, not when one ends.
func (r *Restarting) Restarts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

// Ends is how many times the service ended, whether its last end was a
// SIGKILL (in a test, the kernel's OOM killer: nothing else kills it),
// and when it first and last ended (zero before): what the kubelet
// writes as a container's last termination as soon as it ends.
func (r *Restarting) Ends() (n int, lastOOM bool, first, last time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ends, r.lastOOM, r.first, r.last
}

// Back-off between restarts, as the kubelet's for a crash-looping
// container: 10 s, doubled after each restart, at most 5 minutes.
const (
	restartBackoff    = 10 * time.Second
	restartBackoffMax = 5 * time.Minute
)

// StartRestarting is StartProcess for a service that may end (an OOM
// kill at its memory limit): it is started again at the same address in
// the same cgroup after the back-off, until the test ends, when it is
// killed before its cgroup is removed.
func StartRestarting(t testing.TB, exe, name string, lim Limits, env []string) *Restarting {
	t.Helper()
	g, paths := newGroup(t, lim)
	addr := freeLocal(t)
	logf := serviceLog(t, name)
	r := &Restarting{Process: Process{Addr: addr, Cgroups: paths}}
	ctx, cancel := context.WithCancel(context.Background())
	var cmd *exec.Cmd // the running one, under r.mu
	start := func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c := serviceCommand(g, []string{exe, "-addr", addr}, env, logf)
		if err := c.Start(); err != nil {
			return err
		}
		cmd = c
		return nil
	}
	if err := start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := restartBackoff
		for {
			r.mu.Lock()
			c := cmd
			r.mu.Unlock()
			err := c.Wait()
			if ctx.Err() != nil {
				return
			}
			var ee *exec.ExitError
			oom := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
			r.mu.Lock()
			r.ends++
			r.lastOOM = oom
			r.last = time.Now()
			if r.first.IsZero() {
				r.first = r.last
			}
			r.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, restartBackoffMax)
			if start() != nil {
				return
			}
			r.mu.Lock()
			r.restarts++
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		r.mu.Lock()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		r.mu.Unlock()
		<-done
		closeLog(t, name, logf)
	})
	waitMetrics(t, name, addr)
	return r
}

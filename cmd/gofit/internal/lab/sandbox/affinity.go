package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"golang.org/x/sys/unix"
)

// placement is a Placement with what pinning needs: the target's and the
// generator's CPU sets, and whether the lab's threads are pinned now.
type placement struct {
	*result.Placement

	mu       sync.Mutex
	all, gen unix.CPUSet
	pinned   bool
}

// planPlacement decides the CPUs. cpus is the lab's mask at start; need
// is the fewest CPUs the target must see so that no setting's GOMAXPROCS
// changes (Go ≥ 1.25 never defaults below 2, and a quota of q cores asks
// for ceil(q)). reserve is how many CPUs the generator takes.
func planPlacement(cpus []int, need, reserve int) *placement {
	p := &placement{Placement: &result.Placement{}}
	for _, c := range cpus {
		p.all.Set(c)
	}
	if len(cpus) == 0 {
		p.Note = "the lab could not read its CPU affinity; the generator and the target share every CPU"
		return p
	}
	reserve = min(max(reserve, 1), len(cpus))
	// The generator takes the highest-numbered CPUs: CPU 0 is where the
	// kernel's housekeeping tends to run.
	gen := cpus[len(cpus)-reserve:]
	rest := cpus[:len(cpus)-reserve]
	p.Generator = append([]int(nil), gen...)
	for _, c := range gen {
		p.gen.Set(c)
	}
	if len(rest) >= need && len(rest) > 0 {
		p.Target = append([]int(nil), rest...)
		p.Isolated = true
		p.Note = fmt.Sprintf("the load generator ran on CPU %s; the target on CPU %s, as a container on a node that reserves CPU %s for system daemons (kubelet --reserved-cpus) would; every setting keeps its GOMAXPROCS",
			result.CPUList(gen), result.CPUList(rest), result.CPUList(gen))
		p.all = unix.CPUSet{}
		for _, c := range rest {
			p.all.Set(c)
		}
		return p
	}
	p.Target = append([]int(nil), cpus...)
	p.Overlap = len(gen)
	p.Note = fmt.Sprintf("not isolated: the target needs all %d CPUs to keep its GOMAXPROCS (Go's default reads the CPUs in its affinity mask), so the load generator, pinned to CPU %s, shares %d of them with it; measured figures include that contention (see overlap_share per cell)",
		len(cpus), result.CPUList(gen), len(gen))
	return p
}

// affinityCPUs lists the CPUs in the calling thread's mask.
func affinityCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var out []int
	for c := 0; c < 1024 && len(out) < set.Count(); c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}

// pin moves every thread of the lab process onto the generator's CPUs.
// New threads inherit their creator's mask, so pinning again before each
// window catches threads the runtime started since.
func (p *placement) pin() error {
	if p == nil || len(p.Generator) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("pin the load generator: %w", err)
	}
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// A thread may exit between the listing and the call.
		if err := unix.SchedSetaffinity(tid, &p.gen); err != nil && err != unix.ESRCH {
			return fmt.Errorf("pin the load generator to CPU %s: %w", result.CPUList(p.Generator), err)
		}
	}
	p.pinned = true
	return nil
}

// unpin gives the lab's threads the whole mask back.
func (p *placement) unpin(all []int) {
	if p == nil || !p.pinned {
		return
	}
	var set unix.CPUSet
	for _, c := range all {
		set.Set(c)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	tids, _ := os.ReadDir("/proc/self/task")
	for _, t := range tids {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			unix.SchedSetaffinity(tid, &set)
		}
	}
	p.pinned = false
}

// startOnTargetCPUs runs start on a thread whose mask is the target's, so
// the child forked there (and the program it execs) inherits the target's
// CPUs, not the pinned generator's. The thread stays alive afterwards:
// Pdeathsig fires when the forking thread exits, not the process.
func (p *placement) startOnTargetCPUs(start func() error) error {
	if p == nil || !p.pinned {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p.mu.Lock()
	err := unix.SchedSetaffinity(0, &p.all)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("give the target CPU %s: %w", result.CPUList(p.Target), err)
	}
	serr := start()
	p.mu.Lock()
	unix.SchedSetaffinity(0, &p.gen)
	p.mu.Unlock()
	return serr
}

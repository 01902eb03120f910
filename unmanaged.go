package gofit

import (
	"errors"
	"log/slog"
	"runtime/metrics"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/procmem"
)

// nonGoStep quantises each part of the non-Go estimate so that small
// wobbles do not recompute the plan on every refresh.
const nonGoStep = 1 << 20

// nonGoMeter estimates, refresh after refresh, the memory charged on the
// process's behalf outside the Go runtime. A Fitter holds one and uses it
// under its lock.
type nonGoMeter struct {
	mem      *procmem.Reader
	now      func() time.Time
	goMemory func() int64 // what the Go runtime has mapped and not released
	log      *slog.Logger

	anon     window         // anonymous memory outside the Go runtime, last minute
	kernel   window         // the cgroup's kernel memory, last minute
	file     fit.FileBudget // the hot part of the mapped file pages
	noRollup bool           // smaps_rollup is missing: non-Go memory is not measured
}

func (m *nonGoMeter) close() { m.mem.Close() }

// measure estimates the memory charged on this process's behalf that
// GOMEMLIMIT does not bound and the kernel cannot simply reclaim, in its
// parts (fit.NonGo):
//
//   - anonymous memory outside the Go runtime: smaps_rollup Anonymous less
//     what the Go runtime has mapped and not released (cgo, off-heap mmap,
//     foreign thread stacks);
//   - the cgroup's kernel memory;
//   - the hot part of the file pages the process maps (smaps_rollup Rss
//     less Anonymous), kept by fit.FileBudget from the cgroup's file
//     refaults and major faults.
//
// Anonymous and kernel memory are the largest of the last minute; each
// part is rounded up to 1 MiB. Page cache the process only read through is
// not counted, nor is another process in the same cgroup.
func (n *nonGoMeter) measure(cg *cgroup.Cgroups) (fit.NonGo, error) {
	if n.noRollup {
		return fit.NonGo{}, nil
	}
	u, err := n.mem.Read()
	if errors.Is(err, procmem.ErrUnsupported) {
		n.noRollup = true
		n.log.Info("gofit: memory outside the Go heap not measured; GOMEMLIMIT from the memory ratio alone", "err", err)
		return fit.NonGo{}, nil
	}
	if err != nil {
		return fit.NonGo{}, err
	}
	m, err := cg.MemoryStats()
	if err != nil {
		return fit.NonGo{}, err
	}
	now := n.now()
	anon := n.anon.add(now, max(u.Anonymous-n.goMemory(), 0))
	kernel := n.kernel.add(now, int64(min(m.Kernel, 1<<60)))
	n.file = n.file.Next(fit.FileSample{At: now, Resident: max(u.Rss-u.Anonymous, 0), Faults: m.FileRefaults + m.MajorFaults})
	up := func(x int64) int64 { return (x + nonGoStep - 1) / nonGoStep * nonGoStep }
	return fit.NonGo{Anon: up(anon), Kernel: up(kernel), HotFile: up(n.file.Bytes)}, nil
}

// newGoMemory returns a reader of the memory the Go runtime has mapped and
// not released to the OS.
func newGoMemory() func() int64 {
	samples := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	return func() int64 {
		metrics.Read(samples)
		if samples[0].Value.Kind() != metrics.KindUint64 || samples[1].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(min(samples[0].Value.Uint64()-samples[1].Value.Uint64(), 1<<62))
	}
}

// window is the maximum of the samples of the last minute, kept as the
// largest sample of each of the last 60 seconds, with no allocation.
type window struct {
	sec  [60]int64 // the Unix second each slot holds
	val  [60]int64
	used [60]bool
}

func (w *window) add(now time.Time, x int64) int64 {
	s := now.Unix()
	i := (s%60 + 60) % 60
	if !w.used[i] || w.sec[i] != s {
		w.sec[i], w.val[i], w.used[i] = s, x, true
	} else {
		w.val[i] = max(w.val[i], x)
	}
	m := int64(0)
	for j := range w.val {
		if w.used[j] && w.sec[j] <= s && s-w.sec[j] < 60 {
			m = max(m, w.val[j])
		}
	}
	return m
}

package gofit

import (
	"errors"
	"runtime/metrics"
	"time"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/procmem"
)

// nonGoStep quantises each part of the non-Go estimate so that small
// wobbles do not recompute the plan on every refresh.
const nonGoStep = 1 << 20

// measureNonGo estimates the memory charged on this process's behalf that
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
func (f *Fitter) measureNonGo() (fit.NonGo, error) {
	if f.noRollup {
		return fit.NonGo{}, nil
	}
	u, err := f.mem.Read()
	if errors.Is(err, procmem.ErrUnsupported) {
		f.noRollup = true
		f.log.Info("gofit: memory outside the Go heap not measured; GOMEMLIMIT from the memory ratio alone", "err", err)
		return fit.NonGo{}, nil
	}
	if err != nil {
		return fit.NonGo{}, err
	}
	m, err := f.cg.MemoryStats()
	if err != nil {
		return fit.NonGo{}, err
	}
	now := f.cfg.now()
	anon := f.anon.add(now, max(u.Anonymous-f.cfg.goMemory(), 0))
	kernel := f.kernel.add(now, int64(min(m.Kernel, 1<<60)))
	f.file = f.file.Next(fit.FileSample{At: now, Resident: max(u.Rss-u.Anonymous, 0), Faults: m.FileRefaults + m.MajorFaults})
	up := func(x int64) int64 { return (x + nonGoStep - 1) / nonGoStep * nonGoStep }
	return fit.NonGo{Anon: up(anon), Kernel: up(kernel), HotFile: up(f.file.Bytes)}, nil
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

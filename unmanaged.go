package gofit

import (
	"errors"
	"runtime/metrics"
	"time"

	"github.com/gofit-dev/gofit/internal/procmem"
)

// unmanagedStep quantises the unmanaged estimate so that small wobbles do
// not recompute the plan on every refresh.
const unmanagedStep = 1 << 20

// measureUnmanaged estimates the memory charged on this process's behalf
// that GOMEMLIMIT does not bound and the kernel cannot simply reclaim:
// what the process has resident (anonymous memory and the file pages it
// maps, /proc/self/smaps_rollup Rss) plus the cgroup's kernel memory,
// less what the Go runtime has mapped and not released. Page cache the
// process only read through is reclaimable and not counted; another
// process in the same cgroup is not counted either. The estimate is the
// largest over the last minute, rounded up to 1 MiB.
func (f *Fitter) measureUnmanaged() (int64, error) {
	if f.noRollup {
		return 0, nil
	}
	u, err := f.mem.Read()
	if errors.Is(err, procmem.ErrUnsupported) {
		f.noRollup = true
		f.log.Info("gofit: unmanaged memory not measured; GOMEMLIMIT from the memory ratio alone", "err", err)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	m, err := f.cg.MemoryStats()
	if err != nil {
		return 0, err
	}
	x := max(u.Rss+int64(min(m.Kernel, 1<<62))-f.cfg.goMemory(), 0)
	x = f.unmanaged.add(f.cfg.now(), x)
	return (x + unmanagedStep - 1) / unmanagedStep * unmanagedStep, nil
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

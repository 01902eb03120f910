package fit

import (
	"fmt"
	"strings"
	"time"
)

// NonGo is the memory charged to a container that GOMEMLIMIT does not
// bound and the kernel cannot simply take back, in its parts. Clean file
// pages that are cold are not in it: the kernel reclaims them when the
// heap needs the room, and only the hot part of the file working set would
// be read straight back.
type NonGo struct {
	// Anon is anonymous memory outside the Go runtime: cgo's malloc,
	// off-heap caches mapped with mmap (fastcache, bigcache), the stacks of
	// threads Go did not create.
	Anon int64
	// Kernel is kernel memory charged to the cgroup: page tables, socket
	// buffers, slab.
	Kernel int64
	// HotFile is the part of the file pages the process maps (its binary's
	// text and data, mapped files) that must stay resident; the runtime
	// library keeps it with FileBudget; before a process runs it is not
	// known and not budgeted.
	HotFile int64
}

// Total is the sum of the parts (each bounded to 2^60, so the sum cannot
// overflow).
func (n NonGo) Total() int64 {
	part := func(x int64) int64 { return min(max(x, 0), 1<<60) }
	return part(n.Anon) + part(n.Kernel) + part(n.HotFile)
}

func (n NonGo) String() string {
	var parts []string
	for _, p := range []struct {
		v    int64
		what string
	}{{n.Anon, "anonymous outside the Go heap"}, {n.Kernel, "kernel"}, {n.HotFile, "hot file pages"}} {
		if p.v > 0 {
			parts = append(parts, FormatBytes(p.v)+" "+p.what)
		}
	}
	return strings.Join(parts, ", ")
}

// Before a process runs nothing is measured, and gofit budgets no non-Go
// memory for it: `gofit run`, the lab and the webhook plan the memory
// ratio unless the user declares non-Go memory (`gofit run --non-go`,
// GOFIT_NON_GO, the webhook's gofit.dev/non-go-memory annotation). A
// static estimate from the binary's size (min(PT_LOAD, 8 MiB) of hot file
// plus 2 MiB of kernel) was measured on 2026-11-23 and did not pay: it
// only went below the ratio in containers under about 110 MiB, and there
// it cost go-httpbin its throughput (docs/results/memory.md). The hot text
// a loaded binary touches, measured with tools/hottext, was
// 3.9 MiB of the 61 MB sample, 4.6 MiB of go-httpbin and 6.8 MiB of
// node_exporter, within the ratio's headroom; the kernel reclaims and
// reads back text rather than OOM-killing.

// FileBudgetFloor is the least file memory FileBudget gives back to, unless
// less is resident: 8 MiB covers the hot text measured in the three
// services above, so the feedback step never starves a binary's code of
// the pages it runs.
const FileBudgetFloor = 8 << 20

// FileBudget keeps NonGo.HotFile for a running process by a bounded
// feedback step, the way senpai and Meta's TMO probe for the memory a
// workload needs: start from every resident file page, give back a step at
// a time while the kernel shows no sign of missing them, and step up when
// it does. Evidence is the cgroup's file refaults (pages read back soon
// after eviction), or major faults where the kernel does not count
// refaults, over fileFaultPages in two samples in a row: one burst is a
// cold code path paging in, thrashing repeats.
//
// It never oscillates: a step up also raises the floor to the new budget,
// so after the first sign of pressure the budget can only stay or grow. It
// stays within [min(resident, FileBudgetFloor), the most resident ever
// seen]. The zero value is ready; Next is pure (time comes in the sample).
type FileBudget struct {
	Bytes int64 // the budget now
	Floor int64 // the least it may return to
	Max   int64 // the most file memory seen resident

	quietSince time.Time
	faults     uint64
	pressed    bool // the last sample showed pressure
	started    bool
}

// FileSample is one observation for FileBudget.
type FileSample struct {
	At time.Time
	// Resident is the file-backed memory the process has resident
	// (smaps_rollup Rss less Anonymous).
	Resident int64
	// Faults is a cumulative count of file pages read back: the cgroup's
	// workingset refaults, or its major faults.
	Faults uint64
}

// The feedback step's constants.
const (
	// FileBudgetHold is how long the evidence must stay quiet before the
	// budget gives back a step.
	FileBudgetHold = 30 * time.Second
	// fileFaultPages is how many pages read back between two samples count
	// as pressure (1 MiB of 4 KiB pages); fewer is noise.
	fileFaultPages = 256
	minFileStep    = 1 << 20
)

// Next is the budget after sample s.
func (b FileBudget) Next(s FileSample) FileBudget {
	res := max(s.Resident, 0)
	if !b.started {
		return FileBudget{Bytes: res, Floor: min(res, FileBudgetFloor), Max: res, quietSince: s.At, faults: s.Faults, started: true}
	}
	b.Max = max(b.Max, res)
	step := max(int64(minFileStep), b.Max/16)
	// A counter that went backwards was reset (a new cgroup): no evidence.
	pressed := s.Faults > b.faults && s.Faults-b.faults >= fileFaultPages
	confirmed := pressed && b.pressed
	b.faults, b.pressed = s.Faults, pressed
	switch {
	case pressed && !confirmed:
		// One burst (a cold code path paged in) is not thrashing: hold,
		// and step up only if the next sample shows it again.
		b.quietSince = s.At
	case confirmed:
		if b.Bytes < b.Max {
			b.Bytes = min(b.Max, b.Bytes+2*step)
			b.Floor = max(b.Floor, b.Bytes)
		}
		b.quietSince = s.At
	case s.At.Sub(b.quietSince) >= FileBudgetHold:
		b.Bytes = max(b.Floor, b.Bytes-step)
		b.quietSince = s.At
	}
	b.Floor = min(b.Floor, b.Max)
	b.Bytes = min(max(b.Bytes, b.Floor), b.Max)
	return b
}

func (b FileBudget) String() string {
	return fmt.Sprintf("%s of file pages budgeted (floor %s, most resident %s)", FormatBytes(b.Bytes), FormatBytes(b.Floor), FormatBytes(b.Max))
}

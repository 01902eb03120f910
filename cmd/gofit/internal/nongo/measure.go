package nongo

import (
	"errors"
	"fmt"
	"time"

	"github.com/gofit-dev/gofit/fit"
)

// DeclareMin is the least non-Go memory worth declaring: the measurement's
// own error bound (8 MiB, docs/results/nongo.md). Below it the figure
// cannot be told from none, and the memory ratio's headroom covers it.
const DeclareMin = 8 << 20

// MinWindow is the shortest observation a figure is trusted from when no
// collection was seen to count: a service younger than that may not have
// built its working memory yet.
const MinWindow = 10 * time.Second

// longWindow is the observation under which the figure carries a note:
// memory a service fills later (a cache warming over hours) is not in it.
const longWindow = 10 * time.Minute

// ErrNotGo says the process is not a Go program: there is no Go heap to
// leave room for.
var ErrNotGo = errors.New("not a Go program")

// Evidence is what is known of one process, gathered by Read or by the lab.
type Evidence struct {
	Maps []Mapping
	// GoVersion is the Go version built into the executable ("" when it
	// has none: not a Go binary, or one whose build info was stripped).
	GoVersion string
	// Runtime is the runtime's own figure where the service serves it.
	Runtime *Runtime
	// GCTrace is what gctrace lines said, where the process printed any.
	GCTrace *GCTrace
	// KernelBytes is the kernel memory charged to the process's cgroup;
	// CgroupProcs how many processes the cgroup holds (0: unknown).
	KernelBytes int64
	CgroupProcs int
	// Window is how long the process was observed (in the lab, the load's
	// window; on a live process, since it started).
	Window time.Duration
	// ClearedRefs says the referenced bits were cleared at the window's
	// start (/proc/PID/clear_refs), so referenced file pages are those the
	// window used: the hot part. Otherwise they are every page referenced
	// since the kernel last aged them, an upper bound.
	ClearedRefs bool
}

// Measurement is a process's non-Go memory, its parts, how it was found,
// and how far it can be trusted.
type Measurement struct {
	// Bytes is what to declare (GOFIT_NON_GO, gofit.dev/non-go-memory):
	// every part, each rounded up to 1 MiB, where the anonymous memory
	// outside the Go heap reaches DeclareMin; else 0. A pure Go service
	// holds 1 to 3 MiB of it (the sample, go-httpbin, node_exporter) and
	// is planned by the ratio, whose headroom covers that, its kernel
	// memory and its hot text (a static 8 MiB budget for text cost
	// go-httpbin its throughput at small limits, fit/nongo.go). The
	// kernel part is the whole cgroup's: it is not what tells a service
	// with off-heap memory from one without.
	Bytes       int64  `json:"bytes"`
	AnonBytes   int64  `json:"anon_bytes"`
	KernelBytes int64  `json:"kernel_bytes"`
	HotFile     int64  `json:"hot_file_bytes"`
	Method      Method `json:"method"`
	// GoBytes is the Go runtime's resident share by the method.
	GoBytes int64 `json:"go_bytes"`
	// MetricsAnonBytes is the anonymous part by the service's own
	// metrics, where it serves them beside smaps: a cross-check.
	MetricsAnonBytes *int64  `json:"metrics_anon_bytes,omitempty"`
	GCs              int64   `json:"gcs"` // collections seen; -1: unknown
	WindowSeconds    float64 `json:"window_seconds"`
	// Trusted is false when a caveat makes the figure unreliable: no
	// collection seen yet, too short a window. Caveats say why, and note
	// what else qualifies it.
	Trusted bool     `json:"trusted"`
	Caveats []string `json:"caveats"`
	Split   Split    `json:"smaps"`
}

// NonGo is the measurement as the policy takes a declaration: the
// declared bytes, unreclaimable.
func (m Measurement) NonGo() fit.NonGo { return fit.NonGo{Anon: m.Bytes} }

// Parts is every part measured, as the policy names them.
func (m Measurement) Parts() fit.NonGo {
	return fit.NonGo{Anon: m.AnonBytes, Kernel: m.KernelBytes, HotFile: m.HotFile}
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 << 20 }

// Estimate turns the evidence into a measurement. It chooses the method by
// what the evidence holds: the runtime's named mappings, else its heap
// arenas, else the service's own metrics. It fails when the process is
// not Go or no method applies.
func Estimate(ev Evidence) (Measurement, error) {
	m := Measurement{GCs: -1, WindowSeconds: ev.Window.Seconds(), Caveats: []string{}}
	var totalAnon int64
	for _, mp := range ev.Maps {
		totalAnon = add(totalAnon, mp.Anonymous)
	}
	split, err := SplitMappings(ev.Maps)
	m.Split = split
	var metricsAnon *int64
	if ev.Runtime != nil {
		a := max(totalAnon-ev.Runtime.MappedBytes, 0)
		metricsAnon = &a
	}
	switch {
	case err == nil:
		m.Method, m.GoBytes, m.AnonBytes = split.Method, split.GoBytes, split.AnonBytes
		m.MetricsAnonBytes = metricsAnon
	case metricsAnon != nil:
		m.Method, m.GoBytes, m.AnonBytes = Metrics, min(ev.Runtime.MappedBytes, totalAnon), *metricsAnon
		m.Split.Method = ""
	case ev.GoVersion == "":
		return m, fmt.Errorf("%w: no Go build info in the executable and %v", ErrNotGo, err)
	default:
		return m, fmt.Errorf("%s: %w, and the service serves no Go metrics", ev.GoVersion, err)
	}
	if ev.GoVersion == "" {
		m.Caveats = append(m.Caveats, "the executable has no Go build info: the Go heap was found by its shape alone")
	}
	if split.LibcArenas > 0 && m.Method == Arenas {
		m.Caveats = append(m.Caveats, fmt.Sprintf("%d × 64 MiB of libc malloc arenas (cgo) counted as non-Go", split.LibcArenas))
	}
	if m.Method == Arenas {
		m.Caveats = append(m.Caveats, "the runtime's metadata outside its arenas (typically 1–3% of the heap) is counted as non-Go")
	}
	m.KernelBytes = max(ev.KernelBytes, 0)
	m.HotFile = split.FileReferencedBytes
	if !ev.ClearedRefs {
		// Every page referenced since the kernel last aged them: a large
		// binary's whole resident text. The policy's floor for hot text
		// covers the hot sets measured (fit.FileBudgetFloor).
		if m.HotFile > fit.FileBudgetFloor {
			m.Caveats = append(m.Caveats, fmt.Sprintf("%s of file pages referenced since the kernel last aged them, an upper bound, counted as %s hot (fit.FileBudgetFloor); a window measures them",
				fit.FormatBytes(m.HotFile), fit.FormatBytes(fit.FileBudgetFloor)))
			m.HotFile = fit.FileBudgetFloor
		} else {
			m.Caveats = append(m.Caveats, "hot file pages are those referenced since the kernel last aged them: an upper bound")
		}
	}
	trusted := true
	switch {
	case ev.Runtime != nil && ev.Runtime.NumGC >= 0:
		m.GCs = ev.Runtime.NumGC
	case ev.GCTrace != nil:
		m.GCs = int64(ev.GCTrace.Cycles)
	}
	switch {
	case m.GCs == 0:
		trusted = false
		m.Caveats = append(m.Caveats, "no garbage collection seen yet: the service has not run long or loaded enough to show its working memory")
	case m.GCs < 0:
		m.Caveats = append(m.Caveats, "garbage collections not seen (no gctrace lines or Go metrics)")
	}
	switch {
	case m.GCs < 0 && ev.Window < MinWindow:
		trusted = false
		m.Caveats = append(m.Caveats, fmt.Sprintf("observed for %v, under %v, with no collection seen to count: memory the service fills later is not in it", ev.Window.Round(100*time.Millisecond), MinWindow))
	case ev.Window < longWindow:
		m.Caveats = append(m.Caveats, fmt.Sprintf("observed for %v: memory the service fills later (a cache warming over hours) is not in it; declare that by hand", ev.Window.Round(100*time.Millisecond)))
	}
	m.Trusted = trusted
	if m.AnonBytes >= DeclareMin {
		m.Bytes = mib(m.AnonBytes) + mib(m.KernelBytes) + mib(m.HotFile)
	}
	if ev.CgroupProcs > 1 {
		m.Caveats = append(m.Caveats, fmt.Sprintf("its cgroup holds %d processes: the kernel memory is all of theirs", ev.CgroupProcs))
	}
	return m, nil
}

// Declaration says what to declare for the measurement, or why nothing.
func (m Measurement) Declaration() string {
	if m.Bytes == 0 {
		return fmt.Sprintf("nothing to declare: %s of anonymous memory outside the Go heap is under %s, within the memory ratio's headroom and the measurement's error",
			fit.FormatBytes(m.AnonBytes), fit.FormatBytes(DeclareMin))
	}
	return fmt.Sprintf("%s=%s (gofit run), or the pod annotation %s: NAME=%s (gofit webhook)", EnvVar, Quantity(m.Bytes), Annotation, Quantity(m.Bytes))
}

// Quantity writes whole MiB as a Kubernetes quantity, which GOFIT_NON_GO
// and the annotation both read ("52Mi").
func Quantity(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%dMi", n>>20)
	}
	return fmt.Sprint(n)
}

// EnvVar declares non-Go memory to `gofit run`; Annotation to the webhook.
const (
	EnvVar     = "GOFIT_NON_GO"
	Annotation = "gofit.dev/non-go-memory"
)

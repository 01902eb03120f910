// Package fleet is `gofit fleet`'s pure core: weeks of a fleet's series
// per container (cAdvisor, kube-state-metrics, the Go runtime's own
// metrics from client_golang) in, per workload container the figures as
// observed, findings with fixed codes and a Go-aware recommendation out,
// with KRR's simple strategy and VPA's recommender computed on the same
// data beside it. GOMAXPROCS and GOMEMLIMIT come through fit, the policy
// every other gofit surface uses. The Prometheus shell (fetch.go) and the
// renderers (report.go, patch.go) sit beside it.
package fleet

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
)

// Resources are a container's CPU (cores) and memory (bytes); 0 is none.
type Resources struct {
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory_bytes"`
}

// Workload is what owns a pod, as kube_pod_owner says (a ReplicaSet's
// owner, a Deployment, when kube_replicaset_owner knows it). A pod with
// no owner is its own workload (Kind "Pod").
type Workload struct {
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
}

func (w Workload) String() string {
	s := w.Namespace + "/" + w.Kind + "/" + w.Name
	if w.Cluster != "" {
		s = w.Cluster + ":" + s
	}
	return s
}

// Pod is one container of one pod: its spec as kube-state-metrics saw it
// last, the Go runtime's settings as it reported them last (NaN where it
// did not), its counts over the window, and its series, one value per
// step from Input.Start (NaN where there was none).
type Pod struct {
	Name             string
	Requests, Limits Resources
	// GOMAXPROCS, GOMEMLIMIT (bytes; math.MaxInt64 when unset) and GOGC
	// (percent; -1 for off) as go_sched_gomaxprocs_threads,
	// go_gc_gomemlimit_bytes and go_gc_gogc_percent report them.
	GOMAXPROCS, GOMEMLIMIT, GOGC float64
	GoVersion                    string // go_info's version label
	OOMKills, Restarts           float64
	// Created is when the pod was created (kube_pod_created, Unix
	// seconds; 0 when unknown): the newest pod's spec is the workload's.
	Created float64

	CPU        Track // cores used, averaged over the step
	CPUPeak    Track // the step's highest 1-minute rate (Query.CPUBurst only)
	Throttled  Track // share of CFS periods throttled in the step
	GC         Track // GC CPU, cores averaged over the step
	WorkingSet Track // working set, the step's peak
	// NonHeap is the memory outside the Go heap: the working set's
	// average over the step less the heap's resident spans' (in use, and
	// idle but not yet released to the OS: both are Go's heap).
	NonHeap Track
	// HeapAllocLow is go_memstats_heap_alloc_bytes's low in the step: an
	// upper bound of the live heap (objects marked at the last GC stay
	// allocated until the next one). Not the heap in use: its spans are
	// not swept free of dead objects right after a GC, so its low sits
	// near the heap's peak.
	HeapAllocLow Track
	// HeapGoal is go_memstats_next_gc_bytes's peak in the step: the heap
	// the GC lets grow before the next cycle, the live heap × (1 +
	// GOGC/100) (and a little: stacks and globals) where no GOMEMLIMIT
	// binds.
	HeapGoal Track
	LiveHeap Track // go_gc_heap_live_bytes, the step's peak (Go ≥ 1.21 with the runtime/metrics collector)
}

// Group is one container of a workload: its pods pooled, as KRR and VPA
// pool them.
type Group struct {
	Workload  Workload
	Container string
	Pods      []Pod
	HPA       *HPA // the HorizontalPodAutoscaler scaling the workload, if any
}

// HPA is a HorizontalPodAutoscaler, as kube-state-metrics describes it,
// and whether it scales on CPU or memory utilisation.
type HPA struct {
	Name   string `json:"name"`
	CPU    bool   `json:"cpu"`
	Memory bool   `json:"memory"`
}

// Input is what the fetch found.
type Input struct {
	Start time.Time
	Step  time.Duration
	Steps int
	// GCSource says which series the GC CPU came from:
	// go_cpu_classes_gc_total_cpu_seconds_total counts the GC's CPU,
	// go_gc_duration_seconds only its stop-the-world pauses (a floor).
	GCSource string
	Groups   []Group
	// Sources names where each kind of figure came from ("none found"
	// when nothing answered); Notes are what the fetch wants said.
	Sources map[string]string
	Notes   []string
	// NonGo counts containers seen without go_* series (left out).
	NonGo int
	// Unread counts Go series that could not be read as a container's,
	// by reason (UnreadNoContainer, UnreadNoPod): left out, and said.
	Unread map[string]int
}

// Reasons Go series are left unread (Input.Unread, Results.Unread).
const (
	UnreadNoContainer = "go_info without a container label (pods; a PodMonitor or ServiceMonitor gives it)"
	UnreadNoPod       = "go_info without namespace and pod labels (targets; scraped outside the pods' service discovery)"
)

// Num is a figure that may be missing (NaN): JSON null, never a made-up 0.
type Num float64

// MarshalJSON writes null for NaN and infinities.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads null as NaN.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Num(f)
	return nil
}

// Valid reports whether n is a figure.
func (n Num) Valid() bool { f := float64(n); return !math.IsNaN(f) && !math.IsInf(f, 0) }

var nan = Num(math.NaN())

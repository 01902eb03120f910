package fleet

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/fit"
)

// Finding codes: fixed, listed in docs/fleet.md; --fail-on takes them.
const (
	CodeGOMAXPROCSAboveLimit  = "gomaxprocs_above_limit"
	CodeGOMEMLIMITUnset       = "gomemlimit_unset"
	CodeGOMEMLIMITAtLimit     = "gomemlimit_at_limit"
	CodeHeapPinned            = "heap_pinned"
	CodeThrottledByGOMAXPROCS = "throttled_by_gomaxprocs"
	CodeOverProvisioned       = "over_provisioned"
	CodeUnderProvisioned      = "under_provisioned"
	CodeOOMKilled             = "oom_killed"
	CodeNotEnoughData         = "not_enough_data"
)

// Codes lists the finding codes in the order the docs list them.
func Codes() []string {
	return []string{CodeGOMAXPROCSAboveLimit, CodeGOMEMLIMITUnset, CodeGOMEMLIMITAtLimit, CodeHeapPinned,
		CodeThrottledByGOMAXPROCS, CodeOverProvisioned, CodeUnderProvisioned, CodeOOMKilled, CodeNotEnoughData}
}

// CPU limit choices (Options.CPULimit, --cpu-limit).
const (
	CPULimitPercentile = "percentile"
	CPULimitNone       = "none"
	CPULimitKeep       = "keep"
	CPULimitBurst      = "burst"
)

// Options are the analysis's thresholds; the zero value is the defaults.
type Options struct {
	// Policy plans GOMAXPROCS and GOMEMLIMIT (fit's defaults if zero).
	Policy fit.Policy
	// MinSpan is the least time a container's CPU and memory series must
	// cover for a figure (default 24h); MinSamples the least samples
	// (pod-steps, default 60).
	MinSpan    time.Duration
	MinSamples int
	// MemoryMargin is the share added to the memory the heap and the rest
	// need (default 0.10), at least MinMemoryMargin bytes (default 16 MiB).
	MemoryMargin    float64
	MinMemoryMargin float64
	// CPULimitMargin is the share added to the CPULimitPercentile of CPU
	// demand for the limit (default 0.10).
	CPULimitMargin float64
	// CPURequestPercentile and CPULimitPercentile are the quantiles of CPU
	// demand over pod-steps the request and the limit rest on (defaults
	// 0.95 and 0.99); MemoryPercentile the quantile of the live heap and of
	// the memory outside it over pod-steps (default 0.99, so that one
	// pod's hour does not size a workload; 1 is the peak).
	CPURequestPercentile, CPULimitPercentile, MemoryPercentile float64
	// CPULimit is how the CPU limit is set: CPULimitPercentile (the
	// default), CPULimitBurst (the CPULimitPercentile of each step's
	// highest 1-minute demand, so that a burst inside a step is not
	// averaged away; needs Query.CPUBurst's series), CPULimitNone (none:
	// the patches remove it) or CPULimitKeep (left as it is).
	CPULimit string
	// AllowHPA sizes CPU and memory under an HPA that scales on them
	// (KRR's --allow-hpa); by default they are left as they are.
	AllowHPA bool
	// OOMBump is the factor over the memory limit a container was
	// OOM-killed at below which it is never planned (default 1.2, VPA's).
	OOMBump float64
	// ThrottledHigh is the share of throttled CFS periods counted as
	// throttling (default 0.05); GCHigh the GC share of CPU counted as high
	// (default 0.10); HeapPinned the share of GOMEMLIMIT the live heap's
	// p99 may reach before the GC is pinned against it (default 0.85).
	ThrottledHigh, GCHigh, HeapPinned float64
	// OverFactor: a request more than this times the recommendation is
	// over-provisioned (default 2), and one below the recommendation over
	// it under-provisioned.
	OverFactor float64
}

func (o Options) withDefaults() Options {
	def := func(v *float64, d float64) {
		if *v <= 0 || math.IsNaN(*v) {
			*v = d
		}
	}
	if o.MinSpan <= 0 {
		o.MinSpan = 24 * time.Hour
	}
	if o.MinSamples <= 0 {
		o.MinSamples = 60
	}
	def(&o.MemoryMargin, 0.10)
	def(&o.MinMemoryMargin, 16<<20)
	def(&o.CPULimitMargin, 0.10)
	def(&o.CPURequestPercentile, 0.95)
	def(&o.CPULimitPercentile, 0.99)
	def(&o.MemoryPercentile, 0.99)
	def(&o.OOMBump, 1.2)
	def(&o.ThrottledHigh, 0.05)
	def(&o.GCHigh, 0.10)
	def(&o.HeapPinned, 0.85)
	def(&o.OverFactor, 2)
	return o
}

// Results is the whole analysis (results.json).
type Results struct {
	Start       time.Time         `json:"start"`
	End         time.Time         `json:"end"`
	StepSeconds float64           `json:"step_seconds"`
	Sources     map[string]string `json:"sources"`
	Notes       []string          `json:"notes,omitempty"`
	NonGo       int               `json:"non_go_containers"`
	// Unread counts Go series left out, by reason; Gaps counts workload
	// containers by what their figures lack or assume (Gap* codes).
	Unread     map[string]int `json:"unread,omitempty"`
	Gaps       map[string]int `json:"gaps,omitempty"`
	Containers []Container    `json:"containers"`
}

// Container is one workload container's analysis.
type Container struct {
	Workload  Workload  `json:"workload"`
	Container string    `json:"container"`
	Pods      []string  `json:"pods"`
	Observed  Observed  `json:"observed"`
	Findings  []Finding `json:"findings"`
	// Gaps are what the figures lack or assume, with a fixed code each.
	Gaps []Finding `json:"gaps,omitempty"`
	// HPA is the HorizontalPodAutoscaler that scales the workload, if any.
	HPA *HPA `json:"hpa,omitempty"`
	// Gofit is gofit's recommendation; KRR and VPA are theirs on the same
	// data, for comparison.
	Gofit Recommendation `json:"gofit"`
	KRR   Recommendation `json:"krr"`
	VPA   Recommendation `json:"vpa"`
	// Series is what the plots draw: per run of steps, the busiest pod's
	// CPU in cores and the highest working set and live heap in bytes.
	Series Series `json:"-"`
}

// Series are the plots' figures: point i is the peak of steps
// [i*Per, (i+1)*Per), at most plotPoints of them, so that a fleet's week
// is not held twice over at full resolution for its plots.
type Series struct {
	Per                       int
	CPU, WorkingSet, LiveHeap []float64
}

// plotPoints is the most points a plot line has: each the peak of its run
// of steps, so a week at 5-minute steps still shows its spikes.
const plotPoints = 300

// Observed is what the data says, with the data it rests on.
type Observed struct {
	Requests   Resources `json:"requests"`
	Limits     Resources `json:"limits"`
	GOMAXPROCS Num       `json:"gomaxprocs"`
	// GOMEMLIMIT is null when unknown and 0 when unset (off).
	GOMEMLIMIT Num    `json:"gomemlimit_bytes"`
	GOGC       Num    `json:"gogc"` // -1: off
	GoVersion  string `json:"go_version,omitempty"`
	// CPU usage percentiles over pod-steps, cores.
	CPU            Percentiles `json:"cpu_cores"`
	ThrottledShare Num         `json:"throttled_share"`
	GCShare        Num         `json:"gc_cpu_share"`
	GCSource       string      `json:"gc_source,omitempty"`
	LiveHeap       Percentiles `json:"live_heap_bytes"`
	LiveHeapSource string      `json:"live_heap_source,omitempty"`
	WorkingSet     Percentiles `json:"working_set_bytes"`
	// NonHeap is the memory outside the Go heap: the p99 over pod-steps
	// of the working set's average less the heap in use's average.
	NonHeap  Num     `json:"non_heap_bytes"`
	OOMKills float64 `json:"oom_kills"`
	Restarts float64 `json:"restarts"`
	// Samples are pod-steps with CPU usage; SpanSeconds the time they
	// cover.
	Samples     int     `json:"samples"`
	SpanSeconds float64 `json:"span_seconds"`
}

// Percentiles of a figure; null where there is no data.
type Percentiles struct {
	P50 Num `json:"p50"`
	P95 Num `json:"p95"`
	P99 Num `json:"p99"`
	Max Num `json:"max"`
}

// Finding is one thing wrong, with its code.
type Finding struct {
	Code string `json:"code"`
	Text string `json:"text"`
}

// Recommendation is one method's figures. Missing lists what a method
// needed and did not have: then its figures are null ("not enough data").
type Recommendation struct {
	Method     string `json:"method"`
	CPURequest Num    `json:"cpu_request"`
	CPULimit   Num    `json:"cpu_limit"` // null: no limit, or the limit kept (CPULimitKept)
	// CPULimitKept: the CPU limit (and, with no CPU request, the request)
	// is left as it is, not removed.
	CPULimitKept bool              `json:"cpu_limit_kept,omitempty"`
	Memory       Num               `json:"memory_bytes"`
	GOMAXPROCS   int               `json:"gomaxprocs,omitempty"`
	GOMEMLIMIT   int64             `json:"gomemlimit_bytes,omitempty"`
	GOGC         string            `json:"gogc,omitempty"`
	NonGo        int64             `json:"non_go_bytes,omitempty"` // declared to the webhook
	Env          map[string]string `json:"env,omitempty"`
	Reasons      []string          `json:"reasons"`
	Missing      []string          `json:"missing,omitempty"`
}

// Enough reports whether the recommendation has figures.
func (r Recommendation) Enough() bool { return len(r.Missing) == 0 }

// Analyze turns the fetched series into per-container results.
func Analyze(in Input, opt Options) *Results {
	opt = opt.withDefaults()
	r := &Results{Start: in.Start, End: in.Start.Add(time.Duration(in.Steps) * in.Step), StepSeconds: in.Step.Seconds(),
		Sources: in.Sources, Notes: in.Notes, NonGo: in.NonGo, Unread: in.Unread, Gaps: map[string]int{}}
	if r.Sources == nil {
		r.Sources = map[string]string{}
	}
	perWorkload := map[string]int{}
	for _, g := range in.Groups {
		perWorkload[g.Workload.String()]++
	}
	for _, g := range in.Groups {
		c := analyzeGroup(in, g, perWorkload[g.Workload.String()], opt)
		for _, gap := range c.Gaps {
			r.Gaps[gap.Code]++
		}
		r.Containers = append(r.Containers, c)
	}
	sort.Slice(r.Containers, func(i, j int) bool {
		a, b := r.Containers[i], r.Containers[j]
		if a.Workload.String() != b.Workload.String() {
			return a.Workload.String() < b.Workload.String()
		}
		return a.Container < b.Container
	})
	return r
}

// pooled are a group's pod-steps.
type pooled struct {
	cpu, demand              []float64 // per pod-step with CPU
	burst                    []float64 // per pod-step with a CPU peak: its demand
	ws, live, nonHeap        []float64
	gcSum, gcCPU, thrSum     float64
	thrN                     int
	first, last              int // steps with CPU data
	liveFromRuntime, anyGoal bool
	podLive                  []podPeak // each pod's live heap peak
	oomAt                    float64   // the highest memory limit (else working set) a pod was OOM-killed at
}

type podPeak struct {
	name string
	max  float64
}

// goalLive is the divisor that turns a pod's heap goal into a bound of its
// live heap, 1 + GOGC/100, and the highest goal it holds for; 0 where the
// goal says nothing of the live heap (GOGC off). A GOMEMLIMIT lowers the
// goal below that once the goal nears it, so with one set the goal is
// used only up to half of it (the runtime's other memory is not half the
// limit). An unknown GOGC is taken as 100 and an unknown GOMEMLIMIT as
// unset: the memory planned from it, the quotient × 2, is then the goal
// itself, what the heap grew to.
func goalLive(pod Pod) (div, upTo float64) {
	gogc := 100.0
	if !math.IsNaN(pod.GOGC) {
		gogc = pod.GOGC
	}
	if gogc <= 0 {
		return 0, 0
	}
	upTo = math.Inf(1)
	if !math.IsNaN(pod.GOMEMLIMIT) && pod.GOMEMLIMIT < math.MaxInt64/2 {
		upTo = pod.GOMEMLIMIT / 2
	}
	return 1 + gogc/100, upTo
}

func pool(in Input, g Group) pooled {
	p := pooled{first: -1, last: -1}
	for _, pod := range g.Pods {
		if pod.LiveHeap.Any() {
			p.liveFromRuntime = true
		}
	}
	for _, pod := range g.Pods {
		// Usage a CFS quota capped is a floor of demand: raise it by the
		// share of periods that ran out of quota, unless the pod's own
		// GOMAXPROCS above its limit caused the throttling (then the fix
		// is GOMAXPROCS, not more CPU).
		selfInflicted := gomaxprocsAbove(Num(pod.GOMAXPROCS), pod.Limits.CPU)
		div, upTo := goalLive(pod)
		peak, wsPeak := math.NaN(), 0.0
		for i := range in.Steps {
			if c, ok := pod.CPU.At(i); ok {
				p.cpu = append(p.cpu, c)
				d := c
				if t, ok := pod.Throttled.At(i); ok {
					p.thrSum += t
					p.thrN++
					if !selfInflicted {
						d = c * (1 + t)
					}
				}
				p.demand = append(p.demand, d)
				if pk, ok := pod.CPUPeak.At(i); ok {
					// The peak minute's demand: raised as the step's mean is.
					p.burst = append(p.burst, math.Max(pk, c)*d/math.Max(c, 1e-9))
				}
				if gc, ok := pod.GC.At(i); ok {
					p.gcSum += gc
					p.gcCPU += c
				}
				if p.first < 0 || i < p.first {
					p.first = i
				}
				p.last = max(p.last, i)
			}
			if w, ok := pod.WorkingSet.At(i); ok {
				p.ws = append(p.ws, w)
				wsPeak = math.Max(wsPeak, w)
			}
			// The live heap: the runtime's own figure where it is
			// exported; else the lower of two bounds above it, the
			// allocated heap's low and the heap goal ÷ (1 + GOGC/100).
			lv, ok := pod.LiveHeap.At(i)
			if !p.liveFromRuntime {
				lv, ok = pod.HeapAllocLow.At(i)
				if goal, gok := pod.HeapGoal.At(i); gok && div > 0 && goal <= upTo && (!ok || goal/div < lv) {
					lv, ok = goal/div, true
					p.anyGoal = true
				}
			}
			if ok {
				p.live = append(p.live, lv)
				if math.IsNaN(peak) || lv > peak {
					peak = lv
				}
			}
			if nh, ok := pod.NonHeap.At(i); ok {
				p.nonHeap = append(p.nonHeap, math.Max(0, nh))
			}
		}
		if !math.IsNaN(peak) {
			p.podLive = append(p.podLive, podPeak{pod.Name, peak})
		}
		if pod.OOMKills > 0 {
			at := pod.Limits.Memory
			if at <= 0 {
				at = wsPeak
			}
			p.oomAt = math.Max(p.oomAt, at)
		}
	}
	return p
}

// quantile is the q-quantile of xs (sorted in place), linear between
// order statistics; NaN for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	if !sort.Float64sAreSorted(xs) {
		sort.Float64s(xs)
	}
	pos := q * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(xs)-1)
	return xs[lo] + (xs[hi]-xs[lo])*(pos-float64(lo))
}

func percentiles(xs []float64) Percentiles {
	if len(xs) == 0 {
		return Percentiles{nan, nan, nan, nan}
	}
	return Percentiles{Num(quantile(xs, .5)), Num(quantile(xs, .95)), Num(quantile(xs, .99)), Num(quantile(xs, 1))}
}

// newestLast orders pods oldest first: by creation where
// kube-state-metrics said, else by the last step with data, then by name.
func newestLast(pods []Pod) []Pod {
	type aged struct {
		p        Pod
		created  float64
		lastSeen int
	}
	as := make([]aged, len(pods))
	for i, p := range pods {
		as[i] = aged{p, p.Created, lastStep(p)}
	}
	sort.SliceStable(as, func(i, j int) bool {
		a, b := as[i], as[j]
		if a.created > 0 && b.created > 0 && a.created != b.created {
			return a.created < b.created
		}
		if a.lastSeen != b.lastSeen {
			return a.lastSeen < b.lastSeen
		}
		return a.p.Name < b.p.Name
	})
	out := make([]Pod, len(as))
	for i, a := range as {
		out[i] = a.p
	}
	return out
}

// lastStep is the last step a pod has CPU or working-set data at; -1 for none.
func lastStep(p Pod) int { return max(p.CPU.Last(), p.WorkingSet.Last()) }

func analyzeGroup(in Input, g Group, containersInPod int, opt Options) Container {
	c := Container{Workload: g.Workload, Container: g.Container}
	o := &c.Observed
	o.GOMAXPROCS, o.GOMEMLIMIT, o.GOGC = nan, nan, nan
	// The spec and the runtime's settings: the newest pod's that has them
	// (after a rollout the old pods' are history).
	for _, pod := range newestLast(g.Pods) {
		c.Pods = append(c.Pods, pod.Name)
		if pod.Requests != (Resources{}) {
			o.Requests = pod.Requests
		}
		if pod.Limits != (Resources{}) {
			o.Limits = pod.Limits
		}
		if !math.IsNaN(pod.GOMAXPROCS) {
			o.GOMAXPROCS = Num(pod.GOMAXPROCS)
		}
		if !math.IsNaN(pod.GOMEMLIMIT) {
			o.GOMEMLIMIT = Num(pod.GOMEMLIMIT)
			if pod.GOMEMLIMIT >= math.MaxInt64/2 {
				o.GOMEMLIMIT = 0
			}
		}
		if !math.IsNaN(pod.GOGC) {
			o.GOGC = Num(pod.GOGC)
		}
		if pod.GoVersion != "" {
			o.GoVersion = pod.GoVersion
		}
		o.OOMKills += pod.OOMKills
		o.Restarts += pod.Restarts
	}
	sort.Strings(c.Pods)
	lim := o.Limits
	procsOver := gomaxprocsAbove(o.GOMAXPROCS, lim.CPU)
	p := pool(in, g)
	o.Samples = len(p.cpu)
	if p.first >= 0 {
		o.SpanSeconds = float64(p.last-p.first+1) * in.Step.Seconds()
	}
	o.CPU = percentiles(slices.Clone(p.cpu))
	o.ThrottledShare = nan
	if p.thrN > 0 {
		o.ThrottledShare = Num(p.thrSum / float64(p.thrN))
	}
	o.GCShare = nan
	if p.gcCPU > 0 {
		o.GCShare = Num(p.gcSum / p.gcCPU)
		o.GCSource = in.GCSource
	}
	o.LiveHeap = percentiles(slices.Clone(p.live))
	switch {
	case p.liveFromRuntime:
		o.LiveHeapSource = "go_gc_heap_live_bytes"
	case p.anyGoal:
		o.LiveHeapSource = "the lower of go_memstats_heap_alloc_bytes's low in each step and go_memstats_next_gc_bytes ÷ (1 + GOGC/100) where no GOMEMLIMIT lowers it"
	case len(p.live) > 0:
		o.LiveHeapSource = "go_memstats_heap_alloc_bytes, its low in each step (an upper bound: objects not yet swept count)"
	}
	o.WorkingSet = percentiles(slices.Clone(p.ws))
	o.NonHeap = nan
	if len(p.nonHeap) > 0 {
		o.NonHeap = Num(quantile(p.nonHeap, opt.MemoryPercentile))
	}
	c.Series = seriesOf(in, g)

	window := fmt.Sprintf("%d samples over %s", o.Samples, fmtDuration(time.Duration(o.SpanSeconds*float64(time.Second))))
	c.HPA = g.HPA
	c.Gofit = recommendGofit(o, p, g.HPA, procsOver, window, opt)
	c.KRR = KRR(in, g, g.HPA, opt)
	c.VPA = VPA(in, g, containersInPod)
	c.Findings = findings(o, c.Gofit, procsOver, opt)
	c.Gaps = gaps(o, c.Gofit, g.HPA, opt)
	return c
}

// Gap codes: what a container's figures lack or assume (Container.Gaps,
// counted in Results.Gaps).
const (
	GapGOGCUnknown       = "gogc_unknown"
	GapGOMEMLIMITUnknown = "gomemlimit_unknown"
	GapGOMAXPROCSUnknown = "gomaxprocs_unknown"
	GapNotEnoughData     = "not_enough_data"
	GapHPA               = "hpa"
)

func gaps(o *Observed, rec Recommendation, hpa *HPA, opt Options) []Finding {
	var g []Finding
	old := "not exported: client_golang before v1.20, or its Go collector without them"
	if !o.GOGC.Valid() {
		g = append(g, Finding{GapGOGCUnknown, "GOGC unknown (go_gc_gogc_percent " + old + "): assumed 100 and never raised"})
	}
	if !o.GOMEMLIMIT.Valid() {
		g = append(g, Finding{GapGOMEMLIMITUnknown, "GOMEMLIMIT unknown (go_gc_gomemlimit_bytes " + old + "): taken as unset, and its findings not checked"})
	}
	if !o.GOMAXPROCS.Valid() {
		g = append(g, Finding{GapGOMAXPROCSUnknown, "GOMAXPROCS unknown (go_sched_gomaxprocs_threads " + old + "): its findings not checked, and throttling read as demand"})
	}
	if !rec.Enough() {
		g = append(g, Finding{GapNotEnoughData, "no figures: missing " + strings.Join(rec.Missing, "; ")})
	}
	if hpa != nil && (hpa.CPU || hpa.Memory) && !opt.AllowHPA {
		var on []string
		if hpa.CPU {
			on = append(on, "CPU")
		}
		if hpa.Memory {
			on = append(on, "memory")
		}
		g = append(g, Finding{GapHPA, fmt.Sprintf("HPA %s scales on %s utilisation: left as it is (--allow-hpa sizes it)", hpa.Name, strings.Join(on, " and "))})
	}
	return g
}

// gomaxprocsAbove: GOMAXPROCS runs more threads than a CPU limit pays
// for, that is more than the limit rounded up (and never 1: a process
// fitted to a limit under a core runs 1, and its throttling is demand).
// The findings, the CPU correction and the rules compare it the same way.
func gomaxprocsAbove(procs Num, limit float64) bool {
	return procs.Valid() && limit > 0 && float64(procs) > math.Max(1, math.Ceil(limit-1e-9))
}

// missing names what a container lacks for a figure; nil when it has all.
func missing(o *Observed, p pooled, opt Options, needGo bool) []string {
	var m []string
	if o.Samples == 0 {
		m = append(m, "CPU usage (container_cpu_usage_seconds_total from cAdvisor)")
	} else if o.Samples < opt.MinSamples || o.SpanSeconds < opt.MinSpan.Seconds() {
		m = append(m, fmt.Sprintf("history: %d samples over %s, want at least %d over %s",
			o.Samples, fmtDuration(time.Duration(o.SpanSeconds*float64(time.Second))), opt.MinSamples, fmtDuration(opt.MinSpan)))
	}
	if len(p.ws) == 0 {
		m = append(m, "working set (container_memory_working_set_bytes from cAdvisor)")
	}
	if needGo {
		if len(p.live) == 0 {
			m = append(m, "live heap (go_gc_heap_live_bytes, or go_memstats_heap_alloc_bytes and go_memstats_next_gc_bytes from client_golang)")
		}
		if len(p.nonHeap) == 0 && len(p.ws) > 0 && len(p.live) > 0 {
			m = append(m, "the heap's resident spans at the same steps as the working set (go_memstats_heap_inuse_bytes, _idle_bytes, _released_bytes)")
		}
	}
	return m
}

// recommendGofit is the Go-aware recommendation: CPU, then memory, then
// GOMAXPROCS and GOMEMLIMIT for them through fit.
func recommendGofit(o *Observed, p pooled, hpa *HPA, procsOver bool, window string, opt Options) Recommendation {
	r := Recommendation{Method: "gofit", CPURequest: nan, CPULimit: nan, Memory: nan}
	if r.Missing = missing(o, p, opt, true); len(r.Missing) > 0 {
		r.Reasons = []string{"not enough data: missing " + strings.Join(r.Missing, "; ")}
		return r
	}
	planReq, planLim, ok := r.recommendCPU(o, p, hpa, procsOver, window, opt)
	if !ok {
		return r
	}
	m := r.recommendMemory(o, p, hpa, opt)
	r.planRuntime(o, opt, m, planReq, planLim)
	return r
}

// recommendCPU sets the CPU request and limit and gives what the plan is
// to assume of them; false when the data lacks what --cpu-limit needs.
//
// The request covers a quantile of demand (p95), the limit a higher one
// (p99) with a margin; a limit of a core or more is whole cores, so that
// GOMAXPROCS (its floor) leaves none of it unusable. Under an HPA that
// scales on CPU utilisation, CPU is left alone: a new request changes
// what its target means.
func (r *Recommendation) recommendCPU(o *Observed, p pooled, hpa *HPA, procsOver bool, window string, opt Options) (planReq, planLim float64, ok bool) {
	planReq, planLim = o.Requests.CPU, o.Limits.CPU
	if hpa != nil && hpa.CPU && !opt.AllowHPA {
		r.CPULimitKept = true
		r.Reasons = append(r.Reasons, fmt.Sprintf("CPU left as it is: HorizontalPodAutoscaler %s scales on CPU utilisation, whose meaning a new request changes (--allow-hpa sizes it anyway)", hpa.Name))
		return planReq, planLim, true
	}
	req := roundUp(quantile(p.demand, opt.CPURequestPercentile), 0.01)
	req = math.Max(req, 0.01)
	r.CPURequest, planReq = Num(req), req
	corr := "usage raised by its throttled share where a CFS quota capped it"
	if procsOver {
		corr = "usage as measured: the throttling came from GOMAXPROCS above the limit, which the plan fixes"
	}
	r.Reasons = append(r.Reasons, fmt.Sprintf("CPU request %s: %s of demand (%s; %s)", fmtCores(req), pctl(opt.CPURequestPercentile), corr, window))
	wholeCores := map[bool]string{true: ", rounded up to whole cores so that GOMAXPROCS uses all of it", false: ""}
	switch opt.CPULimit {
	case CPULimitNone:
		planLim = 0
		r.Reasons = append(r.Reasons, "no CPU limit (--cpu-limit none): the patches remove it; GOMAXPROCS follows the node")
	case CPULimitKeep:
		r.CPULimitKept = true
		planLim = math.Max(planLim, 0)
		if planLim > 0 && planLim < req {
			// A request above the limit is refused by the API server:
			// the request stops at the limit kept, and says why.
			r.CPURequest, planReq = Num(planLim), planLim
			r.Reasons = append(r.Reasons, fmt.Sprintf("CPU request capped at the kept limit %s: demand's %s is %s, above it, so the limit throttles it (--cpu-limit percentile would raise the limit)",
				cores0(planLim), pctl(opt.CPURequestPercentile), fmtCores(req)))
		}
		r.Reasons = append(r.Reasons, fmt.Sprintf("CPU limit left as it is (--cpu-limit keep): %s", cores0(o.Limits.CPU)))
	case CPULimitBurst:
		if len(p.burst) == 0 {
			r.Missing = append(r.Missing, "CPU bursts (the step's highest 1-minute rate of container_cpu_usage_seconds_total, read with --cpu-limit burst)")
			r.CPURequest, r.Reasons = nan, []string{"not enough data: missing " + strings.Join(r.Missing, "; ")}
			return planReq, planLim, false
		}
		q := quantile(p.burst, opt.CPULimitPercentile)
		l := cpuLimitFrom(q, opt.CPULimitMargin, req)
		r.CPULimit, planLim = Num(l), l
		r.Reasons = append(r.Reasons, fmt.Sprintf("CPU limit %s: %s of each step's highest 1-minute demand %s + %.0f%% (--cpu-limit burst; the steps' means put it at %s)%s", fmtCores(l), pctl(opt.CPULimitPercentile), fmtCores(q), opt.CPULimitMargin*100,
			fmtCores(quantile(p.demand, opt.CPULimitPercentile)), wholeCores[l >= 1]))
	default:
		q := quantile(p.demand, opt.CPULimitPercentile)
		l := cpuLimitFrom(q, opt.CPULimitMargin, req)
		r.CPULimit, planLim = Num(l), l
		r.Reasons = append(r.Reasons, fmt.Sprintf("CPU limit %s: %s of demand %s + %.0f%%%s", fmtCores(l), pctl(opt.CPULimitPercentile), fmtCores(q), opt.CPULimitMargin*100,
			wholeCores[l >= 1]))
	}
	return planReq, planLim, true
}

// memoryPlan is what the memory recommendation hands the runtime's plan.
type memoryPlan struct {
	limit   float64 // the memory limit to plan for (the current one where memory is left alone)
	nonHeap float64
	gogc    string // GOGC to set, "" to leave it
	gcWhy   string // why GOGC is raised or left alone, "" when the GC is not high
}

// recommendMemory sets the memory: the live heap (a high quantile over
// pod-steps) with the GC's headroom (GOGC), plus what lies outside the
// heap, plus a margin. Never the working set's peak: a heap the GC was let
// grow (GOGC=off, a GOMEMLIMIT at the limit) fills whatever limit it gets.
func (r *Recommendation) recommendMemory(o *Observed, p pooled, hpa *HPA, opt Options) memoryPlan {
	gogc, gogcKnown := 100.0, o.GOGC.Valid()
	if gogcKnown {
		gogc = float64(o.GOGC)
	}
	live := quantile(p.live, opt.MemoryPercentile)
	m := memoryPlan{limit: o.Limits.Memory, nonHeap: quantile(p.nonHeap, opt.MemoryPercentile)}
	need := func(gogc float64) (float64, float64) {
		h := 2.0 // GOGC=off: a GOMEMLIMIT bounds the heap; give it GOGC=100's room
		if gogc >= 0 {
			h = 1 + math.Min(math.Max(gogc, 25), 400)/100
		}
		base := live*h + m.nonHeap
		return roundUp(base+math.Max(base*opt.MemoryMargin, opt.MinMemoryMargin), 1<<20), h
	}
	mem, h := need(gogc)
	memHPA := hpa != nil && hpa.Memory && !opt.AllowHPA
	if o.GCShare.Valid() && float64(o.GCShare) >= opt.GCHigh && gogc >= 0 && !memHPA {
		mem, h, m.gogc, m.gcWhy = raiseGOGC(o, gogc, gogcKnown, mem, h, need)
	}
	if memHPA {
		r.Reasons = append(r.Reasons, fmt.Sprintf("memory left as it is: HorizontalPodAutoscaler %s scales on memory utilisation (--allow-hpa sizes it anyway); it would be %s", hpa.Name, fmtBytes(mem)))
		return m
	}
	gogcWhy := "GOGC=" + gogcText(gogc) + "'s headroom"
	if !gogcKnown {
		gogcWhy = "GOGC assumed 100: go_gc_gogc_percent not exported (client_golang before v1.20)"
	}
	r.Reasons = append(r.Reasons, fmt.Sprintf("memory %s: live heap %s %s × %.2f (%s) + %s outside the heap (%s) + a %.0f%% margin (at least %s); not the working set (peak %s), which a GC may grow into any limit",
		fmtBytes(mem), pctl(opt.MemoryPercentile), fmtBytes(live), h, gogcWhy, fmtBytes(m.nonHeap), pctl(opt.MemoryPercentile), opt.MemoryMargin*100, fmtBytes(opt.MinMemoryMargin), fmtBytes(float64(o.WorkingSet.Max))))
	if len(p.podLive) > 1 {
		var above []string
		for _, pl := range p.podLive {
			if pl.max > 1.5*live {
				above = append(above, fmt.Sprintf("%s (%s)", pl.name, fmtBytes(pl.max)))
			}
		}
		if len(above) > 0 {
			r.Reasons = append(r.Reasons, fmt.Sprintf("pods whose live heap peaked above 1.5× the %s, left to that quantile (a leak, or a burst; --memory-percentile 1 sizes for the peak): %s",
				pctl(opt.MemoryPercentile), strings.Join(above, ", ")))
		}
	}
	// A container the kernel killed is never planned below the limit
	// it died at: that limit was too small, whatever the heap says.
	if p.oomAt > 0 && mem < p.oomAt*opt.OOMBump {
		mem = roundUp(p.oomAt*opt.OOMBump, 1<<20)
		r.Reasons = append(r.Reasons, fmt.Sprintf("memory raised to %s: %.0f OOM kills at a limit of %s, and never below %.1f× it", fmtBytes(mem), o.OOMKills, fmtBytes(p.oomAt), opt.OOMBump))
	}
	r.Memory, m.limit = Num(mem), mem
	return m
}

// raiseGOGC decides, for a GC that takes much of the CPU, whether GOGC
// goes up (doubled, at most 400) within the current limit: it gives the
// memory and headroom to plan for, the GOGC to set ("" for none) and why.
func raiseGOGC(o *Observed, gogc float64, gogcKnown bool, mem, h float64, need func(gogc float64) (float64, float64)) (float64, float64, string, string) {
	more := math.Min(gogc*2, 400)
	mem2, _ := need(more)
	switch {
	case !gogcKnown:
		// Raising an unknown GOGC could halve the headroom the heap
		// has: a live heap read as goal ÷ 2 is a quarter short at
		// GOGC=50.
		return mem, h, "", fmt.Sprintf("GOGC left alone: the GC takes %.0f%% of the CPU, but GOGC is unknown (go_gc_gogc_percent not exported)", 100*float64(o.GCShare))
	case o.Limits.Memory >= mem2:
		plan, h := strconv.Itoa(int(more)), 1+more/100
		return mem2, h, plan, fmt.Sprintf("GOGC=%s: the GC takes %.0f%% of the CPU and the current limit %s has room for the heap to grow to %.1f× the live heap",
			plan, 100*float64(o.GCShare), fmtBytes(o.Limits.Memory), h)
	default:
		return mem, h, "", fmt.Sprintf("GOGC left alone: the GC takes %.0f%% of the CPU, but GOGC=%.0f would need %s, more than the current limit %s",
			100*float64(o.GCShare), more, fmtBytes(mem2), fmtBytes(o.Limits.Memory))
	}
}

// planRuntime plans GOMAXPROCS, GOMEMLIMIT and GOGC through fit for the
// CPU and memory recommended (or kept), with GOGC raised where m says.
func (r *Recommendation) planRuntime(o *Observed, opt Options, m memoryPlan, planReq, planLim float64) {
	pol := opt.Policy
	if m.gogc != "" {
		po := pol.Options()
		po.GOGC = m.gogc
		if np, err := fit.New(po); err == nil {
			pol = np
		}
	}
	plan := pol.PlanContainer(fit.Container{
		CPULimit: planLim, LeafCPULimit: planLim, CPURequest: planReq, MemoryLimit: int64(m.limit), NonGo: int64(m.nonHeap), GoVersion: goRelease(o.GoVersion),
	})
	r.GOMAXPROCS, r.GOMEMLIMIT, r.GOGC, r.NonGo = plan.GOMAXPROCS, plan.GOMEMLIMIT, plan.GOGC, int64(m.nonHeap)
	r.Env = plan.Export
	for _, n := range plan.Reasons {
		r.Reasons = append(r.Reasons, "fit: "+n.Text)
	}
	if m.gcWhy != "" {
		r.Reasons = append(r.Reasons, m.gcWhy)
	}
}

// pctl names a quantile as the reasons print it: p95, p99.9, max.
func pctl(q float64) string {
	if q >= 1 {
		return "max"
	}
	return "p" + strconv.FormatFloat(q*100, 'f', -1, 64)
}

func gogcText(g float64) string {
	if g < 0 {
		return "off"
	}
	return strconv.Itoa(int(g))
}

// goRelease turns go_info's version ("go1.25.3") into what fit takes.
func goRelease(v string) string {
	if strings.HasPrefix(v, "go1.") {
		return v
	}
	return ""
}

func findings(o *Observed, rec Recommendation, procsOver bool, opt Options) []Finding {
	var f []Finding
	add := func(code, format string, a ...any) { f = append(f, Finding{code, fmt.Sprintf(format, a...)}) }
	lim := o.Limits
	if procsOver {
		add(CodeGOMAXPROCSAboveLimit, "GOMAXPROCS=%d with a CPU limit of %s: up to %d threads spend the quota early in each period and wait out the rest",
			int(o.GOMAXPROCS), fmtCores(lim.CPU), int(o.GOMAXPROCS))
	}
	if lim.Memory > 0 && o.GOMEMLIMIT.Valid() {
		switch gml := float64(o.GOMEMLIMIT); {
		case gml == 0:
			add(CodeGOMEMLIMITUnset, "GOMEMLIMIT unset with a memory limit of %s: the heap grows to GOGC's goal whatever the limit, and the cgroup kills it there", fmtBytes(lim.Memory))
		case gml >= lim.Memory:
			add(CodeGOMEMLIMITAtLimit, "GOMEMLIMIT %s is at or above the memory limit %s: memory outside the heap pushes the container over before the GC reacts", fmtBytes(gml), fmtBytes(lim.Memory))
		}
	}
	if gml := float64(o.GOMEMLIMIT); o.GOMEMLIMIT.Valid() && gml > 0 && o.LiveHeap.P99.Valid() && float64(o.LiveHeap.P99) >= opt.HeapPinned*gml {
		gc := "unknown"
		if o.GCShare.Valid() {
			gc = fmt.Sprintf("%.0f%%", 100*float64(o.GCShare))
		}
		add(CodeHeapPinned, "the live heap's p99 %s is %.0f%% of GOMEMLIMIT %s: the GC runs back to back to hold it (GC share of CPU %s)",
			fmtBytes(float64(o.LiveHeap.P99)), 100*float64(o.LiveHeap.P99)/gml, fmtBytes(gml), gc)
	}
	thr := float64(o.ThrottledShare)
	if procsOver && o.ThrottledShare.Valid() && thr >= opt.ThrottledHigh {
		add(CodeThrottledByGOMAXPROCS, "%.0f%% of CFS periods throttled at a CPU p95 of %s under a limit of %s: GOMAXPROCS=%d runs more threads than the limit pays for",
			100*thr, fmtCores(float64(o.CPU.P95)), fmtCores(lim.CPU), int(o.GOMAXPROCS))
	}
	if o.OOMKills > 0 {
		add(CodeOOMKilled, "%.0f OOM kills in the window", o.OOMKills)
	}
	if !rec.Enough() {
		add(CodeNotEnoughData, "not enough data: missing %s", strings.Join(rec.Missing, "; "))
		return f
	}
	var over, under []string
	rc, rm := float64(rec.CPURequest), float64(rec.Memory)
	if req := o.Requests.CPU; req > 0 && req > opt.OverFactor*rc && req-rc >= 0.1 {
		over = append(over, fmt.Sprintf("CPU request %s, %.1f× the %s recommended", fmtCores(req), req/rc, fmtCores(rc)))
	}
	if m := math.Max(o.Requests.Memory, lim.Memory); m > opt.OverFactor*rm && m-rm >= 64<<20 {
		over = append(over, fmt.Sprintf("memory %s, %.1f× the %s recommended", fmtBytes(m), m/rm, fmtBytes(rm)))
	}
	if req := o.Requests.CPU; req == 0 || req*1.25 < rc {
		if req == 0 {
			under = append(under, fmt.Sprintf("no CPU request, %s recommended", fmtCores(rc)))
		} else {
			under = append(under, fmt.Sprintf("CPU request %s below the %s recommended", fmtCores(req), fmtCores(rc)))
		}
	}
	if lim.CPU > 0 && !procsOver && o.ThrottledShare.Valid() && thr >= opt.ThrottledHigh {
		under = append(under, fmt.Sprintf("%.0f%% of CFS periods throttled under a CPU limit of %s", 100*thr, fmtCores(lim.CPU)))
	}
	if lim.Memory > 0 && lim.Memory < rm {
		under = append(under, fmt.Sprintf("memory limit %s below the %s recommended", fmtBytes(lim.Memory), fmtBytes(rm)))
	}
	if len(over) > 0 {
		add(CodeOverProvisioned, "%s", strings.Join(over, "; "))
	}
	if len(under) > 0 {
		add(CodeUnderProvisioned, "%s", strings.Join(under, "; "))
	}
	return f
}

// seriesOf takes the pods' highest figure per run of Series.Per steps, for the plots.
func seriesOf(in Input, g Group) Series {
	per := max(1, (in.Steps+plotPoints-1)/plotPoints)
	n := (in.Steps + per - 1) / per
	s := Series{Per: per, CPU: make([]float64, n), WorkingSet: make([]float64, n), LiveHeap: make([]float64, n)}
	for i := range n {
		s.CPU[i], s.WorkingSet[i], s.LiveHeap[i] = math.NaN(), math.NaN(), math.NaN()
	}
	for _, pod := range g.Pods {
		live := pod.LiveHeap
		if !live.Any() {
			live = pod.HeapAllocLow
		}
		for i := range in.Steps {
			for _, x := range []struct {
				dst *float64
				src Track
			}{{&s.CPU[i/per], pod.CPU}, {&s.WorkingSet[i/per], pod.WorkingSet}, {&s.LiveHeap[i/per], live}} {
				if v, ok := x.src.At(i); ok && (math.IsNaN(*x.dst) || v > *x.dst) {
					*x.dst = v
				}
			}
		}
	}
	return s
}

// roundUp rounds x up to a multiple of unit, without float noise in the
// thousandths (0.30000000000000004 cores is 300m).
func roundUp(x, unit float64) float64 { return math.Round(math.Ceil(x/unit-1e-9)*unit*1000) / 1000 }

func fmtCores(c float64) string {
	if math.IsNaN(c) {
		return "–"
	}
	if c >= 1 && c == math.Trunc(c) {
		return strconv.Itoa(int(c))
	}
	return strconv.Itoa(int(math.Round(c*1000))) + "m"
}

func fmtBytes(b float64) string {
	if math.IsNaN(b) || math.IsInf(b, 0) {
		return "–"
	}
	return fit.FormatBytes(int64(b))
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour:
		return fmt.Sprintf("%.1fh", d.Hours())
	}
	return d.Round(time.Second).String()
}

// cpuLimitFrom is a CPU limit from a demand quantile q and its margin:
// whole cores from one core up (so that GOMAXPROCS uses all of it),
// 0.05 steps below, and never under the request.
func cpuLimitFrom(q, margin, req float64) float64 {
	l := q * (1 + margin)
	if l >= 1 {
		l = math.Ceil(l - 1e-9)
	} else {
		l = roundUp(l, 0.05)
	}
	return math.Max(l, req)
}

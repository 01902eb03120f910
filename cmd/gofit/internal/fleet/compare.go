package fleet

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// KRR's simple strategy at its defaults (robusta-dev/krr,
// robusta_krr/strategies/simple.py and core/runner.py, read at d6baa74,
// July 2026; our own code): the CPU request is the highest of each pod's
// own p95 of usage, with no CPU limit; memory (request and limit) the
// highest of each pod's working-set peak + 15%; each figure rounded up
// (to 1m, to 1MiB) and at least 10m and 100MiB; a figure needs 100
// points and 3 hours of history, and none is given for a resource an HPA
// scales on by utilisation (unless --allow-hpa). KRR reads 336 hours at
// 1.25-minute steps by default; here it reads gofit's window and step,
// so that every method sees the same samples.
const (
	krrCPUPercentile = 0.95
	krrMemoryBuffer  = 0.15
	krrMinCPU        = 0.010
	krrMinMemory     = 100 << 20
	krrPointsNeeded  = 100
	krrMinHistory    = 3 * time.Hour
)

// KRR computes KRR's simple strategy on a group's series.
func KRR(in Input, g Group, hpa *HPA, opt Options) Recommendation {
	r := Recommendation{Method: "krr-simple", CPURequest: nan, CPULimit: nan, Memory: nan}
	cpu, mem := math.NaN(), math.NaN()
	var nCPU, nMem int
	first, last := -1, -1
	for _, pod := range g.Pods {
		var xs []float64
		for i := range in.Steps {
			if v, ok := pod.CPU.At(i); ok {
				xs = append(xs, v)
				if first < 0 || i < first {
					first = i
				}
				last = max(last, i)
			}
			if v, ok := pod.WorkingSet.At(i); ok {
				nMem++
				if math.IsNaN(mem) || v > mem {
					mem = v
				}
			}
		}
		nCPU += len(xs)
		if q := quantile(xs, krrCPUPercentile); !math.IsNaN(q) && (math.IsNaN(cpu) || q > cpu) {
			cpu = q
		}
	}
	span := time.Duration(0)
	if first >= 0 {
		span = time.Duration(last-first+1) * in.Step
	}
	if r.krrEnough("CPU", "CPU usage (container_cpu_usage_seconds_total)", nCPU, span, hpa, hpa != nil && hpa.CPU && !opt.AllowHPA) {
		c := math.Max(math.Ceil(cpu*1000-1e-9)/1000, krrMinCPU)
		r.CPURequest = Num(c)
		r.Reasons = append(r.Reasons, fmt.Sprintf("CPU request %s: the highest pod's p95 of usage (%d points), at least 10m; no CPU limit", fmtCores(c), nCPU))
	}
	if r.krrEnough("memory", "working set (container_memory_working_set_bytes)", nMem, span, hpa, hpa != nil && hpa.Memory && !opt.AllowHPA) {
		m := math.Max(math.Ceil(mem*(1+krrMemoryBuffer)/(1<<20)-1e-9)*(1<<20), krrMinMemory)
		r.Memory = Num(m)
		r.Reasons = append(r.Reasons, fmt.Sprintf("memory %s: the highest pod's working-set peak %s + 15%%, at least 100MiB", fmtBytes(m), fmtBytes(mem)))
	}
	if len(r.Missing) > 0 {
		r.Reasons = append(r.Reasons, "not enough data: "+strings.Join(r.Missing, "; "))
	}
	r.Reasons = append(r.Reasons, "on gofit's window and step (KRR's own defaults: 336h at 1.25m)")
	return r
}

// krrEnough reports whether KRR gives a figure for a resource from its n
// points over span; if not, it notes what is missing (series names them
// when there are none) or that the HPA scales on it (byHPA).
func (r *Recommendation) krrEnough(resource, series string, n int, span time.Duration, hpa *HPA, byHPA bool) bool {
	switch {
	case n == 0:
		r.Missing = append(r.Missing, series)
	case n < krrPointsNeeded || span < krrMinHistory:
		r.Missing = append(r.Missing, fmt.Sprintf("%s history: %d points over %s, KRR wants %d over %s", resource, n, fmtDuration(span), krrPointsNeeded, fmtDuration(krrMinHistory)))
	case byHPA:
		r.Reasons = append(r.Reasons, fmt.Sprintf("%s: none (HPA %s scales on %s utilisation; KRR says \"HPA detected\")", resource, hpa.Name, resource))
	default:
		return true
	}
	return false
}

// VPA recommender constants (kubernetes/autoscaler, vertical-pod-autoscaler
// pkg/recommender): decaying histograms with a 24 h half-life, exponential
// buckets growing by 5 %, a target at p90 for CPU and for memory's daily
// peaks, a 15 % safety margin, and minimums of 25m and 250 MiB.
const (
	vpaHalfLife       = 24 * time.Hour
	vpaBucketRatio    = 1.05
	vpaCPUFirst       = 0.01 // cores
	vpaCPUMax         = 1000.0
	vpaMemFirst       = 1e7 // bytes
	vpaMemMax         = 1e12
	vpaTarget         = 0.9
	vpaSafety         = 0.15
	vpaMinCPU         = 0.025
	vpaMinMemory      = 250 << 20
	vpaMinSampleW     = 0.1
	vpaOOMBumpRatio   = 1.2
	vpaOOMMinBump     = 100 << 20
	vpaMemoryInterval = 24 * time.Hour
)

// histogram is VPA's decaying histogram with exponential buckets.
type histogram struct {
	first, ratio float64
	w            []float64
	ref          time.Time
}

func newHistogram(first, maxV float64, ref time.Time) *histogram {
	n := int(math.Ceil(math.Log(maxV*(vpaBucketRatio-1)/first+1)/math.Log(vpaBucketRatio))) + 1
	return &histogram{first: first, ratio: vpaBucketRatio, w: make([]float64, n), ref: ref}
}

func (h *histogram) start(i int) float64 {
	return h.first * (math.Pow(h.ratio, float64(i)) - 1) / (h.ratio - 1)
}

func (h *histogram) bucket(v float64) int {
	if v < h.first {
		return 0
	}
	i := int(math.Floor(math.Log(v*(h.ratio-1)/h.first+1) / math.Log(h.ratio)))
	return min(max(i, 0), len(h.w)-1)
}

// add a sample whose weight decays by half every half-life before ref
// (VPA moves ref forward; the ratio of weights is the same).
func (h *histogram) add(v, weight float64, t time.Time) {
	h.w[h.bucket(v)] += weight * math.Exp2(t.Sub(h.ref).Hours()/vpaHalfLife.Hours())
}

// percentile is the upper end of the bucket where the weight reaches p,
// as VPA's histogram answers.
func (h *histogram) percentile(p float64) float64 {
	total := 0.0
	for _, w := range h.w {
		total += w
	}
	if total == 0 {
		return math.NaN()
	}
	sum := 0.0
	for i, w := range h.w {
		sum += w
		if sum >= p*total {
			if i < len(h.w)-1 {
				return h.start(i + 1)
			}
			return h.start(i)
		}
	}
	return h.start(len(h.w) - 1)
}

// VPA computes the VPA recommender's target on the same data: CPU
// samples weighted alike, memory as one peak per pod and 24 h interval,
// an OOM kill as a peak of 1.2× (at least +100 MiB) the request or the
// interval's peak.
//
// Its figures are checked against VPA's own code (v1.8.1) in
// TestVPAAgainstItsModule. containersInPod is how many containers the
// pod's minimums are split among: the workload's Go containers (its
// other containers are not known here, so a pod with sidecars gets a
// higher minimum than VPA would give it).
func VPA(in Input, g Group, containersInPod int) Recommendation {
	return vpa(in, g, containersInPod)
}

func vpa(in Input, g Group, containersInPod int) Recommendation {
	ooms := 0.0
	for _, p := range g.Pods {
		ooms += p.OOMKills
	}
	r := Recommendation{Method: "vpa", CPURequest: nan, CPULimit: nan, Memory: nan}
	cpu := newHistogram(vpaCPUFirst, vpaCPUMax, in.Start)
	mem := newHistogram(vpaMemFirst, vpaMemMax, in.Start)
	var nCPU, nMem int
	per := int(max(1, vpaMemoryInterval/in.Step))
	for _, pod := range g.Pods {
		// v1.8 weighs every CPU sample alike (minSampleWeight), whatever
		// the request.
		w := vpaMinSampleW
		lastPeak, lastAt := math.NaN(), time.Time{}
		for i := range in.Steps {
			t := in.Start.Add(time.Duration(i+1) * in.Step)
			if v, ok := pod.CPU.At(i); ok {
				cpu.add(v, w, t)
				nCPU++
			}
		}
		for s := 0; s < in.Steps; s += per {
			peak := math.NaN()
			for i := s; i < min(s+per, in.Steps, pod.WorkingSet.End()); i++ {
				if v, ok := pod.WorkingSet.At(i); ok && (math.IsNaN(peak) || v > peak) {
					peak = v
				}
			}
			if !math.IsNaN(peak) {
				lastPeak, lastAt = peak, in.Start.Add(time.Duration(s)*in.Step)
				mem.add(peak, 1, lastAt)
				nMem++
			}
		}
		// An OOM kill is a peak of 1.2× (at least +100MiB) the memory
		// request or the interval's peak, whichever is higher; it takes
		// the interval's place where it is above its peak (RecordOOM).
		if pod.OOMKills > 0 {
			used := pod.Requests.Memory
			if !math.IsNaN(lastPeak) {
				used = math.Max(used, lastPeak)
			}
			oom := math.Max(used*vpaOOMBumpRatio, used+vpaOOMMinBump)
			switch {
			case math.IsNaN(lastPeak):
				mem.add(oom, 1, in.Start.Add(time.Duration(in.Steps)*in.Step))
			case oom > lastPeak:
				mem.add(lastPeak, -1, lastAt)
				mem.add(oom, 1, lastAt)
			}
		}
	}
	if nCPU == 0 {
		r.Missing = append(r.Missing, "CPU usage (container_cpu_usage_seconds_total)")
	}
	if nMem == 0 {
		r.Missing = append(r.Missing, "working set (container_memory_working_set_bytes)")
	}
	if len(r.Missing) > 0 {
		r.Reasons = []string{"not enough data"}
		return r
	}
	// The pod's minimums are split among its containers.
	share := 1 / float64(max(containersInPod, 1))
	c := math.Max(cpu.percentile(vpaTarget)*(1+vpaSafety), vpaMinCPU*share)
	m := math.Max(mem.percentile(vpaTarget)*(1+vpaSafety), vpaMinMemory*share)
	r.CPURequest, r.Memory = Num(c), Num(m)
	r.Reasons = []string{
		fmt.Sprintf("CPU target %s: p90 of a decaying histogram (half-life 24h, %d samples weighted alike) + 15%%, at least 25m ÷ %d containers", fmtCores(c), nCPU, max(containersInPod, 1)),
		fmt.Sprintf("memory target %s: p90 of %d daily working-set peaks (decaying) + 15%%, at least 250MiB ÷ %d containers%s", fmtBytes(m), nMem, max(containersInPod, 1),
			map[bool]string{true: fmt.Sprintf("; %.0f OOM kills bumped", ooms), false: ""}[ooms > 0]),
		"VPA sets requests; limits keep their ratio to requests",
	}
	return r
}

package fleet

import (
	"fmt"
	"math"
	"time"
)

// KRR's simple strategy (robusta-dev/krr, strategies/simple.py): the CPU
// request at the p95 of usage, no CPU limit, memory request and limit at
// the working set's peak + 15%.
func KRR(cpu, ws []float64, window string, opt Options) Recommendation {
	r := Recommendation{Method: "krr-simple", CPURequest: nan, CPULimit: nan, Memory: nan}
	if len(cpu) == 0 {
		r.Missing = append(r.Missing, "CPU usage (container_cpu_usage_seconds_total)")
	}
	if len(ws) == 0 {
		r.Missing = append(r.Missing, "working set (container_memory_working_set_bytes)")
	}
	if len(r.Missing) > 0 {
		r.Reasons = []string{"not enough data"}
		return r
	}
	r.CPURequest = Num(quantile(cpu, .95))
	r.Memory = Num(quantile(ws, 1) * 1.15)
	r.Reasons = []string{
		fmt.Sprintf("CPU request %s: p95 of usage, no CPU limit (%s)", fmtCores(float64(r.CPURequest)), window),
		fmt.Sprintf("memory %s: working set peak %s + 15%%", fmtBytes(float64(r.Memory)), fmtBytes(quantile(ws, 1))),
	}
	return r
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
// samples weighted by the request (at least 0.1 core), memory as one
// peak per pod and 24 h interval, an OOM kill as a peak of 1.2× (at
// least +100 MiB) the memory it died at.
func VPA(in Input, g Group, o *Observed, opt Options) Recommendation {
	r := Recommendation{Method: "vpa", CPURequest: nan, CPULimit: nan, Memory: nan}
	cpu := newHistogram(vpaCPUFirst, vpaCPUMax, in.Start)
	mem := newHistogram(vpaMemFirst, vpaMemMax, in.Start)
	var nCPU, nMem int
	maxWS := 0.0
	per := int(max(1, vpaMemoryInterval/in.Step))
	for _, pod := range g.Pods {
		w := math.Max(pod.Requests.CPU, vpaMinSampleW)
		for i := range in.Steps {
			t := in.Start.Add(time.Duration(i+1) * in.Step)
			if i < len(pod.CPU) && !math.IsNaN(float64(pod.CPU[i])) {
				cpu.add(float64(pod.CPU[i]), w, t)
				nCPU++
			}
		}
		for s := 0; s < in.Steps; s += per {
			peak := math.NaN()
			for i := s; i < min(s+per, in.Steps, len(pod.WorkingSet)); i++ {
				if v := float64(pod.WorkingSet[i]); !math.IsNaN(v) && (math.IsNaN(peak) || v > peak) {
					peak = v
				}
			}
			if !math.IsNaN(peak) {
				mem.add(peak, 1, in.Start.Add(time.Duration(s)*in.Step))
				nMem++
				maxWS = math.Max(maxWS, peak)
			}
		}
		if pod.OOMKills > 0 {
			used := math.Max(math.Max(pod.Requests.Memory, pod.Limits.Memory), maxWS)
			mem.add(math.Max(used*vpaOOMBumpRatio, used+vpaOOMMinBump), 1, in.Start.Add(time.Duration(in.Steps)*in.Step))
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
	c := math.Max(cpu.percentile(vpaTarget)*(1+vpaSafety), vpaMinCPU)
	m := math.Max(mem.percentile(vpaTarget)*(1+vpaSafety), vpaMinMemory)
	r.CPURequest, r.Memory = Num(c), Num(m)
	r.Reasons = []string{
		fmt.Sprintf("CPU target %s: p90 of a decaying histogram (half-life 24h, %d samples weighted by the request) + 15%%", fmtCores(c), nCPU),
		fmt.Sprintf("memory target %s: p90 of %d daily working-set peaks (decaying) + 15%%, at least 250MiB%s", fmtBytes(m), nMem,
			map[bool]string{true: fmt.Sprintf("; %.0f OOM kills bumped", o.OOMKills), false: ""}[o.OOMKills > 0]),
		"VPA sets requests; limits keep their ratio to requests",
	}
	return r
}

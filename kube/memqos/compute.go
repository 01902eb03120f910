package memqos

import (
	"fmt"
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Max is the value meaning "no limit": "max" on v2, -1 on v1.
const Max int64 = math.MaxInt64

// The files memqos manages.
const (
	FileMin        = "memory.min"
	FileLow        = "memory.low"
	FileHigh       = "memory.high"
	FileSoftLimit  = "memory.soft_limit_in_bytes" // v1 only
	FileWmarkRatio = "memory.wmark_ratio"
	FileWmarkScale = "memory.wmark_scale_factor"
	FileWmarkMin   = "memory.wmark_min_adj"
	FilePriority   = "memory.priority"
	FilePrioOOM    = "memory.use_priority_oom"
	FileOOMGroup   = "memory.oom.group"
)

// Level is a cgroup's depth in the kubelet's tree; writes are ordered by it.
type Level int

// Levels, top first. The kubepods cgroup is also the Guaranteed class's.
const (
	LevelKubepods Level = iota
	LevelQoS
	LevelPod
	LevelContainer
)

// Setting is one value for one file, with why.
type Setting struct {
	File   string
	Value  int64 // bytes, or Max
	Reason string
}

// Input is everything Compute needs.
type Input struct {
	Pods       []*corev1.Pod
	Strategy   Strategy   // resolved for this node (Config.ForNode)
	Namespaces Namespaces // the memory-qos allow/deny lists
	// Policy applies to pods without a memoryQOS annotation policy: ""
	// or PolicyDefault follow the class configuration; PolicyAuto uses the
	// auto profile for every pod.
	Policy Policy
	// NodeAllocatable is the node's allocatable memory: it stands in for
	// a missing limit and bounds the protected total.
	NodeAllocatable int64
	// MaxProtectedRatio caps the sum of memory.min at this share of
	// NodeAllocatable; 0 means 0.8.
	MaxProtectedRatio float64
	CgroupVersion     int   // 1 adds memory.soft_limit_in_bytes
	PageSize          int64 // 0 means 4096
}

// Result is the plan: values per level, protected totals and warnings.
type Result struct {
	Kubepods []Setting
	QoS      map[corev1.PodQOSClass][]Setting // Burstable and BestEffort
	Pods     []PodResult
	// Protected sums memory.min and memory.low of running pods per class.
	Protected map[Class]Protection
	Warnings  []string
}

// Protection is the memory protected for a class.
type Protection struct{ Min, Low int64 }

// PodResult is one pod's values.
type PodResult struct {
	UID        types.UID
	Namespace  string
	Name       string
	KubeQoS    corev1.PodQOSClass
	Class      Class
	Policy     Policy // what was applied: auto, default or none
	Settings   []Setting
	Containers []ContainerResult
}

// ContainerResult is one container's values; ID is status.containerID
// ("containerd://…"), empty until the container has started.
type ContainerResult struct {
	Name     string
	ID       string
	Settings []Setting
}

// auto is gofit's profile, chosen to act on upstream kernels where
// koordinator's all-zero defaults do nothing:
//   - memory.min stays 0 for every class: hard protection cannot be taken
//     back even when the node itself is about to OOM, and memory.low
//     already sends reclaim elsewhere first.
//   - LSE/LSR/LS get memory.low = request: the requested memory is what the
//     scheduler promised, so reclaim takes it last.
//   - memory.high sits between request and limit as in Kubernetes
//     MemoryQoS (KEP-2570, factor 0.8), 0.9 for LSR whose latency matters
//     most: the container is reclaimed and slowed before the OOM killer.
//   - BE is throttled half way between request and limit (or node
//     allocatable), well before it can push LS pods into reclaim.
func auto(c Class) MemoryQOS {
	p := func(v int64) *int64 { return &v }
	switch c {
	case LSE, LSR:
		return MemoryQOS{MinLimitPercent: p(0), LowLimitPercent: p(100), ThrottlingPercent: p(90)}
	case LS:
		return MemoryQOS{MinLimitPercent: p(0), LowLimitPercent: p(100), ThrottlingPercent: p(80)}
	}
	return MemoryQOS{MinLimitPercent: p(0), LowLimitPercent: p(0), ThrottlingPercent: p(50)}
}

// minGuard keeps memory.min below the limit (at most 9/10 of it): with
// memory.min equal to memory.max the kernel cannot reclaim the group's own
// page cache at its limit and OOM-kills instead (kubernetes#126485).
const minGuardNum, minGuardDen = 9, 10

// Compute plans the values for every running pod and the class levels.
func Compute(in Input) Result {
	page := in.PageSize
	if page <= 0 {
		page = 4096
	}
	ratio := in.MaxProtectedRatio
	if ratio <= 0 {
		ratio = 0.8
	}
	res := Result{QoS: map[corev1.PodQOSClass][]Setting{}, Protected: map[Class]Protection{}}
	pods := append([]*corev1.Pod(nil), in.Pods...)
	sort.Slice(pods, func(i, j int) bool { return pods[i].UID < pods[j].UID })
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue // finished: nothing to protect, out of the sums
		}
		pr, warns := computePod(pod, in, page)
		for _, w := range warns {
			res.Warnings = append(res.Warnings, fmt.Sprintf("pod %s/%s: %s", pod.Namespace, pod.Name, w))
		}
		if pr != nil {
			res.Pods = append(res.Pods, *pr)
		}
	}

	// Safety: the node's total memory.min never exceeds its protected share.
	capBytes := int64(float64(in.NodeAllocatable) * ratio)
	var total int64
	for i := range res.Pods {
		total += value(res.Pods[i].Settings, FileMin)
	}
	if in.NodeAllocatable > 0 && total > capBytes {
		f := float64(capBytes) / float64(total)
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"memory.min of all pods sums to %d bytes, over %.0f%% of node allocatable (%d); scaled by %.3f",
			total, ratio*100, capBytes, f))
		why := fmt.Sprintf("; scaled by %.3f to keep the node's memory.min within %.0f%% of allocatable", f, ratio*100)
		scale := func(ss []Setting) {
			for i := range ss {
				if ss[i].File == FileMin && ss[i].Value > 0 {
					ss[i].Value = floorPage(int64(float64(ss[i].Value)*f), page)
					ss[i].Reason += why
				}
			}
		}
		for i := range res.Pods {
			scale(res.Pods[i].Settings)
			for j := range res.Pods[i].Containers {
				scale(res.Pods[i].Containers[j].Settings)
			}
		}
	}

	// Class levels: Burstable and BestEffort cgroups hold their pods' sums;
	// kubepods (also the Guaranteed class's cgroup) holds the sum over all.
	sums := map[corev1.PodQOSClass]*Protection{corev1.PodQOSGuaranteed: {}, corev1.PodQOSBurstable: {}, corev1.PodQOSBestEffort: {}}
	var all Protection
	for _, p := range res.Pods {
		mn, lo := value(p.Settings, FileMin), value(p.Settings, FileLow)
		s := sums[p.KubeQoS]
		if s == nil {
			continue
		}
		s.Min += mn
		s.Low += lo
		all.Min += mn
		all.Low += lo
		pc := res.Protected[p.Class]
		pc.Min += mn
		pc.Low += lo
		res.Protected[p.Class] = pc
	}
	levelSettings := func(p Protection, what string) []Setting {
		return []Setting{
			{FileMin, p.Min, "sum of memory.min of " + what},
			{FileLow, p.Low, "sum of memory.low of " + what},
		}
	}
	res.Kubepods = levelSettings(all, "all running pods")
	res.QoS[corev1.PodQOSBurstable] = levelSettings(*sums[corev1.PodQOSBurstable], "running Burstable pods")
	res.QoS[corev1.PodQOSBestEffort] = levelSettings(*sums[corev1.PodQOSBestEffort], "running BestEffort pods")
	return res
}

func value(ss []Setting, file string) int64 {
	for _, s := range ss {
		if s.File == file {
			return s.Value
		}
	}
	return 0
}

func floorPage(v, page int64) int64 { return v / page * page }

// computePod returns nil for pods memqos leaves alone (SYSTEM class).
func computePod(pod *corev1.Pod, in Input, page int64) (*PodResult, []string) {
	var warns []string
	class, w := PodClass(pod)
	if w != "" {
		warns = append(warns, w)
	}
	if class == SYSTEM {
		return nil, warns
	}
	pc, w := PodPolicy(pod)
	if w != "" {
		warns = append(warns, w)
	}
	pr := &PodResult{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, KubeQoS: KubeQoS(pod), Class: class}

	policy := in.Policy
	if policy == "" {
		policy = PolicyDefault
	}
	if pc != nil && pc.Policy != "" {
		policy = pc.Policy
	}
	var knobs MemoryQOS
	var why string
	enabled := true
	switch {
	case !in.Namespaces.allowed(pod.Namespace):
		enabled, why = false, "namespace "+pod.Namespace+" is not enabled for memory QoS"
	case policy == PolicyNone:
		enabled, why = false, "policy none"
	case policy == PolicyAuto:
		knobs, why = auto(class), "auto"
	default:
		cfg := in.Strategy.class(class)
		overrides := pc != nil && pc.MemoryQOS != (MemoryQOS{})
		if (cfg.Enable == nil || !*cfg.Enable) && !overrides {
			enabled, why = false, string(class)+" memory QoS is not enabled"
		} else {
			// koordinator's defaults are all zero: enabled without
			// percentages means kernel defaults for min, low and high.
			knobs, why = cfg.MemoryQOS, string(class)+" class configuration"
		}
	}
	if pc != nil && enabled {
		if pc.MemoryQOS != (MemoryQOS{}) {
			why += " with the pod's overrides"
		}
		knobs = knobs.merge(pc.MemoryQOS)
	}
	if !enabled {
		policy = PolicyNone
	}
	pr.Policy = policy

	if !enabled {
		restore := func(level Level) []Setting {
			ss := []Setting{{FileMin, 0, why + ": kernel default"}, {FileLow, 0, why + ": kernel default"}}
			if level == LevelContainer {
				ss = append(ss, Setting{FileHigh, Max, why + ": kernel default"})
				if in.CgroupVersion == 1 {
					ss = append(ss, Setting{FileSoftLimit, Max, why + ": kernel default"})
				}
			}
			return ss
		}
		pr.Settings = restore(LevelPod)
		for _, c := range pod.Spec.Containers {
			pr.Containers = append(pr.Containers, ContainerResult{Name: c.Name, ID: containerID(pod, c.Name), Settings: restore(LevelContainer)})
		}
		return pr, warns
	}

	pct := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	minPct, lowPct, thrPct := pct(knobs.MinLimitPercent), pct(knobs.LowLimitPercent), pct(knobs.ThrottlingPercent)

	// Pod level: min and low from the sum of the requests.
	preq, plim := podMemory(pod, class)
	pmin, plow, minWhy, lowWhy := protection(preq, plim, minPct, lowPct, page, why, "pod")
	pr.Settings = append([]Setting{{FileMin, pmin, minWhy}, {FileLow, plow, lowWhy}}, knobSettings(knobs, why)...)

	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cr := ContainerResult{Name: c.Name, ID: containerID(pod, c.Name)}
		req, lim := containerMemory(c, class)
		cmin, clow, cminWhy, clowWhy := protection(req, lim, minPct, lowPct, page, why, "container")
		high, highWhy := containerHigh(pod, c, class, req, lim, thrPct, cmin, policy, why, in.NodeAllocatable, page)
		cr.Settings = []Setting{{FileMin, cmin, cminWhy}, {FileLow, clow, clowWhy}, {FileHigh, high, highWhy}}
		if in.CgroupVersion == 1 {
			// v1 fallback: global reclaim goes to groups over their soft
			// limit first, so BE (soft limit 0) gives memory back before LS.
			if class == BE {
				cr.Settings = append(cr.Settings, Setting{FileSoftLimit, 0, why + ": BE gives memory back first under node pressure (cgroup v1 fallback)"})
			} else {
				soft, softWhy := floorPage(req, page), why+": soft limit at the request, reclaimed after BE (cgroup v1 fallback)"
				if req == 0 {
					soft, softWhy = Max, why+": no request, no soft limit (cgroup v1 fallback)"
				}
				cr.Settings = append(cr.Settings, Setting{FileSoftLimit, soft, softWhy})
			}
		}
		cr.Settings = append(cr.Settings, knobSettings(knobs, why)...)
		pr.Containers = append(pr.Containers, cr)
	}
	return pr, warns
}

// containerHigh is koordinator's memory.high: request plus throttlingPercent
// of the way to the limit (node allocatable without one), page aligned, no
// lower than memory.min; 0% means max. It is then made Go-aware.
func containerHigh(pod *corev1.Pod, c *corev1.Container, class Class, req, lim, thr, cmin int64, policy Policy, why string, alloc, page int64) (int64, string) {
	if thr == 0 {
		return Max, why + ": throttlingPercent 0 means no memory.high"
	}
	top, topName := lim, "limit"
	if top == 0 {
		top, topName = alloc, "node allocatable"
	}
	if top <= 0 {
		return Max, why + ": no limit and no node allocatable known"
	}
	if policy == PolicyAuto && lim > 0 && req >= lim {
		// KEP-2570 leaves Guaranteed containers alone: a memory.high at the
		// limit only adds throttling where the OOM killer already stands.
		return Max, why + ": request equals the limit, memory.high would only duplicate memory.max"
	}
	r := min(req, top)
	high := floorPage(r+(top-r)*thr/100, page)
	highWhy := fmt.Sprintf("%s: request %d + (%s %d − request) × throttlingPercent %d%%", why, req, topName, top, thr)
	if high < cmin {
		high, highWhy = cmin, highWhy+"; raised to memory.min"
	}
	if gml, src, ok := GoMemLimit(pod, c); ok {
		need := gml + nonGoBudget(gml)
		switch {
		case lim > 0 && need >= lim:
			return Max, fmt.Sprintf("%s; GOMEMLIMIT %d (%s) + non-Go budget %d reaches the limit %d, so memory.high is left at max and the runtime's own limit governs",
				highWhy, gml, src, nonGoBudget(gml), lim)
		case high < need:
			need = (need + page - 1) / page * page
			return need, fmt.Sprintf("%s; raised to GOMEMLIMIT %d (%s) + non-Go budget %d so the Go heap is not throttled below the limit its runtime was given",
				highWhy, gml, src, nonGoBudget(gml))
		}
	}
	return high, highWhy
}

// nonGoBudget is the memory a Go container uses outside the runtime's
// accounting (page cache, cgo, kernel memory charged to it): 1/16 of
// GOMEMLIMIT, at least 8 MiB.
func nonGoBudget(gml int64) int64 { return max(gml/16, 8<<20) }

// knobSettings are the Alibaba Cloud Linux extensions that were set
// explicitly.
func knobSettings(k MemoryQOS, why string) []Setting {
	var ss []Setting
	for _, f := range []struct {
		file string
		v    *int64
	}{
		{FileWmarkRatio, k.WmarkRatio}, {FileWmarkScale, k.WmarkScalePermill}, {FileWmarkMin, k.WmarkMinAdj},
		{FilePrioOOM, k.PriorityEnable}, {FilePriority, k.Priority}, {FileOOMGroup, k.OomKillGroup},
	} {
		if f.v != nil {
			ss = append(ss, Setting{f.file, *f.v, why + ": set explicitly"})
		}
	}
	return ss
}

func containerID(pod *corev1.Pod, name string) string {
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == name {
			return st.ContainerID
		}
	}
	return ""
}

// protection is memory.min and memory.low for a pod or a container (who)
// with request req and limit lim, with the reason for each: koordinator's
// percentages of the request, page-aligned; min kept at 9/10 of the limit
// so the kernel can still reclaim at the limit; low at least min.
func protection(req, lim, minPct, lowPct, page int64, why, who string) (minV, lowV int64, minWhy, lowWhy string) {
	minV, lowV = floorPage(req*minPct/100, page), floorPage(req*lowPct/100, page)
	minWhy = fmt.Sprintf("%s: request %d × minLimitPercent %d%%", why, req, minPct)
	if lim > 0 && minV > lim*minGuardNum/minGuardDen {
		minV = floorPage(lim*minGuardNum/minGuardDen, page)
		minWhy += "; kept at 9/10 of the limit so the " + who + " can still reclaim at its limit"
	}
	lowWhy = fmt.Sprintf("%s: request %d × lowLimitPercent %d%%", why, req, lowPct)
	if lowV < minV {
		lowV, lowWhy = minV, lowWhy+"; raised to memory.min"
	}
	return minV, lowV, minWhy, lowWhy
}

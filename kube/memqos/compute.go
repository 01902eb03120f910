package memqos

import (
	"errors"
	"fmt"
	"math/big"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cgroup/manage"
)

// ErrNoAllocatable means the node's allocatable memory is unknown: without
// it neither the node-wide cap nor the throttle of pods without a limit can
// be computed, so no values are planned at all.
var ErrNoAllocatable = errors.New("node allocatable memory unknown")

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
	Value  int64 // bytes, or manage.Unlimited
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
	// a missing limit and bounds every value. Required (ErrNoAllocatable).
	NodeAllocatable int64
	// MaxProtectedRatio caps the sum of memory.min at this share of
	// NodeAllocatable; 0 means 0.8.
	MaxProtectedRatio float64
	CgroupVersion     int   // 1 adds memory.soft_limit_in_bytes
	PageSize          int64 // 0 means 4096
	// KernelRelease is the node's kernel (uname -r). Below 5.9 memory.high
	// under the limit can livelock a group, so it is left at max. Empty
	// means a kernel known to be 5.9 or later.
	KernelRelease string
	// NodeStrategy is the matching node strategy's own blocks
	// (Config.NodeStrategy): a field it sets is the administrator's for
	// this node, and pods' annotations cannot override it.
	NodeStrategy Strategy
	// PodOverrides is what pods' memoryQOS annotations may change; nil
	// means DefaultPodOverrides.
	PodOverrides *PodOverrides
	// Node identifies the node, so that only the mirror pods its kubelet
	// made redirect a plan to a static pod's cgroup (CgroupUID).
	Node NodeID
	// Kept are pod cgroups the caller leaves as they are (a pod the
	// kubelet still runs that the API's view lacks, say): what they hold
	// counts in the sums of their class and of kubepods, so that no level
	// drops below them.
	Kept []Kept
	// Terse leaves every Setting's Reason empty; the values, warnings and
	// everything else are the same. A caller that compares the plan with
	// what the files hold every pass, and explains only what it writes
	// (the node agent), saves formatting a reason for each value: it plans
	// again without Terse when something is to be written.
	Terse bool
}

// Kept is a pod cgroup left as it is, with what it holds.
type Kept struct {
	UID      types.UID
	KubeQoS  corev1.PodQOSClass
	Min, Low int64
}

// Result is the plan: values per level, protected totals and warnings.
type Result struct {
	Kubepods []Setting
	QoS      map[corev1.PodQOSClass][]Setting // Burstable and BestEffort
	Pods     []PodResult
	// Protected sums memory.min and memory.low of running pods per class.
	Protected map[Class]Protection
	// Conflicts are cgroups that more than one API pod maps to (a forged
	// kubernetes.io/config.mirror): none of those pods is planned.
	Conflicts []Conflict
	Warnings  []string
}

// Conflict is one cgroup UID claimed by several API pods.
type Conflict struct {
	UID  types.UID
	Pods []string // namespace/name, sorted
}

// Protection is the memory protected for a class.
type Protection struct{ Min, Low int64 }

// PodResult is one pod's values.
type PodResult struct {
	UID       types.UID
	Namespace string
	Name      string
	KubeQoS   corev1.PodQOSClass
	Class     Class
	Policy    Policy // what was applied: auto, default or none
	// Request is the pod's memory request as the scheduler counts it
	// (saturating at 1 EiB), whatever was planned from it.
	Request    int64
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

// The percentages of auto, shared: no plan writes through the pointers.
var pct0, pct50, pct80, pct90, pct100 = int64(0), int64(50), int64(80), int64(90), int64(100)

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
	switch c {
	case LSE, LSR:
		return MemoryQOS{MinLimitPercent: &pct0, LowLimitPercent: &pct100, ThrottlingPercent: &pct90}
	case LS:
		return MemoryQOS{MinLimitPercent: &pct0, LowLimitPercent: &pct100, ThrottlingPercent: &pct80}
	}
	return MemoryQOS{MinLimitPercent: &pct0, LowLimitPercent: &pct0, ThrottlingPercent: &pct50}
}

// minGuard keeps memory.min below the limit (at most 9/10 of it): with
// memory.min equal to memory.max the kernel cannot reclaim the group's own
// page cache at its limit and OOM-kills instead (kubernetes#126485).
const minGuardNum, minGuardDen = 9, 10

// Compute plans the values for every running pod and the class levels.
// Every memory.min, memory.low and memory.high it plans is in
// [0, NodeAllocatable] (memory.high may be manage.Unlimited), memory.min ≤
// memory.low ≤ memory.high ≤ the limit at every level, and the node's total
// memory.min stays within MaxProtectedRatio of allocatable whatever any pod
// asks. Bad input (no allocatable memory, a ratio outside (0, 1], an
// unreadable kernel release) is an error and plans nothing.
func Compute(in Input) (Result, error) {
	env, err := in.check()
	if err != nil {
		return Result{}, err
	}
	res := Result{QoS: map[corev1.PodQOSClass][]Setting{}, Protected: map[Class]Protection{}}
	pods := append([]*corev1.Pod(nil), in.Pods...)
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return strings.Compare(string(a.UID), string(b.UID)) })
	res.Pods = make([]PodResult, 0, len(pods))
	var sl slabs
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue // finished: nothing to protect, out of the sums
		}
		res.Pods = append(res.Pods, PodResult{})
		warns := computePod(&res.Pods[len(res.Pods)-1], pod, in, env, &sl)
		for _, w := range warns {
			res.Warnings = append(res.Warnings, fmt.Sprintf("pod %s/%s: %s", pod.Namespace, pod.Name, w))
		}
	}
	res.Pods, res.Conflicts = withoutConflicts(res.Pods)
	for _, c := range res.Conflicts {
		res.Warnings = append(res.Warnings, fmt.Sprintf("pods %s all map to the cgroup of pod UID %s (a forged %s annotation?): none of them is planned",
			strings.Join(c.Pods, ", "), c.UID, AnnotationMirror))
	}

	// Safety: the node's total memory.min never exceeds its protected share.
	// The total is exact (a saturated sum would scale too little).
	var hi, lo uint64 // every value is in [0, maxBytes]: the sum fits in 128 bits
	for i := range res.Pods {
		var c uint64
		lo, c = bits.Add64(lo, uint64(value(res.Pods[i].Settings, FileMin)), 0)
		hi += c
	}
	if hi > 0 || lo > uint64(env.capMin) {
		total := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
		total.Or(total, new(big.Int).SetUint64(lo))
		capMin := big.NewInt(env.capMin)
		f, _ := new(big.Rat).SetFrac(capMin, total).Float64()
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"memory.min of all pods sums to %s bytes, over %.0f%% of node allocatable (%d); scaled by %.3f",
			total, env.ratio*100, env.capMin, f))
		var why string
		if !env.terse {
			why = fmt.Sprintf("; scaled by %d/%s to keep the node's memory.min within %.0f%% of allocatable", env.capMin, total, env.ratio*100)
		}
		scale := func(ss []Setting) {
			for i := range ss {
				if ss[i].File == FileMin && ss[i].Value > 0 {
					v := new(big.Int).Mul(big.NewInt(ss[i].Value), capMin)
					ss[i].Value = floorPage(v.Quo(v, total).Int64(), env.page) // at most the value: capMin < total
					if !env.terse {
						ss[i].Reason += why
					}
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
	// memory.low may sum past allocatable only where pods' requests do
	// (the kernel then shares the parent's protection out in proportion);
	// the levels themselves stay within allocatable.
	sums := map[corev1.PodQOSClass]*Protection{corev1.PodQOSGuaranteed: {}, corev1.PodQOSBurstable: {}, corev1.PodQOSBestEffort: {}}
	var all Protection
	for _, p := range res.Pods {
		mn, lo := value(p.Settings, FileMin), value(p.Settings, FileLow)
		s := sums[p.KubeQoS]
		if s == nil {
			continue
		}
		s.add(mn, lo)
		all.add(mn, lo)
		pc := res.Protected[p.Class]
		pc.add(mn, lo)
		res.Protected[p.Class] = pc
	}
	for _, k := range in.Kept {
		if s := sums[k.KubeQoS]; s != nil {
			mn, lo := min(max(k.Min, 0), env.alloc), min(max(k.Low, 0), env.alloc)
			s.add(mn, lo)
			all.add(mn, lo)
		}
	}
	levelSettings := func(p Protection, what string) []Setting {
		var lowWhy, minWhy string
		if !env.terse {
			lowWhy, minWhy = "sum of memory.low of "+what, "sum of memory.min of "+what
			if p.Low > env.alloc {
				lowWhy += fmt.Sprintf(" (%d), kept at node allocatable", p.Low)
			}
			if p.Min > env.alloc {
				minWhy += fmt.Sprintf(" (%d), kept at node allocatable", p.Min)
			}
			if min(p.Low, env.alloc) < min(p.Min, env.alloc) {
				lowWhy += "; raised to memory.min"
			}
		}
		p.Low, p.Min = min(p.Low, env.alloc), min(p.Min, env.alloc)
		if p.Low < p.Min {
			p.Low = p.Min
		}
		return []Setting{
			{FileMin, p.Min, minWhy},
			{FileLow, p.Low, lowWhy},
		}
	}
	res.Kubepods = levelSettings(all, "all running pods")
	res.QoS[corev1.PodQOSBurstable] = levelSettings(*sums[corev1.PodQOSBurstable], "running Burstable pods")
	res.QoS[corev1.PodQOSBestEffort] = levelSettings(*sums[corev1.PodQOSBestEffort], "running BestEffort pods")
	return res, nil
}

// withoutConflicts drops every pod whose cgroup UID another pod also maps
// to. Which one the kubelet runs there cannot be told from the API, and
// planning either could write one tenant's plan into another's cgroup.
func withoutConflicts(pods []PodResult) ([]PodResult, []Conflict) {
	count := make(map[types.UID]int, len(pods))
	dup := false
	for _, p := range pods {
		count[p.UID]++
		dup = dup || count[p.UID] > 1
	}
	if !dup {
		return pods, nil
	}
	by := map[types.UID][]string{}
	for _, p := range pods {
		if count[p.UID] > 1 {
			by[p.UID] = append(by[p.UID], p.Namespace+"/"+p.Name)
		}
	}
	var conflicts []Conflict
	for uid, names := range by {
		sort.Strings(names)
		conflicts = append(conflicts, Conflict{UID: uid, Pods: names})
	}
	sort.Slice(conflicts, func(i, j int) bool { return conflicts[i].UID < conflicts[j].UID })
	out := pods[:0]
	for _, p := range pods {
		if count[p.UID] == 1 {
			out = append(out, p)
		}
	}
	return out, conflicts
}

func (p *Protection) add(mn, lo int64) {
	p.Min = addBytes(p.Min, mn)
	p.Low = addBytes(p.Low, lo)
}

// limits is what Compute works with after checking its input.
type limits struct {
	page, alloc, capMin int64
	ratio               float64
	// oldKernel names a kernel below 5.9, where memory.high stays max.
	oldKernel string
	terse     bool // Input.Terse: no reasons
}

// slabs hand out the pods' settings and containers from a few shared
// arrays rather than a few small ones per pod. Each piece is capped at its
// length, so that an append to one never runs into the next.
type slabs struct {
	settings   []Setting
	containers []ContainerResult
	ctrs       []*corev1.Container // one pod's running containers, reused
}

func (s *slabs) settingsOf(n int) []Setting { return take(&s.settings, n, 256) }

func (s *slabs) containersOf(n int) []ContainerResult { return take(&s.containers, n, 64) }

// take cuts an empty slice of capacity n from the front of *slab,
// allocating a new slab of at least chunk elements when it runs short.
func take[T any](slab *[]T, n, chunk int) []T {
	if len(*slab) < n {
		*slab = make([]T, max(n, chunk))
	}
	out := (*slab)[:0:n]
	*slab = (*slab)[n:]
	return out
}

func (in Input) check() (limits, error) {
	l := limits{page: in.PageSize, alloc: in.NodeAllocatable, ratio: in.MaxProtectedRatio, terse: in.Terse}
	if l.page == 0 {
		l.page = 4096
	}
	if l.page < 0 || l.page&(l.page-1) != 0 || l.page > 1<<30 {
		return l, fmt.Errorf("page size %d: not a power of two up to 1 GiB", in.PageSize)
	}
	if l.alloc <= 0 {
		return l, fmt.Errorf("%w (allocatable %d bytes)", ErrNoAllocatable, l.alloc)
	}
	if l.alloc > maxBytes {
		return l, fmt.Errorf("node allocatable %d bytes: more than 1 EiB", l.alloc)
	}
	if l.ratio == 0 {
		l.ratio = 0.8
	}
	if !(l.ratio > 0 && l.ratio <= 1) {
		return l, fmt.Errorf("max protected ratio %v: want a share in (0, 1]", in.MaxProtectedRatio)
	}
	l.capMin = min(int64(float64(l.alloc)*l.ratio), l.alloc)
	if in.KernelRelease != "" {
		ok, err := kernelAtLeast(in.KernelRelease, 5, 9)
		if err != nil {
			return l, err
		}
		if !ok {
			l.oldKernel = in.KernelRelease
		}
	}
	return l, nil
}

// kernelAtLeast reports whether a kernel release ("6.1.0-13-amd64",
// "5.4.0-150-generic") is at least major.minor.
func kernelAtLeast(release string, major, minor int) (bool, error) {
	ma, rest, ok := strings.Cut(release, ".")
	mi := rest
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		mi = rest[:i]
	}
	a, err1 := strconv.Atoi(ma)
	b, err2 := strconv.Atoi(mi)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < 0 {
		return false, fmt.Errorf("kernel release %q: not MAJOR.MINOR[...]", release)
	}
	return a > major || (a == major && b >= minor), nil
}

// Byte arithmetic that cannot overflow: every input is in [0, maxBytes]
// (bytesOf, Input.check), and sums saturate there.

// addBytes is a+b, at most maxBytes.
func addBytes(a, b int64) int64 { return min(a+b, maxBytes) }

// pctOf is v×p/100 for v in [0, maxBytes] and p in [0, 100].
func pctOf(v, p int64) int64 { return v/100*p + v%100*p/100 }

// mulDiv is v×num/den, rounded down, for 0 ≤ num ≤ den: never above v.
// The product is taken in 128 bits.
func mulDiv(v, num, den int64) int64 {
	if den <= 0 || v <= 0 || num <= 0 {
		return 0
	}
	if num >= den {
		return v
	}
	hi, lo := bits.Mul64(uint64(v), uint64(num))
	q, _ := bits.Div64(hi, lo, uint64(den)) // hi < den: the quotient is below v
	return int64(q)
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

// computePod plans one pod. SYSTEM pods, pods of a disabled class or
// namespace and pods with policy none get the kernel defaults back: a pod
// relabelled SYSTEM must not keep protection from before, outside the sums.
func computePod(pr *PodResult, pod *corev1.Pod, in Input, env limits, sl *slabs) []string {
	var warns []string
	class, w := PodClass(pod)
	if w != "" {
		warns = append(warns, w)
	}
	pc, w := PodPolicy(pod)
	if w != "" {
		warns = append(warns, w)
	}
	allow := defaultPodOverrides()
	if in.PodOverrides != nil {
		allow = *in.PodOverrides
	}
	pc, ws := allow.filter(pc, in.NodeStrategy.class(class))
	warns = append(warns, ws...)
	planPod(pr, pod, class, pc, in, env, sl)
	if class == BE && pc != nil {
		// The BE throttle protects the LS pods beside it: what the pod says
		// of itself may lower it, never lift it (policy none,
		// throttlingPercent 0 or a higher one, policy default where the
		// node runs auto). The class's own plan is the ceiling.
		var byClass PodResult
		planPod(&byClass, pod, class, nil, in, env, sl)
		if w := keepThrottle(pr, &byClass, env); w != "" {
			warns = append(warns, w)
		}
	}
	return warns
}

// keepThrottle lowers each BE container's memory.high and v1 soft limit
// in pr to the one its class plans (byClass) where the pod's annotation
// put it higher, and says which it held down.
func keepThrottle(pr, byClass *PodResult, env limits) string {
	var held []string
	for i := range pr.Containers {
		if i >= len(byClass.Containers) {
			break
		}
		own, cls := pr.Containers[i].Settings, byClass.Containers[i].Settings
		low := value(own, FileLow)
		for j := range own {
			f := own[j].File
			if f != FileHigh && f != FileSoftLimit {
				continue
			}
			c, ok := settingOf(cls, f)
			if !ok || own[j].Value <= c.Value {
				continue
			}
			v := c.Value
			if f == FileHigh {
				v = max(v, low) // never below memory.low: c.Value is not either
			}
			why := env.say(c.Reason, fmt.Sprintf("; the pod's %s annotation asked for %s, but a BE pod cannot raise its own throttle",
				AnnotationMemoryQOS, manage.FormatValue(own[j].Value)))
			own[j] = Setting{File: f, Value: v, Reason: why}
			held = append(held, pr.Containers[i].Name+" "+f)
		}
	}
	if len(held) == 0 {
		return ""
	}
	return fmt.Sprintf("annotation %s: a BE pod cannot raise its own throttle; kept at its class's: %s",
		AnnotationMemoryQOS, strings.Join(held, ", "))
}

func settingOf(ss []Setting, file string) (Setting, bool) {
	for _, s := range ss {
		if s.File == file {
			return s, true
		}
	}
	return Setting{}, false
}

// planPod plans one pod of class with its (filtered) annotation pc.
func planPod(pr *PodResult, pod *corev1.Pod, class Class, pc *PodConfig, in Input, env limits, sl *slabs) {
	*pr = PodResult{UID: CgroupUID(pod, in.Node), Namespace: pod.Namespace, Name: pod.Name, KubeQoS: KubeQoS(pod), Class: class}

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
	cfg := in.Strategy.class(class)
	// In a terse plan, why stays empty: it only ever goes into reasons.
	switch {
	case class == SYSTEM:
		enabled, why = false, "SYSTEM class is left to the kernel"
	case !in.Namespaces.allowed(pod.Namespace):
		enabled = false
		if !env.terse {
			why = "namespace " + pod.Namespace + " is not enabled for memory QoS"
		}
	case policy == PolicyNone:
		enabled, why = false, "policy none"
	case cfg.Enable != nil && !*cfg.Enable:
		// The administrator's explicit switch: no policy and no
		// annotation turns the class back on.
		enabled = false
		if !env.terse {
			why = string(class) + " memory QoS is disabled (enable: false)"
		}
	case policy == PolicyAuto:
		knobs, why = auto(class), "auto"
	default:
		overrides := pc != nil && pc.MemoryQOS != (MemoryQOS{})
		if cfg.Enable == nil && !overrides {
			enabled = false
			if !env.terse {
				why = string(class) + " memory QoS is not enabled"
			}
		} else {
			// koordinator's defaults are all zero: enabled without
			// percentages means kernel defaults for min, low and high.
			knobs = cfg.MemoryQOS
			if !env.terse {
				why = string(class) + " class configuration"
			}
		}
	}
	if pc != nil && enabled {
		if pc.MemoryQOS != (MemoryQOS{}) && !env.terse {
			why += " with the pod's overrides"
		}
		knobs = knobs.merge(pc.MemoryQOS)
	}
	if env.terse {
		why = ""
	}
	if !enabled {
		policy = PolicyNone
	}
	pr.Policy = policy
	sl.ctrs = runningContainers(sl.ctrs[:0], pod)
	ctrs := sl.ctrs
	preq, plim := podMemory(pod, ctrs, class)
	pr.Request = preq
	pr.Containers = sl.containersOf(len(ctrs))

	if !enabled {
		restore := func(level Level) []Setting {
			n := 2
			if level == LevelContainer {
				n = 3 + b2i(in.CgroupVersion == 1)
			}
			var r string
			if !env.terse {
				r = why + ": kernel default"
			}
			ss := append(sl.settingsOf(n), Setting{FileMin, 0, r}, Setting{FileLow, 0, r})
			if level == LevelContainer {
				ss = append(ss, Setting{FileHigh, manage.Unlimited, r})
				if in.CgroupVersion == 1 {
					ss = append(ss, Setting{FileSoftLimit, manage.Unlimited, r})
				}
			}
			return ss
		}
		pr.Settings = restore(LevelPod)
		for _, c := range ctrs {
			pr.Containers = append(pr.Containers, ContainerResult{Name: c.Name, ID: containerID(pod, c.Name), Settings: restore(LevelContainer)})
		}
		return
	}

	pct := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	minPct, lowPct, thrPct := pct(knobs.MinLimitPercent), pct(knobs.LowLimitPercent), pct(knobs.ThrottlingPercent)
	nKnobs := knobs.setKnobs()

	// Pod level: min and low from the sum of the requests.
	pp := protection(preq, plim, minPct, lowPct, env, why, "pod")
	pr.Settings = append(sl.settingsOf(2+nKnobs), Setting{FileMin, pp.min, pp.minWhy}, Setting{FileLow, pp.low, pp.lowWhy})
	pr.Settings = knobSettings(pr.Settings, knobs, why, env)

	for _, c := range ctrs {
		cr := ContainerResult{Name: c.Name, ID: containerID(pod, c.Name)}
		req, lim := containerMemory(pod, c, class)
		cp := protection(req, lim, minPct, lowPct, env, why, "container")
		high, highWhy := containerHigh(pod, c, class, req, lim, thrPct, cp.low, policy, why, env)
		cr.Settings = append(sl.settingsOf(3+b2i(in.CgroupVersion == 1)+nKnobs),
			Setting{FileMin, cp.min, cp.minWhy}, Setting{FileLow, cp.low, cp.lowWhy}, Setting{FileHigh, high, highWhy})
		if in.CgroupVersion == 1 {
			// v1 fallback: global reclaim goes to groups over their soft
			// limit first, so BE (soft limit 0) gives memory back before LS.
			var softWhy string
			if class == BE {
				if !env.terse {
					softWhy = why + ": BE gives memory back first under node pressure (cgroup v1 fallback)"
				}
				cr.Settings = append(cr.Settings, Setting{FileSoftLimit, 0, softWhy})
			} else {
				soft := floorPage(cp.req, env.page)
				if !env.terse {
					softWhy = why + ": soft limit at the request, reclaimed after BE (cgroup v1 fallback)"
				}
				if req == 0 {
					soft = manage.Unlimited
					if !env.terse {
						softWhy = why + ": no request, no soft limit (cgroup v1 fallback)"
					}
				}
				cr.Settings = append(cr.Settings, Setting{FileSoftLimit, soft, softWhy})
			}
		}
		cr.Settings = knobSettings(cr.Settings, knobs, why, env)
		pr.Containers = append(pr.Containers, cr)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runningContainers appends to out the containers that run beside each
// other once the pod is up: the app containers, then the restartable init
// containers (sidecars). Run-to-completion init containers are over by then.
func runningContainers(out []*corev1.Container, pod *corev1.Pod) []*corev1.Container {
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			out = append(out, &pod.Spec.InitContainers[i])
		}
	}
	return out
}

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// containerHigh is koordinator's memory.high: request plus throttlingPercent
// of the way to the limit (node allocatable without one, or when the limit
// is above it), page aligned, no lower than memory.low; 0% means max. It is
// then made Go-aware, except for BE: a BE pod is throttled by its class,
// and what it says about itself (env, annotation) cannot lift that.
func containerHigh(pod *corev1.Pod, c *corev1.Container, class Class, req, lim, thr, low int64, policy Policy, why string, env limits) (int64, string) {
	if thr == 0 {
		return manage.Unlimited, env.say(why, ": throttlingPercent 0 means no memory.high")
	}
	if env.oldKernel != "" {
		if env.terse {
			return manage.Unlimited, ""
		}
		return manage.Unlimited, fmt.Sprintf("%s: kernel %s is older than 5.9, where memory.high below the limit can livelock the group (KEP-2570); left at max",
			why, env.oldKernel)
	}
	if policy == PolicyAuto && lim > 0 && req >= lim {
		// KEP-2570 leaves Guaranteed containers alone: a memory.high at the
		// limit only adds throttling where the OOM killer already stands.
		return manage.Unlimited, env.say(why, ": request equals the limit, memory.high would only duplicate memory.max")
	}
	top, topName := env.alloc, "node allocatable"
	if lim > 0 && lim < env.alloc {
		top, topName = lim, "limit"
	} else if lim > 0 && !env.terse {
		topName = fmt.Sprintf("node allocatable, below the limit %d", lim)
	}
	r := min(req, top)
	high := floorPage(r+pctOf(top-r, thr), env.page)
	var highWhy string
	if !env.terse {
		highWhy = fmt.Sprintf("%s: request %d + (%s %d − request) × throttlingPercent %d%%", why, req, topName, top, thr)
	}
	if high < low {
		high, highWhy = low, env.say(highWhy, "; raised to memory.low")
	}
	gml, src, ok := GoMemLimit(pod, c)
	if !ok {
		return high, highWhy
	}
	if class == BE {
		if env.terse {
			return high, ""
		}
		return high, fmt.Sprintf("%s; GOMEMLIMIT %d (%s) does not raise a BE container's memory.high", highWhy, gml, src)
	}
	need := addBytes(gml, nonGoBudget(gml))
	switch {
	case lim > 0 && need >= lim:
		if env.terse {
			return manage.Unlimited, ""
		}
		return manage.Unlimited, fmt.Sprintf("%s; GOMEMLIMIT %d (%s) + non-Go budget %d reaches the limit %d, so memory.high is left at max and the runtime's own limit governs",
			highWhy, gml, src, nonGoBudget(gml), lim)
	case high < need:
		need = min((need+env.page-1)/env.page*env.page, floorPage(top, env.page))
		if need <= high {
			return high, highWhy
		}
		if env.terse {
			return need, ""
		}
		return need, fmt.Sprintf("%s; raised to GOMEMLIMIT %d (%s) + non-Go budget %d (at most %s %d) so the Go heap is not throttled below the limit its runtime was given",
			highWhy, gml, src, nonGoBudget(gml), topName, top)
	}
	return high, highWhy
}

// say is a reason, a+b, or nothing in a terse plan.
func (e limits) say(a, b string) string {
	if e.terse {
		return ""
	}
	return a + b
}

// nonGoBudget is the memory a Go container uses outside the runtime's
// accounting (page cache, cgo, kernel memory charged to it): 1/16 of
// GOMEMLIMIT, at least 8 MiB.
func nonGoBudget(gml int64) int64 { return max(gml/16, 8<<20) }

// knobSettings appends the Alibaba Cloud Linux extensions that were set
// explicitly to ss.
func knobSettings(ss []Setting, k MemoryQOS, why string, env limits) []Setting {
	var r string
	for _, f := range [...]struct {
		file string
		v    *int64
	}{
		{FileWmarkRatio, k.WmarkRatio}, {FileWmarkScale, k.WmarkScalePermill}, {FileWmarkMin, k.WmarkMinAdj},
		{FilePrioOOM, k.PriorityEnable}, {FilePriority, k.Priority}, {FileOOMGroup, k.OomKillGroup},
	} {
		if f.v != nil {
			if r == "" && !env.terse {
				r = why + ": set explicitly"
			}
			ss = append(ss, Setting{f.file, *f.v, r})
		}
	}
	return ss
}

// setKnobs counts the knobs knobSettings writes.
func (k MemoryQOS) setKnobs() int {
	n := 0
	for _, v := range [...]*int64{k.WmarkRatio, k.WmarkScalePermill, k.WmarkMinAdj, k.PriorityEnable, k.Priority, k.OomKillGroup} {
		if v != nil {
			n++
		}
	}
	return n
}

// containerID is the runtime's ID of a container or sidecar, from the
// pod's status.
func containerID(pod *corev1.Pod, name string) string {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, st := range list {
			if st.Name == name {
				return st.ContainerID
			}
		}
	}
	return ""
}

// prot is memory.min and memory.low for a pod or a container, with the
// request they were computed from (at most the limit and allocatable).
type prot struct {
	req, min, low  int64
	minWhy, lowWhy string
}

// protection is memory.min and memory.low for a pod or a container (who)
// with request req and limit lim: koordinator's percentages of the
// request, page-aligned; the request counted at most up to the limit and
// node allocatable; min kept at 9/10 of the limit so the kernel can still
// reclaim at the limit; low at least min.
func protection(req, lim, minPct, lowPct int64, env limits, why, who string) prot {
	r, above := req, ""
	if r > env.alloc {
		r, above = env.alloc, "node allocatable"
	}
	if lim > 0 && r > lim {
		r, above = lim, "the limit"
	}
	p := prot{req: r}
	p.min, p.low = floorPage(pctOf(r, minPct), env.page), floorPage(pctOf(r, lowPct), env.page)
	guarded := false
	if guard := floorPage(mulDiv(lim, minGuardNum, minGuardDen), env.page); lim > 0 && p.min > guard {
		p.min, guarded = guard, true
	}
	raised := p.low < p.min
	if raised {
		p.low = p.min
	}
	if env.terse {
		return p
	}
	note := ""
	if above != "" {
		note = fmt.Sprintf(" (above %s %d: counted as that)", above, r)
	}
	p.minWhy = fmt.Sprintf("%s: request %d%s × minLimitPercent %d%%", why, req, note, minPct)
	if guarded {
		p.minWhy += "; kept at 9/10 of the limit so the " + who + " can still reclaim at its limit"
	}
	p.lowWhy = fmt.Sprintf("%s: request %d%s × lowLimitPercent %d%%", why, req, note, lowPct)
	if raised {
		p.lowWhy += "; raised to memory.min"
	}
	return p
}

// Values turns the settings of one cgroup directory at one level into the
// writes manage.Writer applies.
func Values(dir string, level Level, ss []Setting) []manage.Value {
	return AppendValues(make([]manage.Value, 0, len(ss)), dir, level, ss)
}

// AppendValues is Values appended to dst.
func AppendValues(dst []manage.Value, dir string, level Level, ss []Setting) []manage.Value {
	for _, s := range ss {
		dst = append(dst, manage.Value{Dir: dir, File: s.File, Value: s.Value, Level: int(level), Reason: s.Reason})
	}
	return dst
}

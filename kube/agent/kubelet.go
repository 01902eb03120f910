package agent

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/kube/memqos"
)

// KubeletQoS is what the agent knows of the kubelet's own Memory QoS
// (KEP-2570) on cgroup v2, and which of the files the agent writes the
// kubelet writes too. Each file at each level has one writer: the agent
// never writes one the kubelet owns (Owned), and says so.
//
// What the kubelet writes, from its source (v1.37.2, pkg/kubelet/cm and
// kuberuntime; cgroupfs names, the systemd driver's slices alike):
//
//   - MemoryQoS gate: Beta and on by default from v1.37, Alpha and off
//     before.
//   - TieredReservation: kubepods memory.min = the Guaranteed and Burstable
//     requests and memory.low = the Burstable ones, burstable memory.low =
//     the Burstable requests, every minute and before each new pod cgroup;
//     each pod's memory.min (Guaranteed) or memory.low (Burstable) = its
//     request when its cgroup is made and on resize; each container's
//     likewise when it is made and on resize.
//   - None (the default) with the gate on: containers get memory.min 0 and
//     memory.low 0 when made and on resize; kubepods memory.min/low and
//     burstable memory.low are set to 0 once, when the kubelet starts. The
//     agent owns those two levels and the pods' (it rewrites them on its
//     next pass after a kubelet restart).
//   - memoryThrottlingFactor (0.9 by default before v1.37, unset from
//     v1.37): container memory.high when made and on resize; with the gate
//     off, v1.37 writes memory.high max on each container it makes or
//     resizes.
//   - Before v1.37 with the gate on, the minute loop rewrites kubepods and
//     the QoS classes whatever the policy; before v1.36 (no policy) pods
//     get memory.min.
type KubeletQoS struct {
	Active bool    // the kubelet owns at least one file the agent writes
	Reason string  // what the kubelet does and how that was found
	Owned  []Owned // the files, per level, that are the kubelet's
}

// Owned is one file at one level of the kubelet's tree that the kubelet
// writes, so the agent leaves it alone.
type Owned struct {
	Level memqos.Level
	File  string
	Why   string
}

// Owns says whether the kubelet writes file at level, and why.
func (k KubeletQoS) Owns(level memqos.Level, file string) (string, bool) {
	for _, o := range k.Owned {
		if o.Level == level && o.File == file {
			return o.Why, true
		}
	}
	return "", false
}

// Deferred lists what the agent leaves to the kubelet, one line per level
// ("container memory.min, memory.low: why"), for logs, /healthz and plans.
func (k KubeletQoS) Deferred() []string {
	type key struct {
		level memqos.Level
		why   string
	}
	files := map[key][]string{}
	var keys []key
	for _, o := range k.Owned {
		kk := key{o.Level, o.Why}
		if _, ok := files[kk]; !ok {
			keys = append(keys, kk)
		}
		files[kk] = append(files[kk], o.File)
	}
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].level < keys[j].level })
	out := make([]string, 0, len(keys))
	for _, kk := range keys {
		out = append(out, fmt.Sprintf("%s %s: %s", LevelName(kk.level), strings.Join(files[kk], ", "), kk.why))
	}
	return out
}

// LevelName names a level as the logs and metrics do.
func LevelName(l memqos.Level) string {
	switch l {
	case memqos.LevelKubepods:
		return "kubepods"
	case memqos.LevelQoS:
		return "qos"
	case memqos.LevelPod:
		return "pod"
	case memqos.LevelContainer:
		return "container"
	}
	return strconv.Itoa(int(l))
}

// The kubelet's memoryReservationPolicy values, and the agent's
// --kubelet-memory-qos modes.
const (
	PolicyNone   = "None"
	PolicyTiered = "TieredReservation"

	KubeletAuto   = "auto"   // from --kubelet-config, else the kubelet's version
	KubeletOff    = "off"    // the MemoryQoS gate is off
	KubeletNone   = "none"   // gate on, memoryReservationPolicy None
	KubeletTiered = "tiered" // gate on, memoryReservationPolicy TieredReservation
)

// kubeletSettings are the inputs that decide what the kubelet writes.
type kubeletSettings struct {
	minor  int // the kubelet's minor version; 0 unknown (taken as the newest known)
	gate   bool
	policy string
	factor *float64
}

const newestKnownMinor = 37

// own computes what the kubelet writes from its settings.
func (s kubeletSettings) own(source string) KubeletQoS {
	minor := s.minor
	if minor == 0 {
		minor = newestKnownMinor
	}
	k := KubeletQoS{}
	add := func(level memqos.Level, why string, files ...string) {
		for _, f := range files {
			k.Owned = append(k.Owned, Owned{Level: level, File: f, Why: why})
		}
	}
	tiered := s.gate && s.policy == PolicyTiered
	var does []string
	switch {
	case tiered:
		why := "the kubelet's TieredReservation sets them from the pods' requests every minute and as pods start"
		add(memqos.LevelKubepods, why, memqos.FileMin, memqos.FileLow)
		add(memqos.LevelQoS, why, memqos.FileMin, memqos.FileLow)
		add(memqos.LevelPod, "the kubelet's TieredReservation sets the pod's request (memory.min if Guaranteed, memory.low if Burstable) when it makes the pod cgroup and on resize", memqos.FileMin, memqos.FileLow)
		does = append(does, "memory.min/memory.low at kubepods, QoS class and pod level (memoryReservationPolicy TieredReservation)")
	case s.gate && minor < 37:
		why := fmt.Sprintf("the kubelet's MemoryQoS (v1.%d) rewrites them every minute", minor)
		add(memqos.LevelKubepods, why, memqos.FileMin, memqos.FileLow)
		add(memqos.LevelQoS, why, memqos.FileMin, memqos.FileLow)
		does = append(does, "memory.min/memory.low at kubepods and QoS class level every minute")
		if minor < 36 {
			add(memqos.LevelPod, fmt.Sprintf("the kubelet's MemoryQoS (v1.%d) sets memory.min to the pod's request", minor), memqos.FileMin, memqos.FileLow)
		}
	}
	if s.gate {
		if tiered {
			add(memqos.LevelContainer, "the kubelet's TieredReservation sets the container's request when it makes or resizes the container", memqos.FileMin, memqos.FileLow)
		} else {
			add(memqos.LevelContainer, "the kubelet's MemoryQoS writes 0 when it makes or resizes a container (memoryReservationPolicy None)", memqos.FileMin, memqos.FileLow)
			does = append(does, "memory.min/memory.low 0 on containers (memoryReservationPolicy None)")
		}
	}
	switch f := s.factor; {
	case s.gate && f != nil && *f > 0:
		add(memqos.LevelContainer, fmt.Sprintf("the kubelet's memoryThrottlingFactor %v sets it when it makes or resizes a container", *f), memqos.FileHigh)
		does = append(does, fmt.Sprintf("memory.high (memoryThrottlingFactor %v)", *f))
	case s.gate && f == nil && minor < 37:
		add(memqos.LevelContainer, "the kubelet's memoryThrottlingFactor (0.9 by default before v1.37) sets it when it makes or resizes a container", memqos.FileHigh)
		does = append(does, "memory.high (memoryThrottlingFactor defaults to 0.9 before v1.37)")
	case !s.gate && minor >= 37:
		add(memqos.LevelContainer, "with MemoryQoS off the kubelet writes max when it makes or resizes a container (v1.37+)", memqos.FileHigh)
		does = append(does, "memory.high max on containers (MemoryQoS off, v1.37+)")
	}
	k.Active = len(k.Owned) > 0
	var state string
	switch {
	case !s.gate:
		state = "the kubelet's MemoryQoS feature gate is off"
	case tiered:
		state = "the kubelet's MemoryQoS is on with memoryReservationPolicy TieredReservation"
	default:
		state = "the kubelet's MemoryQoS is on with memoryReservationPolicy None"
		if minor >= 37 {
			state += " (kubepods and burstable memory.min/low are reset to 0 only when the kubelet starts: the agent's)"
		}
	}
	if len(does) == 0 {
		k.Reason = fmt.Sprintf("%s: %s, writing none of the agent's files", source, state)
	} else {
		k.Reason = fmt.Sprintf("%s: %s; it writes %s", source, state, strings.Join(does, " and "))
	}
	return k
}

// kubeletConfig is the part of a KubeletConfiguration file the agent reads.
type kubeletConfig struct {
	Kind                    string          `json:"kind"`
	FeatureGates            map[string]bool `json:"featureGates"`
	MemoryReservationPolicy string          `json:"memoryReservationPolicy"`
	MemoryThrottlingFactor  *float64        `json:"memoryThrottlingFactor"`
}

// ParseKubeletConfig reads a KubeletConfiguration (YAML or JSON, as the
// kubelet's --config file holds it) for its Memory QoS settings.
// kubeletVersion ("v1.36.2", the node's status.nodeInfo.kubeletVersion;
// empty if unknown: taken as the newest this agent knows) decides the
// defaults: the MemoryQoS gate is on by default from v1.37, and
// memoryThrottlingFactor defaults to 0.9 before v1.37 and to none after.
// file names the source in errors and reasons.
func ParseKubeletConfig(file string, data []byte, kubeletVersion string) (KubeletQoS, error) {
	var c kubeletConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		return KubeletQoS{}, fmt.Errorf("%s: %w", file, err)
	}
	if c.Kind != "" && c.Kind != "KubeletConfiguration" {
		return KubeletQoS{}, fmt.Errorf("%s: kind %q, want KubeletConfiguration", file, c.Kind)
	}
	if f := c.MemoryThrottlingFactor; f != nil && !(*f >= 0 && *f <= 1) {
		return KubeletQoS{}, fmt.Errorf("%s: memoryThrottlingFactor %v: want 0 to 1", file, *f)
	}
	switch c.MemoryReservationPolicy {
	case "", PolicyNone, PolicyTiered:
	default:
		return KubeletQoS{}, fmt.Errorf("%s: memoryReservationPolicy %q: want %s or %s", file, c.MemoryReservationPolicy, PolicyNone, PolicyTiered)
	}
	s := kubeletSettings{minor: minorOf(kubeletVersion), policy: c.MemoryReservationPolicy, factor: c.MemoryThrottlingFactor}
	gate, set := c.FeatureGates["MemoryQoS"]
	if !set {
		gate = s.minor == 0 || s.minor >= 37
	}
	s.gate = gate
	return s.own(file), nil
}

// KubeletMode is what the agent takes the kubelet to do when no config
// file says: mode is KubeletAuto (the defaults of kubeletVersion; empty
// version: the newest known), or KubeletOff, KubeletNone or KubeletTiered
// as an administrator states it (--kubelet-memory-qos).
func KubeletMode(mode, kubeletVersion string) (KubeletQoS, error) {
	s := kubeletSettings{minor: minorOf(kubeletVersion)}
	var source string
	switch mode {
	case KubeletAuto, "":
		s.gate = s.minor == 0 || s.minor >= 37
		source = "the kubelet's defaults"
		if kubeletVersion != "" {
			source += " for " + kubeletVersion
		}
	case KubeletOff:
		source = "--kubelet-memory-qos=off"
	case KubeletNone:
		s.gate, s.policy, source = true, PolicyNone, "--kubelet-memory-qos=none"
	case KubeletTiered:
		s.gate, s.policy, source = true, PolicyTiered, "--kubelet-memory-qos=tiered"
	default:
		return KubeletQoS{}, fmt.Errorf("--kubelet-memory-qos %q: want auto, off, none or tiered", mode)
	}
	return s.own(source), nil
}

// tieredSeen is what the agent takes the kubelet to do once it has seen
// TieredReservation's values in a cgroup (cgroupFiles.kubeletWrote).
func tieredSeen(seen string, minor int) KubeletQoS {
	return kubeletSettings{minor: minor, gate: true, policy: PolicyTiered}.own(seen)
}

// minorOf reads the minor version of "v1.MINOR.PATCH..."; 0 when it cannot.
func minorOf(version string) int {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(version, "v"), "1.")
	if !ok {
		return 0
	}
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return 0
	}
	return n
}

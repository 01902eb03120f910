package agent

import (
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// KubeletQoS is what the agent knows of the kubelet's own Memory QoS
// (KEP-2570). From v1.36 a kubelet with the MemoryQoS feature gate sets
// memory.high on containers (memoryThrottlingFactor; 0.9 by default
// before v1.37, unset from v1.37 on), and with memoryReservationPolicy:
// TieredReservation it sets memory.min on Guaranteed pods and memory.low on
// Burstable ones. The agent writes the same files, so where the kubelet
// does this the agent stands aside (or takes over when told to).
type KubeletQoS struct {
	Active bool   // the kubelet writes memory.min, memory.low or memory.high
	Reason string // what the kubelet does and how that was found
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
// empty if unknown) decides the defaults: the MemoryQoS gate is on by
// default from v1.37, and memoryThrottlingFactor defaults to 0.9 before
// v1.37 and to none after. file names the source in errors and reasons.
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
	beta := minorAtLeast(kubeletVersion, 37)
	gate, set := c.FeatureGates["MemoryQoS"]
	if !set {
		gate = beta
	}
	if !gate {
		return KubeletQoS{Reason: fmt.Sprintf("%s: the kubelet's MemoryQoS feature gate is off", file)}, nil
	}
	var does []string
	if c.MemoryReservationPolicy == "TieredReservation" {
		does = append(does, "memory.min/memory.low (memoryReservationPolicy TieredReservation)")
	}
	switch f := c.MemoryThrottlingFactor; {
	case f != nil && *f > 0:
		does = append(does, fmt.Sprintf("memory.high (memoryThrottlingFactor %v)", *f))
	case f == nil && !beta:
		does = append(does, "memory.high (memoryThrottlingFactor defaults to 0.9 before v1.37)")
	}
	if len(does) == 0 {
		return KubeletQoS{Reason: fmt.Sprintf("%s: MemoryQoS gate on, but neither reservation nor throttling configured", file)}, nil
	}
	return KubeletQoS{Active: true, Reason: fmt.Sprintf("%s: the kubelet's MemoryQoS writes %s", file, strings.Join(does, " and "))}, nil
}

// minorAtLeast reports whether a Kubernetes version "v1.MINOR.PATCH..." is
// 1.minor or later; an unreadable version is not.
func minorAtLeast(version string, minor int) bool {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(version, "v"), "1.")
	if !ok {
		return false
	}
	if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.Atoi(rest)
	return err == nil && n >= minor
}

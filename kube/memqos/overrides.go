package memqos

import (
	"fmt"
	"slices"
	"strings"
)

// PodOverrides is the administrator's switch for what a pod's own
// koordinator.sh/memoryQOS annotation may change. Any user who can create
// a pod writes that annotation, so whatever it may set is granted to every
// tenant: hard protection (memory.min) cannot be taken back when the node
// itself runs out, and the Alibaba Cloud Linux knobs and memory.oom.group
// change how the kernel treats the group. A pod may always opt out
// (policy none): that only gives protection up.
type PodOverrides struct {
	Policy            bool // policy auto
	MinLimitPercent   bool
	LowLimitPercent   bool
	ThrottlingPercent bool
	// KernelKnobs are wmarkRatio, wmarkScalePermill, wmarkMinAdj,
	// priorityEnable, priority and oomKillGroup.
	KernelKnobs bool
}

// DefaultPodOverrides is what pods may set unless the administrator says
// otherwise: the auto policy, memory.low and memory.high (soft protection
// and a throttle a pod sets for itself), no memory.min and no
// kernel-specific knob.
const DefaultPodOverrides = "policy,lowLimitPercent,throttlingPercent"

// podOverrideNames are the names ParsePodOverrides takes, in order.
var podOverrideNames = []string{"policy", "minLimitPercent", "lowLimitPercent", "throttlingPercent", "kernelKnobs"}

func (o *PodOverrides) field(name string) *bool {
	switch name {
	case "policy":
		return &o.Policy
	case "minLimitPercent":
		return &o.MinLimitPercent
	case "lowLimitPercent":
		return &o.LowLimitPercent
	case "throttlingPercent":
		return &o.ThrottlingPercent
	case "kernelKnobs":
		return &o.KernelKnobs
	}
	return nil
}

// ParsePodOverrides reads a comma-separated list of what pods may override
// (policy, minLimitPercent, lowLimitPercent, throttlingPercent,
// kernelKnobs), or "none", or "all".
func ParsePodOverrides(s string) (PodOverrides, error) {
	var o PodOverrides
	switch strings.TrimSpace(s) {
	case "none", "":
		return o, nil
	case "all":
		return PodOverrides{true, true, true, true, true}, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		p := o.field(f)
		if p == nil {
			return PodOverrides{}, fmt.Errorf("pod overrides %q: unknown field %q (want none, all, or some of %s)", s, f, strings.Join(podOverrideNames, ", "))
		}
		*p = true
	}
	return o, nil
}

// String is the list ParsePodOverrides reads back.
func (o PodOverrides) String() string {
	var on []string
	for _, n := range podOverrideNames {
		if *o.field(n) {
			on = append(on, n)
		}
	}
	switch len(on) {
	case 0:
		return "none"
	case len(podOverrideNames):
		return "all"
	}
	return strings.Join(on, ",")
}

func defaultPodOverrides() PodOverrides { return parsedDefaultPodOverrides }

// parsedDefaultPodOverrides is DefaultPodOverrides, parsed once rather
// than for every pod of every pass.
var parsedDefaultPodOverrides = func() PodOverrides {
	o, err := ParsePodOverrides(DefaultPodOverrides)
	if err != nil {
		panic(err) // a constant
	}
	return o
}()

// filter returns the part of a pod's annotation the administrator allows,
// without any field a node strategy fixed (fixed: that strategy's own block
// for the pod's class), and a warning naming each field left out.
func (o PodOverrides) filter(pc *PodConfig, fixed *MemoryQOSCfg) (*PodConfig, []string) {
	if pc == nil {
		return nil, nil
	}
	out := *pc
	var dropped, pinned []string
	if out.Policy == PolicyAuto && !o.Policy {
		out.Policy = ""
		dropped = append(dropped, "policy auto")
	}
	knobs := []struct {
		name    string
		allowed bool
		v       **int64
		node    *int64
	}{
		{"minLimitPercent", o.MinLimitPercent, &out.MinLimitPercent, fixed.MinLimitPercent},
		{"lowLimitPercent", o.LowLimitPercent, &out.LowLimitPercent, fixed.LowLimitPercent},
		{"throttlingPercent", o.ThrottlingPercent, &out.ThrottlingPercent, fixed.ThrottlingPercent},
		{"wmarkRatio", o.KernelKnobs, &out.WmarkRatio, fixed.WmarkRatio},
		{"wmarkScalePermill", o.KernelKnobs, &out.WmarkScalePermill, fixed.WmarkScalePermill},
		{"wmarkMinAdj", o.KernelKnobs, &out.WmarkMinAdj, fixed.WmarkMinAdj},
		{"priorityEnable", o.KernelKnobs, &out.PriorityEnable, fixed.PriorityEnable},
		{"priority", o.KernelKnobs, &out.Priority, fixed.Priority},
		{"oomKillGroup", o.KernelKnobs, &out.OomKillGroup, fixed.OomKillGroup},
	}
	for _, k := range knobs {
		switch {
		case *k.v == nil:
		case !k.allowed:
			*k.v = nil
			dropped = append(dropped, k.name)
		case k.node != nil:
			*k.v = nil
			pinned = append(pinned, k.name)
		}
	}
	var warns []string
	if len(dropped) > 0 {
		warns = append(warns, fmt.Sprintf("annotation %s: %s not allowed from pods (pod overrides: %s); ignored",
			AnnotationMemoryQOS, strings.Join(dropped, ", "), o))
	}
	if len(pinned) > 0 {
		warns = append(warns, fmt.Sprintf("annotation %s: %s set by the node strategy, which pods cannot override; ignored",
			AnnotationMemoryQOS, strings.Join(pinned, ", ")))
	}
	return &out, slices.Clip(warns)
}

// Package memqos turns pods and a koordinator-compatible QoS configuration
// into memory cgroup values (memory.min, memory.low, memory.high, and on
// cgroup v1 memory.soft_limit_in_bytes) for each level the kubelet creates:
// kubepods, the QoS-class cgroups, pods and containers. It is pure: no
// files, no clocks, no API server; package agent does the I/O.
package memqos

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ConfigKey is the key of the koordinator ConfigMap that holds the
// resource QoS configuration, and NamespacesKey the one with the memory-QoS
// namespace allow and deny lists.
const (
	ConfigKey     = "resource-qos-config"
	NamespacesKey = "memory-qos"
)

// MemoryQOS holds the per-class knobs, as koordinator names them. A nil
// field is "not set": defaults or a wider scope fill it in.
type MemoryQOS struct {
	MinLimitPercent   *int64 `json:"minLimitPercent,omitempty"`
	LowLimitPercent   *int64 `json:"lowLimitPercent,omitempty"`
	ThrottlingPercent *int64 `json:"throttlingPercent,omitempty"`
	// The rest are Alibaba Cloud Linux memcg extensions. They are written
	// only when set explicitly: upstream kernels lack the wmark and
	// priority files, and memory.oom.group is the kubelet's to set.
	WmarkRatio        *int64 `json:"wmarkRatio,omitempty"`
	WmarkScalePermill *int64 `json:"wmarkScalePermill,omitempty"`
	WmarkMinAdj       *int64 `json:"wmarkMinAdj,omitempty"`
	PriorityEnable    *int64 `json:"priorityEnable,omitempty"`
	Priority          *int64 `json:"priority,omitempty"`
	OomKillGroup      *int64 `json:"oomKillGroup,omitempty"`
}

// MemoryQOSCfg is a class's memoryQOS block: the enable switch and knobs.
type MemoryQOSCfg struct {
	Enable *bool `json:"enable,omitempty"`
	MemoryQOS
}

// ResourceQOS is one class's entry; only memoryQOS is read.
type ResourceQOS struct {
	MemoryQOS *MemoryQOSCfg `json:"memoryQOS,omitempty"`
}

// Strategy is the per-class configuration (koordinator ResourceQOSStrategy).
type Strategy struct {
	LSRClass *ResourceQOS `json:"lsrClass,omitempty"`
	LSClass  *ResourceQOS `json:"lsClass,omitempty"`
	BEClass  *ResourceQOS `json:"beClass,omitempty"`
}

// NodeStrategy overrides the cluster strategy on nodes its selector matches.
type NodeStrategy struct {
	Name         string                `json:"name,omitempty"`
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	Strategy
}

// Config is the content of the resource-qos-config key.
type Config struct {
	ClusterStrategy *Strategy      `json:"clusterStrategy,omitempty"`
	NodeStrategies  []NodeStrategy `json:"nodeStrategies,omitempty"`
}

// Namespaces is the memory-qos key: where memory QoS may act. An empty
// Enabled list means every namespace not in Disabled.
type Namespaces struct {
	Enabled  []string `json:"enabledNamespaces,omitempty"`
	Disabled []string `json:"disabledNamespaces,omitempty"`
}

// ParseConfig decodes and checks resource-qos-config. Unknown fields (the
// cpuQOS, resctrlQOS, ... blocks koordinator also keeps there) are ignored;
// out-of-range percentages are errors naming the field.
func ParseConfig(data []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigKey, err)
	}
	var errs []error
	if c.ClusterStrategy != nil {
		errs = append(errs, c.ClusterStrategy.check("clusterStrategy"))
	}
	for i := range c.NodeStrategies {
		ns := &c.NodeStrategies[i]
		where := fmt.Sprintf("nodeStrategies[%d]", i)
		if ns.NodeSelector == nil {
			errs = append(errs, fmt.Errorf("%s.nodeSelector: missing", where))
		} else if _, err := metav1.LabelSelectorAsSelector(ns.NodeSelector); err != nil {
			errs = append(errs, fmt.Errorf("%s.nodeSelector: %w", where, err))
		}
		errs = append(errs, ns.Strategy.check(where))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", ConfigKey, err)
	}
	return &c, nil
}

// ParseNamespaces decodes and checks the memory-qos key. An entry that is
// not a namespace name (a typo, "kube system") is an error naming it: it
// would never match, and an allow list that matches nothing turns memory
// QoS off everywhere.
func ParseNamespaces(data []byte) (Namespaces, error) {
	var n Namespaces
	if err := json.Unmarshal(data, &n); err != nil {
		return Namespaces{}, fmt.Errorf("%s: %w", NamespacesKey, err)
	}
	var errs []error
	for _, l := range []struct {
		name string
		list []string
	}{{"enabledNamespaces", n.Enabled}, {"disabledNamespaces", n.Disabled}} {
		for i, ns := range l.list {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s[%d]: %q is not a namespace name: %s", l.name, i, ns, strings.Join(msgs, "; ")))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Namespaces{}, fmt.Errorf("%s: %w", NamespacesKey, err)
	}
	return n, nil
}

func (s *Strategy) check(where string) error {
	var errs []error
	for _, c := range []struct {
		name string
		r    *ResourceQOS
	}{{"lsrClass", s.LSRClass}, {"lsClass", s.LSClass}, {"beClass", s.BEClass}} {
		if c.r == nil || c.r.MemoryQOS == nil {
			continue
		}
		errs = append(errs, c.r.MemoryQOS.MemoryQOS.check(where+"."+c.name+".memoryQOS"))
	}
	return errors.Join(errs...)
}

func (m *MemoryQOS) check(where string) error {
	var errs []error
	pct := func(name string, v *int64) {
		if v != nil && (*v < 0 || *v > 100) {
			errs = append(errs, fmt.Errorf("%s.%s: %d is not a percentage (0-100)", where, name, *v))
		}
	}
	pct("minLimitPercent", m.MinLimitPercent)
	pct("lowLimitPercent", m.LowLimitPercent)
	pct("throttlingPercent", m.ThrottlingPercent)
	pct("wmarkRatio", m.WmarkRatio)
	if v := m.WmarkScalePermill; v != nil && (*v < 1 || *v > 1000) {
		errs = append(errs, fmt.Errorf("%s.wmarkScalePermill: %d is outside 1-1000", where, *v))
	}
	if v := m.WmarkMinAdj; v != nil && (*v < -25 || *v > 50) {
		errs = append(errs, fmt.Errorf("%s.wmarkMinAdj: %d is outside -25..50", where, *v))
	}
	if v := m.Priority; v != nil && (*v < 0 || *v > 12) {
		errs = append(errs, fmt.Errorf("%s.priority: %d is outside 0-12", where, *v))
	}
	for _, b := range []struct {
		name string
		v    *int64
	}{{"priorityEnable", m.PriorityEnable}, {"oomKillGroup", m.OomKillGroup}} {
		if b.v != nil && *b.v != 0 && *b.v != 1 {
			errs = append(errs, fmt.Errorf("%s.%s: %d is not 0 or 1", where, b.name, *b.v))
		}
	}
	return errors.Join(errs...)
}

// ForNode resolves the strategy for a node: the cluster strategy, with the
// first node strategy whose selector matches the node's labels laid over
// it field by field (koordinator's order). The second result names the
// node strategy used, or is empty.
func (c *Config) ForNode(nodeLabels map[string]string) (Strategy, string) {
	var s Strategy
	if c == nil {
		return s, ""
	}
	if c.ClusterStrategy != nil {
		s = c.ClusterStrategy.clone()
	}
	for i, ns := range c.NodeStrategies {
		sel, err := metav1.LabelSelectorAsSelector(ns.NodeSelector)
		if err != nil || ns.NodeSelector == nil || !sel.Matches(labels.Set(nodeLabels)) {
			continue // ParseConfig has reported bad selectors
		}
		s.LSRClass = mergeClass(s.LSRClass, ns.LSRClass)
		s.LSClass = mergeClass(s.LSClass, ns.LSClass)
		s.BEClass = mergeClass(s.BEClass, ns.BEClass)
		name := ns.Name
		if name == "" {
			name = fmt.Sprintf("nodeStrategies[%d]", i)
		}
		return s, name
	}
	return s, ""
}

// NodeStrategy returns the own blocks of the first node strategy whose
// selector matches the node's labels, and its name: what the administrator
// fixed for this node, which pods' annotations cannot override. Empty when
// none matches.
func (c *Config) NodeStrategy(nodeLabels map[string]string) (Strategy, string) {
	if c == nil {
		return Strategy{}, ""
	}
	for i, ns := range c.NodeStrategies {
		sel, err := metav1.LabelSelectorAsSelector(ns.NodeSelector)
		if err != nil || ns.NodeSelector == nil || !sel.Matches(labels.Set(nodeLabels)) {
			continue
		}
		name := ns.Name
		if name == "" {
			name = fmt.Sprintf("nodeStrategies[%d]", i)
		}
		return ns.Strategy.clone(), name
	}
	return Strategy{}, ""
}

func (s Strategy) clone() Strategy {
	return Strategy{LSRClass: mergeClass(nil, s.LSRClass), LSClass: mergeClass(nil, s.LSClass), BEClass: mergeClass(nil, s.BEClass)}
}

func mergeClass(base, over *ResourceQOS) *ResourceQOS {
	out := &ResourceQOS{MemoryQOS: &MemoryQOSCfg{}}
	for _, r := range []*ResourceQOS{base, over} {
		if r == nil || r.MemoryQOS == nil {
			continue
		}
		if r.MemoryQOS.Enable != nil {
			v := *r.MemoryQOS.Enable
			out.MemoryQOS.Enable = &v
		}
		out.MemoryQOS.MemoryQOS = out.MemoryQOS.MemoryQOS.merge(r.MemoryQOS.MemoryQOS)
	}
	return out
}

// merge returns m with every field set in o replacing m's.
func (m MemoryQOS) merge(o MemoryQOS) MemoryQOS {
	pick := func(a, b *int64) *int64 {
		if b != nil {
			v := *b
			return &v
		}
		if a != nil {
			v := *a
			return &v
		}
		return nil
	}
	return MemoryQOS{
		MinLimitPercent:   pick(m.MinLimitPercent, o.MinLimitPercent),
		LowLimitPercent:   pick(m.LowLimitPercent, o.LowLimitPercent),
		ThrottlingPercent: pick(m.ThrottlingPercent, o.ThrottlingPercent),
		WmarkRatio:        pick(m.WmarkRatio, o.WmarkRatio),
		WmarkScalePermill: pick(m.WmarkScalePermill, o.WmarkScalePermill),
		WmarkMinAdj:       pick(m.WmarkMinAdj, o.WmarkMinAdj),
		PriorityEnable:    pick(m.PriorityEnable, o.PriorityEnable),
		Priority:          pick(m.Priority, o.Priority),
		OomKillGroup:      pick(m.OomKillGroup, o.OomKillGroup),
	}
}

// class returns the memoryQOS block for a koordinator class (LSE shares
// LSR's, as in koordinator), never nil.
func (s Strategy) class(c Class) *MemoryQOSCfg {
	var r *ResourceQOS
	switch c {
	case LSE, LSR:
		r = s.LSRClass
	case LS:
		r = s.LSClass
	case BE:
		r = s.BEClass
	}
	if r == nil || r.MemoryQOS == nil {
		return &MemoryQOSCfg{}
	}
	return r.MemoryQOS
}

// allowed reports whether memory QoS may act in namespace ns.
func (n Namespaces) allowed(ns string) bool {
	for _, d := range n.Disabled {
		if d == ns {
			return false
		}
	}
	if len(n.Enabled) == 0 {
		return true
	}
	for _, e := range n.Enabled {
		if e == ns {
			return true
		}
	}
	return false
}

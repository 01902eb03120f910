package memqos

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/internal/qty"
)

// checkRule checks the rule every plan keeps, whatever the pods ask:
// every memory.min/low/high is in [0, node allocatable] (high and the v1
// soft limit may be max), memory.min ≤ memory.low ≤ memory.high ≤ the
// container's limit at each level, and the node's memory.min stays within
// its protected share of allocatable.
func checkRule(in Input, res Result) error {
	alloc := in.NodeAllocatable
	ratio := in.MaxProtectedRatio
	if ratio <= 0 {
		ratio = 0.8
	}
	level := func(where string, ss []Setting, lim int64) error {
		vals := map[string]int64{}
		for _, s := range ss {
			switch s.File {
			case FileMin, FileLow, FileHigh, FileSoftLimit:
			default:
				continue
			}
			if _, dup := vals[s.File]; dup {
				return fmt.Errorf("%s: %s planned twice", where, s.File)
			}
			vals[s.File] = s.Value
			unlimitedOK := s.File == FileHigh || s.File == FileSoftLimit
			if s.Value == manage.Unlimited && unlimitedOK {
				continue
			}
			if s.Value < 0 || s.Value > alloc {
				return fmt.Errorf("%s: %s = %d outside [0, allocatable %d] (%s)", where, s.File, s.Value, alloc, s.Reason)
			}
			if lim > 0 && s.Value > lim {
				return fmt.Errorf("%s: %s = %d above the limit %d (%s)", where, s.File, s.Value, lim, s.Reason)
			}
		}
		mn, lo := vals[FileMin], vals[FileLow]
		if mn > lo {
			return fmt.Errorf("%s: memory.min %d > memory.low %d", where, mn, lo)
		}
		if hi, ok := vals[FileHigh]; ok && hi < lo {
			return fmt.Errorf("%s: memory.high %d < memory.low %d", where, hi, lo)
		}
		return nil
	}
	if err := level("kubepods", res.Kubepods, 0); err != nil {
		return err
	}
	for q, ss := range res.QoS {
		if err := level(string(q), ss, 0); err != nil {
			return err
		}
	}
	capMin := int64(float64(alloc) * ratio)
	if v := value(res.Kubepods, FileMin); v > capMin {
		return fmt.Errorf("kubepods memory.min %d above %.2f of allocatable %d", v, ratio, alloc)
	}
	byUID := map[string]*corev1.Pod{}
	for _, p := range in.Pods {
		byUID[string(p.UID)] = p
	}
	var total int64
	for _, p := range res.Pods {
		where := "pod " + p.Namespace + "/" + p.Name
		if err := level(where, p.Settings, 0); err != nil {
			return err
		}
		mn := value(p.Settings, FileMin)
		if total > capMin-mn {
			return fmt.Errorf("memory.min of the pods passes %.2f of allocatable %d at %s", ratio, alloc, where)
		}
		total += mn
		pod := byUID[string(p.UID)]
		for _, c := range p.Containers {
			var lim int64
			if pod != nil {
				for _, k := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
					if k.Name == c.Name {
						if q, ok := k.Resources.Limits[corev1.ResourceMemory]; ok && q.Sign() > 0 && qty.Tame(q) && q.CmpInt64(maxBytes) < 0 {
							lim = q.Value()
						}
					}
				}
			}
			if err := level(where+" container "+c.Name, c.Settings, lim); err != nil {
				return err
			}
		}
	}
	return nil
}

package memqos

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// Class is a koordinator QoS class.
type Class string

// The koordinator QoS classes. SYSTEM pods are left alone.
const (
	LSE    Class = "LSE"
	LSR    Class = "LSR"
	LS     Class = "LS"
	BE     Class = "BE"
	SYSTEM Class = "SYSTEM"
)

// Policy is a pod's memory-QoS policy (koordinator PodMemoryQOSPolicy).
type Policy string

// Policies: "default" (or empty) follows the class configuration, "auto"
// uses gofit's profile that acts on upstream kernels, "none" restores the
// kernel defaults.
const (
	PolicyDefault Policy = "default"
	PolicyAuto    Policy = "auto"
	PolicyNone    Policy = "none"
)

// Pod labels and annotations read, koordinator's and ACK's legacy ones
// (the webhook's plan annotation is podplan.Annotation).
const (
	LabelQoSClass       = "koordinator.sh/qosClass"
	LabelQoSClassLegacy = "alibabacloud.com/qosClass"
	AnnotationMemoryQOS = "koordinator.sh/memoryQOS"
	AnnotationMemoryLeg = "alibabacloud.com/memoryQOS"
	ResourceBatchMemory = corev1.ResourceName("kubernetes.io/batch-memory")
	envGOMEMLIMIT       = "GOMEMLIMIT"
)

// PodConfig is the koordinator.sh/memoryQOS annotation: a policy and
// knobs that override the class configuration for this pod.
type PodConfig struct {
	Policy Policy `json:"policy,omitempty"`
	MemoryQOS
}

// KubeQoS returns the pod's Kubernetes QoS class: status.qosClass, or
// computed from the spec as the kubelet does when the status lacks it.
func KubeQoS(pod *corev1.Pod) corev1.PodQOSClass {
	if q := pod.Status.QOSClass; q != "" {
		return q
	}
	requests, limits := corev1.ResourceList{}, corev1.ResourceList{}
	guaranteed := true
	all := append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	for _, c := range all {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq && !req.IsZero() {
				requests[r] = req
			}
			if hasLim && !lim.IsZero() {
				limits[r] = lim
			} else {
				guaranteed = false
			}
			// Requests default to limits; unequal ones make it Burstable.
			if hasReq && hasLim && req.Cmp(lim) != 0 {
				guaranteed = false
			}
		}
	}
	switch {
	case len(requests) == 0 && len(limits) == 0:
		return corev1.PodQOSBestEffort
	case guaranteed && len(limits) == 2:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// PodClass returns the koordinator class: the koordinator.sh/qosClass label
// (or the legacy alibabacloud.com one), else Guaranteed→LSR,
// Burstable→LS, BestEffort→BE. An unknown label value is reported and
// the default used.
func PodClass(pod *corev1.Pod) (Class, string) {
	for _, key := range []string{LabelQoSClass, LabelQoSClassLegacy} {
		v, ok := pod.Labels[key]
		if !ok {
			continue
		}
		switch c := Class(strings.ToUpper(v)); c {
		case LSE, LSR, LS, BE, SYSTEM:
			return c, ""
		default:
			def := defaultClass(KubeQoS(pod))
			return def, fmt.Sprintf("label %s=%q is not LSE, LSR, LS, BE or SYSTEM; using %s", key, v, def)
		}
	}
	return defaultClass(KubeQoS(pod)), ""
}

func defaultClass(q corev1.PodQOSClass) Class {
	switch q {
	case corev1.PodQOSGuaranteed:
		return LSR
	case corev1.PodQOSBestEffort:
		return BE
	}
	return LS
}

// PodPolicy reads the memoryQOS annotation (koordinator's, else the legacy
// one). A malformed annotation is reported and ignored, as koordinator does.
func PodPolicy(pod *corev1.Pod) (*PodConfig, string) {
	for _, key := range []string{AnnotationMemoryQOS, AnnotationMemoryLeg} {
		v, ok := pod.Annotations[key]
		if !ok {
			continue
		}
		var pc PodConfig
		if err := json.Unmarshal([]byte(v), &pc); err != nil {
			return nil, fmt.Sprintf("annotation %s: %v; ignored", key, err)
		}
		switch pc.Policy {
		case "", PolicyDefault, PolicyAuto, PolicyNone:
		default:
			return nil, fmt.Sprintf("annotation %s: policy %q is not auto, default or none; ignored", key, pc.Policy)
		}
		if err := pc.MemoryQOS.check("annotation " + key); err != nil {
			return nil, err.Error() + "; ignored"
		}
		return &pc, ""
	}
	return nil, ""
}

// GoMemLimit returns the GOMEMLIMIT of a container, when it is known: the
// container's env decides where it names GOMEMLIMIT (the last entry, as the
// kubelet passes the last of duplicates; one set from a secret, a
// ConfigMap or the downward API is unknown), else the webhook's
// gofit.dev/plan annotation. ok is false when neither names one.
func GoMemLimit(pod *corev1.Pod, c *corev1.Container) (limit int64, source string, ok bool) {
	for i := len(c.Env) - 1; i >= 0; i-- {
		e := c.Env[i]
		if e.Name != envGOMEMLIMIT {
			continue
		}
		if v, err := fit.ParseMemLimit(e.Value); e.ValueFrom == nil && err == nil && v > 0 && v < maxBytes {
			return v, "env GOMEMLIMIT", true
		}
		return 0, "", false
	}
	if v, ok := planGoMemLimit(pod.Annotations[podplan.Annotation], c.Name); ok {
		return v, "annotation " + podplan.Annotation, true
	}
	return 0, "", false
}

// AnnotationMirror is set by the kubelet on the mirror pod it creates in
// the API for a static pod: its value is the static pod's own UID, which
// names the pod's cgroup.
const AnnotationMirror = "kubernetes.io/config.mirror"

// CgroupUID is the UID the kubelet names a pod's cgroup after: the API UID,
// or for a mirror pod the static pod's UID from AnnotationMirror. A value
// the kubelet cannot have written (not 1-64 letters, digits and dashes)
// is ignored.
func CgroupUID(pod *corev1.Pod) types.UID {
	h, ok := pod.Annotations[AnnotationMirror]
	if !ok || len(h) == 0 || len(h) > 64 {
		return pod.UID
	}
	for _, r := range h {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-') {
			return pod.UID
		}
	}
	return types.UID(h)
}

// planGoMemLimit reads GOMEMLIMIT for container name from the webhook's
// plan annotation. A malformed annotation is no answer: the agent then
// plans as for a container of unknown GOMEMLIMIT.
func planGoMemLimit(ann, name string) (int64, bool) {
	if ann == "" {
		return 0, false
	}
	rec, err := podplan.Parse(ann)
	if err != nil {
		return 0, false
	}
	c := rec.Container(name)
	if c == nil {
		return 0, false
	}
	if v, err := fit.ParseMemLimit(c.Env[envGOMEMLIMIT]); err == nil && v > 0 && v < maxBytes {
		return v, true
	}
	return 0, false
}

// maxBytes bounds every byte count taken from a pod (1 EiB): sums of 110
// pods then cannot overflow int64.
const maxBytes = 1 << 60

func bytesOf(q resource.Quantity) int64 {
	v := q.Value()
	if v < 0 {
		return 0
	}
	if v > maxBytes {
		return maxBytes
	}
	return v
}

// containerMemory returns a container's memory request and limit (0 when
// unset). BE pods scheduled on koordinator's batch resources carry their
// memory as kubernetes.io/batch-memory, which then takes precedence.
func containerMemory(c *corev1.Container, class Class) (req, lim int64) {
	name := corev1.ResourceMemory
	if class == BE {
		if _, ok := c.Resources.Requests[ResourceBatchMemory]; ok {
			name = ResourceBatchMemory
		} else if _, ok := c.Resources.Limits[ResourceBatchMemory]; ok {
			name = ResourceBatchMemory
		}
	}
	if q, ok := c.Resources.Requests[name]; ok {
		req = bytesOf(q)
	}
	if q, ok := c.Resources.Limits[name]; ok {
		lim = bytesOf(q)
	}
	if _, has := c.Resources.Requests[name]; !has && lim > 0 && name == corev1.ResourceMemory {
		req = lim // the API server defaults a missing request to the limit
	}
	return req, lim
}

// podMemory returns the pod's memory request as the scheduler counts it
// (the larger of the running containers' sum and any init container, plus
// the overhead) and its limit (0 unless every running container has one).
// Sums saturate at maxBytes.
func podMemory(pod *corev1.Pod, class Class) (req, lim int64) {
	ctrs := runningContainers(pod)
	limited := len(ctrs) > 0
	for _, c := range ctrs {
		r, l := containerMemory(c, class)
		req = addBytes(req, r)
		lim = addBytes(lim, l)
		limited = limited && l > 0
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isSidecar(c) {
			continue // counted with the running containers
		}
		r, _ := containerMemory(c, class)
		req = max(req, r)
	}
	if q, ok := pod.Spec.Overhead[corev1.ResourceMemory]; ok {
		req = addBytes(req, bytesOf(q))
	}
	if !limited {
		lim = 0
	}
	return req, lim
}

package memqos

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/internal/qty"
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
	for _, list := range [2][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			for _, r := range [2]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
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
				if hasReq && hasLim && !equal(req, lim) {
					guaranteed = false
				}
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

// NodeID names the node whose pods are planned: the node's name and its
// Node object's UID (either may be empty when unknown, as in plan mode).
type NodeID struct {
	Name string
	UID  types.UID
}

// CgroupUID is the UID the kubelet names a pod's cgroup after: the API UID,
// or for a mirror pod the static pod's UID from AnnotationMirror. Anyone
// who may create pods can write that annotation, so it is followed only for
// a mirror pod the node's kubelet made: one controlled by this node's Node
// object, as the kubelet (and the NodeRestriction admission plugin) make
// them. A value the kubelet cannot have written (not 1-64 letters, digits
// and dashes) is ignored.
func CgroupUID(pod *corev1.Pod, node NodeID) types.UID {
	h, ok := pod.Annotations[AnnotationMirror]
	if !ok || len(h) == 0 || len(h) > 64 || !madeByKubelet(pod, node) {
		return pod.UID
	}
	for _, r := range h {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-') {
			return pod.UID
		}
	}
	return types.UID(h)
}

// madeByKubelet reports whether a pod is controlled by its own node's Node
// object (the node named in spec.nodeName, and node where it is known).
func madeByKubelet(pod *corev1.Pod, node NodeID) bool {
	for _, r := range pod.OwnerReferences {
		if r.APIVersion != "v1" || r.Kind != "Node" || r.Controller == nil || !*r.Controller {
			continue
		}
		if r.Name == "" || r.Name != pod.Spec.NodeName || (node.Name != "" && r.Name != node.Name) {
			continue
		}
		if node.UID != "" && r.UID != node.UID {
			continue
		}
		return true
	}
	return false
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
	if !qty.Tame(q) {
		if q.Sign() < 0 {
			return 0
		}
		return maxBytes
	}
	v := q.Value()
	if v < 0 {
		return 0
	}
	if v > maxBytes {
		return maxBytes
	}
	return v
}

// admitted returns the resources the kubelet admitted for container c, not
// the ones the spec asks for: while an in-place resize is pending or
// Infeasible the spec holds a request the node never granted, and a limit
// the kernel does not have. The request is status.allocatedResources (what
// the node allocated), else status.resources.requests; the limit is
// status.resources.limits (what the runtime has in force). Before the
// kubelet's first status of the container, and from kubelets that report
// neither (no in-place resize, so the spec is what was admitted), the spec.
func admitted(pod *corev1.Pod, c *corev1.Container) (req, lim corev1.ResourceList) {
	req, lim = c.Resources.Requests, c.Resources.Limits
	st := containerStatus(pod, c.Name)
	if st == nil {
		return req, lim
	}
	if st.Resources != nil {
		req, lim = st.Resources.Requests, st.Resources.Limits
	}
	if st.AllocatedResources != nil {
		req = st.AllocatedResources
	}
	return req, lim
}

// containerStatus is the kubelet's status of a container or init container.
func containerStatus(pod *corev1.Pod, name string) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// containerMemory returns a container's admitted memory request and limit
// (0 when unset). BE pods scheduled on koordinator's batch resources carry
// their memory as kubernetes.io/batch-memory, which then takes precedence.
func containerMemory(pod *corev1.Pod, c *corev1.Container, class Class) (req, lim int64) {
	requests, limits := admitted(pod, c)
	name := corev1.ResourceMemory
	if class == BE {
		if _, ok := requests[ResourceBatchMemory]; ok {
			name = ResourceBatchMemory
		} else if _, ok := limits[ResourceBatchMemory]; ok {
			name = ResourceBatchMemory
		}
	}
	if q, ok := requests[name]; ok {
		req = bytesOf(q)
	}
	if q, ok := limits[name]; ok {
		lim = bytesOf(q)
	}
	if _, has := requests[name]; !has && lim > 0 && name == corev1.ResourceMemory {
		req = lim // the API server defaults a missing request to the limit
	}
	return req, lim
}

// podMemory returns the pod's admitted memory request as the scheduler
// counts it (the larger of the running containers' sum and any init
// container, plus the overhead) and its limit (0 unless every running
// container has one). Pod-level resources (spec.resources, as admitted:
// status.allocatedResources and status.resources) replace the sums where
// the pod sets them, and a pod-level limit bounds the pod cgroup whatever
// its containers say. Sums saturate at maxBytes. ctrs are the pod's
// runningContainers.
func podMemory(pod *corev1.Pod, ctrs []*corev1.Container, class Class) (req, lim int64) {
	limited := len(ctrs) > 0
	for _, c := range ctrs {
		r, l := containerMemory(pod, c, class)
		req = addBytes(req, r)
		lim = addBytes(lim, l)
		limited = limited && l > 0
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isSidecar(c) {
			continue // counted with the running containers
		}
		r, _ := containerMemory(pod, c, class)
		req = max(req, r)
	}
	if !limited {
		lim = 0
	}
	if preq, plim, ok := podLevelMemory(pod); ok {
		if preq > 0 {
			req = preq
		}
		if plim > 0 && (lim == 0 || plim < lim) {
			lim = plim
		}
	}
	if q, ok := pod.Spec.Overhead[corev1.ResourceMemory]; ok {
		req = addBytes(req, bytesOf(q))
	}
	return req, lim
}

// podLevelMemory reads pod-level memory resources (spec.resources) as the
// kubelet admitted them. ok is false when the pod sets none.
func podLevelMemory(pod *corev1.Pod) (req, lim int64, ok bool) {
	pr := pod.Spec.Resources
	if pr == nil {
		return 0, 0, false
	}
	_, hasReq := pr.Requests[corev1.ResourceMemory]
	_, hasLim := pr.Limits[corev1.ResourceMemory]
	if !hasReq && !hasLim {
		return 0, 0, false
	}
	requests, limits := pr.Requests, pr.Limits
	if st := pod.Status.Resources; st != nil {
		requests, limits = st.Requests, st.Limits
	}
	if a := pod.Status.AllocatedResources; a != nil && hasReq {
		requests = a
	}
	if q, ok := requests[corev1.ResourceMemory]; ok {
		req = bytesOf(q)
	}
	if q, ok := limits[corev1.ResourceMemory]; ok {
		lim = bytesOf(q)
	}
	if !hasReq && lim > 0 {
		req = lim // defaulted from the pod-level limit, as for containers
	}
	return req, lim, true
}

// equal compares two quantities from a pod spec without big-number work
// on untamed ones (see qty.Tame): those are equal only when written alike.
func equal(a, b resource.Quantity) bool {
	if !qty.Tame(a) || !qty.Tame(b) {
		return a.String() == b.String()
	}
	return a.Cmp(b) == 0
}

//go:build !nokube

package pods

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
)

// runPods is the run's pods in its namespace: each one's spec (the run's
// labels and owner, the nodes --node-selector picks, a deadline from the
// budget), and its life through the API server: ready, read once it
// settled, deleted.
type runPods struct {
	cs       kubernetes.Interface
	ns       string
	owner    *runOwner
	selector map[string]string
	budget   time.Duration // the study's --budget, for every pod's deadline
}

// podDeadline is every pod's activeDeadlineSeconds: the study ends
// within its budget plus one trial (at most the budget), and a pod may
// wait podSchedule to be placed first. Past it the kubelet ends the pod
// by itself, so a run killed outright (SIGKILL, a lost laptop) leaves no
// pod running beyond its study's time; the next run's sweep deletes
// the objects.
func podDeadline(budget time.Duration) *int64 {
	d := int64((2*budget + podSchedule + time.Second - 1) / time.Second)
	return &d
}

// pod is a trial or load pod: the run's labels and owner, on node (""
// anywhere the selector allows), with these limits (0: none) and env.
func (rp *runPods) pod(role, node string, t podTarget, env map[string]string, cpuLimit, cpuRequest float64, memLimit int64, ready *url.URL) *corev1.Pod {
	no := false
	port, _ := strconv.Atoi(ready.Port())
	scheme := corev1.URISchemeHTTP
	if ready.Scheme == "https" {
		scheme = corev1.URISchemeHTTPS
	}
	c := corev1.Container{Name: "target", Image: t.image, Args: t.args, Env: slices.Clone(t.env),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: ready.RequestURI(), Port: intstr.FromInt32(int32(port)), Scheme: scheme}},
			PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 1, SuccessThreshold: 1},
		Resources:       corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	if role == roleTrial {
		c.Name = "target"
	} else {
		c.Name = "load"
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: env[k]})
	}
	if cpuLimit > 0 {
		q := *resource.NewMilliQuantity(int64(cpuLimit*1000+0.5), resource.DecimalSI)
		c.Resources.Limits[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceCPU] = q, q
	}
	if cpuRequest > 0 {
		c.Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(cpuRequest*1000+0.5), resource.DecimalSI)
	}
	if memLimit > 0 {
		q := *resource.NewQuantity(memLimit, resource.BinarySI)
		c.Resources.Limits[corev1.ResourceMemory], c.Resources.Requests[corev1.ResourceMemory] = q, q
	}
	sel := map[string]string{}
	for k, v := range rp.selector {
		sel[k] = v
	}
	var aff *corev1.Affinity
	if node != "" {
		// By the node's name, which a kubernetes.io/hostname label need
		// not equal (cloud nodes are often named otherwise).
		aff = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
	}
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gofit-lab-" + rp.owner.id + "-" + role + "-", Namespace: rp.ns,
			Labels:          map[string]string{labelApp: appName, labelRun: rp.owner.id, labelRole: role},
			OwnerReferences: []metav1.OwnerReference{rp.owner.ref}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}, RestartPolicy: corev1.RestartPolicyNever, NodeSelector: sel, Affinity: aff,
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			TerminationGracePeriodSeconds: &grace, EnableServiceLinks: &no, AutomountServiceAccountToken: &no,
			ActiveDeadlineSeconds: podDeadline(rp.budget)},
	}
}

// waitReady waits until pod name is Ready: scheduling and pulling within
// podSchedule, then readiness within ready. A pod whose container ended,
// or that waits for what will not come (its image cannot be pulled or
// named, its config is wrong), fails at once with a *sandbox.StartError
// naming image (the flag and the image: "--image REF"), as a local
// target that will not start does: the study then stops on the
// target's fault. Not ready in time is a StartError with TimedOut.
func (rp *runPods) waitReady(ctx context.Context, name, image string, ready time.Duration) (*corev1.Pod, error) {
	var running, unschedulable time.Time
	deadline := time.Now().Add(podSchedule)
	for {
		p, err := rp.cs.CoreV1().Pods(rp.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if why := podUnschedulable(p); why == "" {
			unschedulable = time.Time{}
		} else if unschedulable.IsZero() {
			unschedulable = time.Now()
		} else if time.Since(unschedulable) >= unschedulableFor {
			return p, fmt.Errorf("pod %s (%s) cannot be scheduled: %s: lower --quotas, or choose nodes with room with --node-selector", name, image, why)
		}
		if why := podEnded(p); why != "" {
			out := result.Errored
			if oomKilled(p) {
				out = result.OOMKilled
			}
			return p, &sandbox.StartError{Outcome: out, Detail: fmt.Sprintf("pod %s (%s) ended before it was ready: %s", name, image, why)}
		}
		if why := podStuck(p); why != "" {
			return p, &sandbox.StartError{Outcome: result.Errored, Detail: fmt.Sprintf("%s: pod %s cannot start: %s", image, name, why)}
		}
		if running.IsZero() && p.Status.Phase == corev1.PodRunning {
			running = time.Now()
			deadline = running.Add(ready)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			if running.IsZero() {
				return p, fmt.Errorf("pod %s not running within %v: %s", name, podSchedule, podWaiting(p))
			}
			return p, &sandbox.StartError{Outcome: result.Stalled, TimedOut: true, Detail: fmt.Sprintf("pod %s (%s) running, not ready within %v", name, image, ready)}
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unschedulableFor is how long a pod may stay unschedulable before the
// wait gives up: long enough for a trial pod just deleted on the node to
// free its CPU, far shorter than podSchedule.
var unschedulableFor = time.Minute

// podUnschedulable is the scheduler's reason p has no node, or "".
func podUnschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

// stuckReasons are a container's waiting reasons that waiting does not
// cure: the kubelet has given up pulling for now (ImagePullBackOff,
// after ErrImagePull, which alone may be a registry's hiccup), or the
// image or the pod's config is wrong. (CreateContainerError and
// RunContainerError are often a busy runtime's, and retried: they are
// waited on.)
var stuckReasons = []string{"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}

// podStuck says why a pod's container waits for what will not come, or "".
func podStuck(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && slices.Contains(stuckReasons, w.Reason) {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
	}
	return ""
}

// podEnded says how a pod's container ended ("" while it has not).
func podEnded(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil {
			return fmt.Sprintf("container %s exited %d (%s) %s", s.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
		}
	}
	if p.Status.Phase == corev1.PodFailed {
		return "pod failed: " + p.Status.Reason + " " + p.Status.Message
	}
	return ""
}

// oomKilled says whether the kubelet reports the container OOM-killed.
func oomKilled(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			return true
		}
	}
	return false
}

func podWaiting(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			return w.Reason + ": " + w.Message
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return string(c.Type) + ": " + c.Message
		}
	}
	return "phase " + string(p.Status.Phase)
}

// delete deletes a pod now and waits until it is gone, so the next
// trial on its node meets none of its processes.
func (rp *runPods) delete(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The pod's own 1 s grace, not 0: a zero grace period force-deletes
	// the object before the kubelet has stopped the container, and the
	// node's next trial would meet it.
	err := rp.cs.CoreV1().Pods(rp.ns).Delete(ctx, name, metav1.DeleteOptions{})
	for err == nil && ctx.Err() == nil {
		_, err = rp.cs.CoreV1().Pods(rp.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// settle reads the pod once more; after a load that went wrong it waits a
// little for the kubelet to report the container's end (an OOM kill's
// reason reaches the pod's status a sync later).
func (rp *runPods) settle(ctx context.Context, p *corev1.Pod, wrong bool) *corev1.Pod {
	deadline := time.Now().Add(5 * time.Second)
	for {
		cur, err := rp.cs.CoreV1().Pods(rp.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return p
		}
		if !wrong || podEnded(cur) != "" || time.Now().After(deadline) || ctx.Err() != nil {
			return cur
		}
		time.Sleep(250 * time.Millisecond)
	}
}

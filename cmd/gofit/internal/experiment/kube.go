package experiment

import (
	"context"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/admission"
)

// APIServer finds an experiment's live pods through client-go.
type APIServer struct{ Client kubernetes.Interface }

// Experiment implements PodSource.
func (a APIServer) Experiment(ctx context.Context, ns, name, workload string) (Spec, error) {
	list, err := a.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: admission.LabelExperiment + "=" + name})
	if err != nil {
		return Spec{}, err
	}
	return specOf(list.Items, workload), nil
}

// specOf reads the live pods of workload ("" for every one): arms by
// label, the spec from the newest pod's annotation (a rollout may have
// changed it).
func specOf(pods []corev1.Pod, workload string) Spec {
	s := Spec{Pods: map[string][]string{}, Live: map[string]string{}, Restarts: map[string]float64{}, OOMKills: map[string]float64{}, Started: map[string]time.Time{}}
	var newest *corev1.Pod
	for i := range pods {
		p := &pods[i]
		arm := p.Labels[admission.LabelArm]
		if arm == "" {
			continue
		}
		w := WorkloadOf(&p.ObjectMeta)
		s.Live[p.Name] = w
		if !slices.Contains(s.Workloads, w) {
			s.Workloads = append(s.Workloads, w)
		}
		if workload != "" && w != workload {
			continue
		}
		s.Pods[arm] = append(s.Pods[arm], p.Name)
		if n := p.Spec.NodeName; n != "" {
			if s.Nodes == nil {
				s.Nodes = map[string]map[string]int{}
			}
			if s.Nodes[arm] == nil {
				s.Nodes[arm] = map[string]int{}
			}
			s.Nodes[arm][n]++
		}
		if p.Status.StartTime != nil {
			s.Started[p.Name] = p.Status.StartTime.Time
		} else {
			s.Started[p.Name] = p.CreationTimestamp.Time
		}
		for _, c := range p.Status.ContainerStatuses {
			s.Restarts[arm] += float64(c.RestartCount)
			if t := c.LastTerminationState.Terminated; t != nil && t.Reason == "OOMKilled" {
				s.OOMKills[arm]++
			}
		}
		if _, ok := p.Annotations[admission.AnnotationExperiment]; ok && (newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
			newest = p
		}
	}
	sort.Strings(s.Workloads)
	if newest != nil {
		if e, err := admission.ParseExperiment(newest.Annotations[admission.AnnotationExperiment]); err == nil {
			s.Arms, s.Control, s.MaxDuration = e.ArmNames(), e.Control, e.Deadline()
		}
	}
	return s
}

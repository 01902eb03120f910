package experiment

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
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

// Start is when the experiment's current run began, for a report whose
// verdicts are to hold at any look: its Lease's run start (the webhook's
// first assignment of the run, as the guard counts), else its oldest live
// pod's start. how says which. Several workloads running an experiment
// of the name need workload.
func (a APIServer) Start(ctx context.Context, ns, name, workload string) (start time.Time, how string, err error) {
	leases, lerr := a.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: admission.LabelExperiment + "=" + name})
	if lerr == nil {
		var found []string
		for i := range leases.Items {
			l := &leases.Items[i]
			w := l.Annotations[admission.AnnotationWorkload]
			if workload != "" && w != workload {
				continue
			}
			found = append(found, w)
			start, how = admission.RunStart(&l.ObjectMeta), "the run's start on Lease "+l.Name
		}
		switch {
		case len(found) == 1:
			return start, how, nil
		case len(found) > 1:
			return time.Time{}, "", fmt.Errorf("experiment %s in namespace %s has Leases for workloads %q, each its own experiment: name one with --workload", name, ns, found)
		}
	}
	s, err := a.Experiment(ctx, ns, name, workload)
	if err != nil {
		return time.Time{}, "", err
	}
	if workload == "" && len(s.Workloads) > 1 {
		return time.Time{}, "", fmt.Errorf("experiment %s in namespace %s runs in %d workloads (%s), each its own experiment: name one with --workload", name, ns, len(s.Workloads), strings.Join(s.Workloads, ", "))
	}
	for _, t := range s.Started {
		if start.IsZero() || t.Before(start) {
			start = t
		}
	}
	if start.IsZero() {
		why := "no Lease and no live pod"
		if lerr != nil {
			why = fmt.Sprintf("its Lease unreadable (%v) and no live pod", lerr)
		}
		return time.Time{}, "", fmt.Errorf("experiment %s in namespace %s: its start is not known (%s): give --from and --to", name, ns, why)
	}
	how = "its oldest live pod's start (no Lease of the run found)"
	if lerr != nil {
		how = fmt.Sprintf("its oldest live pod's start (its Lease unreadable: %v)", lerr)
	}
	return start, how, nil
}

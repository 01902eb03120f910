package memqos

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/podplan"
)

// Slim returns a copy of pod with only what Compute and the agent read:
// identity, the QoS class labels, the memory-QoS, mirror and plan
// annotations, the Node owner, the containers' names, resources, restart
// policies and GOMEMLIMIT entries, pod-level resources and overhead, and
// the status fields of phase, QoS class, container IDs and admitted
// resources. An informer keeping whole Pods (managedFields, probes, volumes,
// every env var) holds several times that on a full node. Compute(Slim(p))
// plans exactly what Compute(p) plans.
func Slim(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
			DeletionTimestamp: pod.DeletionTimestamp,
			Labels:            keep(pod.Labels, LabelQoSClass, LabelQoSClassLegacy),
			Annotations:       keep(pod.Annotations, AnnotationMemoryQOS, AnnotationMemoryLeg, AnnotationMirror, podplan.Annotation),
		},
		Spec: corev1.PodSpec{
			NodeName:       pod.Spec.NodeName,
			Containers:     slimContainers(pod.Spec.Containers),
			InitContainers: slimContainers(pod.Spec.InitContainers),
			Overhead:       pod.Spec.Overhead,
			Resources:      pod.Spec.Resources,
		},
		Status: corev1.PodStatus{
			Phase: pod.Status.Phase, QOSClass: pod.Status.QOSClass,
			ContainerStatuses:     slimStatuses(pod.Status.ContainerStatuses),
			InitContainerStatuses: slimStatuses(pod.Status.InitContainerStatuses),
			Resources:             pod.Status.Resources,
			AllocatedResources:    pod.Status.AllocatedResources,
		},
	}
	for _, r := range pod.OwnerReferences {
		if r.Kind == "Node" {
			out.OwnerReferences = append(out.OwnerReferences, r)
		}
	}
	return out
}

func keep(m map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}

func slimContainers(cs []corev1.Container) []corev1.Container {
	if cs == nil {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
		for _, e := range c.Env {
			if e.Name == envGOMEMLIMIT {
				out[i].Env = append(out[i].Env, e)
			}
		}
	}
	return out
}

func slimStatuses(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
	if ss == nil {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(ss))
	for i, s := range ss {
		out[i] = corev1.ContainerStatus{Name: s.Name, ContainerID: s.ContainerID, AllocatedResources: s.AllocatedResources, Resources: s.Resources}
	}
	return out
}

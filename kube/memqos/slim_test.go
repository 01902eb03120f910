package memqos

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSlim: the agent's informer keeps Slim pods; every plan must be what
// the whole pods give, and what the agent never reads must be gone.
func TestSlim(t *testing.T) {
	var pods []*corev1.Pod
	for _, f := range []string{"../agent/testdata/pods.json", "../agent/testdata/node-pods.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var list corev1.PodList
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			pods = append(pods, &list.Items[i])
		}
	}
	resized := mkPod("resized", map[string]string{LabelQoSClass: "LS", "app": "x"}, map[string]string{AnnotationMemoryQOS: `{"lowLimitPercent":80}`, "other": "y"},
		corev1.PodRunning, ctr{name: "app", req: "1Gi", lim: "2Gi", env: map[string]string{"GOMEMLIMIT": "900MiB", "OTHER": "1"}})
	resized.Status.ContainerStatuses[0].AllocatedResources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
	resized.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("3Gi")}}
	resized.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	pods = append(pods, resized)
	node := NodeID{Name: "node-a"}
	strat := Strategy{LSClass: &ResourceQOS{MemoryQOS: &MemoryQOSCfg{Enable: ptr(true), MemoryQOS: MemoryQOS{MinLimitPercent: ptr(int64(50)), ThrottlingPercent: ptr(int64(60))}}}}
	slim := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		slim[i] = Slim(p)
	}
	for _, pol := range []Policy{PolicyDefault, PolicyAuto} {
		in := Input{Pods: pods, Strategy: strat, Policy: pol, NodeAllocatable: 8 * gi, Node: node, CgroupVersion: 2}
		want := compute(t, in)
		in.Pods = slim
		if got := compute(t, in); !reflect.DeepEqual(got, want) {
			t.Errorf("policy %s: slim pods plan differently:\n got %+v\nwant %+v", pol, got, want)
		}
	}
	s := Slim(resized)
	if s.ManagedFields != nil || s.Labels["app"] != "" || s.Annotations["other"] != "" || len(s.Spec.Containers[0].Env) != 1 {
		t.Errorf("slim pod keeps what the agent does not read: %+v", s)
	}
}

package agent

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/kube/kubetest"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// TestEnvtestQoSClassPolicy applies deploy/node/qos-class-policy.yaml to a
// real kube-apiserver: the QoS class label was the tenant's to set and to
// change on a running pod, and the agent protects by it. Now it is fixed
// at creation, and LSR/LSE are claimed only where an administrator allows.
// SYSTEM too: a BE pod labelled SYSTEM was left to the kernel, its
// memory.high lifted to max beside the LS pods its throttle protects.
func TestEnvtestQoSClassPolicy(t *testing.T) {
	cs, err := kubernetes.NewForConfig(kubetest.Start(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := os.ReadFile("../../deploy/node/qos-class-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("%d documents, want the policy and its binding", len(docs))
	}
	var pol admissionv1.ValidatingAdmissionPolicy
	var bind admissionv1.ValidatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict(docs[0], &pol); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &bind); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "critical", Labels: map[string]string{"gofit.dev/qos-class-lsr": "allowed"}}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// createAs makes a pod with res as its container's resources: none
	// is BestEffort to the kubelet, a request Burstable.
	createAs := func(ns string, labels map[string]string, res corev1.ResourceList) (*corev1.Pod, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: res}}}}}
		return cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	}
	burstable := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	create := func(ns string, labels map[string]string) (*corev1.Pod, error) { return createAs(ns, labels, burstable) }
	lsr := map[string]string{memqos.LabelQoSClass: "LSR"}
	// The policy takes effect once the API server has compiled it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := create("tenant", lsr)
		if err != nil && strings.Contains(err.Error(), "gofit.dev/qos-class-lsr=allowed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("policy not in force after 60s: last answer %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, tc := range []struct {
		ns     string
		labels map[string]string
		ok     bool
	}{
		{"tenant", map[string]string{memqos.LabelQoSClass: "LSE"}, false},
		{"tenant", map[string]string{memqos.LabelQoSClass: "lsr"}, false},
		{"tenant", map[string]string{memqos.LabelQoSClassLegacy: "LSR"}, false},
		{"tenant", map[string]string{memqos.LabelQoSClass: "SYSTEM"}, false},
		{"tenant", map[string]string{memqos.LabelQoSClass: "system"}, false},
		{"tenant", map[string]string{memqos.LabelQoSClassLegacy: "SYSTEM"}, false},
		{"critical", map[string]string{memqos.LabelQoSClass: "SYSTEM"}, true},
		{"tenant", map[string]string{memqos.LabelQoSClass: "LS"}, true},
		{"tenant", map[string]string{memqos.LabelQoSClass: "BE"}, true},
		{"tenant", nil, true},
		{"critical", lsr, true},
	} {
		_, err := create(tc.ns, tc.labels)
		if (err == nil) != tc.ok {
			t.Errorf("create in %s with %v: %v, want allowed=%v", tc.ns, tc.labels, err, tc.ok)
		}
	}
	// The class follows from the resources as the kubelet classes them
	// (issue 51, item 2): a BestEffort pod labelled LS escaped the BE
	// throttle (with {"policy":"none"}, memory.high went to max). It may
	// claim only BE, unless the namespace grants any class; a zero
	// request is no request to the kubelet.
	zero := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("0")}
	storage := corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	for _, tc := range []struct {
		ns     string
		labels map[string]string
		res    corev1.ResourceList
		ok     bool
	}{
		{"tenant", map[string]string{memqos.LabelQoSClass: "LS"}, nil, false},
		{"tenant", map[string]string{memqos.LabelQoSClass: "ls"}, zero, false},
		{"tenant", map[string]string{memqos.LabelQoSClassLegacy: "LS"}, storage, false},
		{"tenant", map[string]string{memqos.LabelQoSClass: "NONE"}, nil, false},
		{"tenant", map[string]string{memqos.LabelQoSClass: "BE"}, nil, true},
		{"tenant", nil, nil, true},
		{"tenant", map[string]string{memqos.LabelQoSClass: "LS"}, burstable, true},
		{"critical", map[string]string{memqos.LabelQoSClass: "LS"}, nil, true},
	} {
		_, err := createAs(tc.ns, tc.labels, tc.res)
		if (err == nil) != tc.ok {
			t.Errorf("create in %s with %v and requests %v: %v, want allowed=%v", tc.ns, tc.labels, tc.res, err, tc.ok)
		} else if err != nil && !strings.Contains(err.Error(), "BestEffort") {
			t.Errorf("create in %s with %v and requests %v: %v, want the BestEffort refusal", tc.ns, tc.labels, tc.res, err)
		}
	}
	// On a running pod the class cannot be changed, added or removed;
	// other labels can.
	ls, err := create("tenant", map[string]string{memqos.LabelQoSClass: "LS", "app": "web"})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := create("tenant", map[string]string{"app": "web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod    *corev1.Pod
		key, v string // v "" removes
		ok     bool
	}{
		{ls, memqos.LabelQoSClass, "LSR", false},
		{ls, memqos.LabelQoSClass, "BE", false},
		{ls, memqos.LabelQoSClass, "", false},
		{plain, memqos.LabelQoSClass, "LS", false},
		{plain, memqos.LabelQoSClassLegacy, "LSR", false},
		{ls, "app", "api", true},
	} {
		p, err := cs.CoreV1().Pods("tenant").Get(ctx, tc.pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tc.v == "" {
			delete(p.Labels, tc.key)
		} else {
			p.Labels[tc.key] = tc.v
		}
		_, err = cs.CoreV1().Pods("tenant").Update(ctx, p, metav1.UpdateOptions{})
		if (err == nil) != tc.ok {
			t.Errorf("update %s: %s=%q: %v, want allowed=%v", tc.pod.Name, tc.key, tc.v, err, tc.ok)
		}
	}
}

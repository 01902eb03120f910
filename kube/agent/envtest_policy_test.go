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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/kube/internal/kubetest"
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
	create := func(ns string, labels map[string]string) (*corev1.Pod, error) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		return cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	}
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

package kubetest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestStart creates a namespace on a real API server and reads it back.
func TestStart(t *testing.T) {
	cfg := Start(t, nil)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubetest"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Namespaces().Get(ctx, "kubetest", metav1.GetOptions{})
	if err != nil || got.Name != "kubetest" {
		t.Fatalf("get namespace: %v, %v", got, err)
	}
}

package admission

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestWorkload(t *testing.T) {
	yes := true
	of := func(kind, api, name string, labels map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Labels: labels, OwnerReferences: []metav1.OwnerReference{{Kind: kind, APIVersion: api, Name: name, Controller: &yes}}}
	}
	for _, c := range []struct {
		m    *metav1.ObjectMeta
		want string
	}{
		{of("ReplicaSet", "apps/v1", "web-5d8f7c", map[string]string{"pod-template-hash": "5d8f7c"}), "Deployment/web"},
		{of("ReplicaSet", "apps/v1", "web-api-77aa", map[string]string{"pod-template-hash": "77aa"}), "Deployment/web-api"},
		{of("ReplicaSet", "apps/v1", "shop-6c9f", map[string]string{"rollouts-pod-template-hash": "6c9f"}), "Rollout/shop"},
		{of("ReplicaSet", "apps/v1", "standalone", nil), "ReplicaSet/standalone"},
		{of("StatefulSet", "apps/v1", "db", nil), "StatefulSet/db"},
		{&metav1.ObjectMeta{}, ""},
	} {
		if got := Workload(c.m); got != c.want {
			t.Errorf("Workload(%+v) = %q, want %q", c.m.OwnerReferences, got, c.want)
		}
	}
}

func TestExperimentLease(t *testing.T) {
	long := "a23456789012345678901234567890123456789012345678901234567890123"
	seen := map[string]string{}
	for _, w := range []string{"Deployment/web", "Deployment/api", "", "StatefulSet/" + long} {
		n := ExperimentLease(long, w)
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("lease name %q: %v", n, errs)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("workloads %q and %q share lease %q", o, w, n)
		}
		seen[n] = w
		if ExperimentLease(long, w) != n {
			t.Errorf("lease of %q not stable", w)
		}
	}
}

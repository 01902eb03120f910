package webhook

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
)

// TestVerifiedOwnerExpires (issue 51's review): an owner the API server
// once showed was taken as existing for the webhook's whole life, so a
// forged review naming a deleted ReplicaSet's name and UID still wrote
// its experiment Lease. It is now taken on trust for verifiedTTL only.
func TestVerifiedOwnerExpires(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	rs := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: types.UID("rs-uid")}}
	md := metadatafake.NewSimpleMetadataClient(scheme, rs)
	now := time.Unix(1_700_000_000, 0)
	as := &ArmAssigner{Metadata: md, now: func() time.Time { return now }}
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1-abc",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-uid", Controller: &yes}}}}
	if err := as.verifyOwner(ctx, pod); err != nil {
		t.Fatalf("an existing owner: %v", err)
	}
	rsRes := ownerResources[rs.GroupVersionKind()]
	if err := md.Resource(rsRes).Namespace("shop").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(verifiedTTL / 2)
	if err := as.verifyOwner(ctx, pod); err != nil {
		t.Errorf("within the TTL, the owner seen before: %v", err)
	}
	now = now.Add(verifiedTTL)
	if err := as.verifyOwner(ctx, pod); !errors.Is(err, ErrUnverifiedOwner) {
		t.Errorf("past the TTL, a deleted owner: %v, want ErrUnverifiedOwner", err)
	}
}

// TestFlaggerPrimaryRunsNoExperiment (issue 53): Flagger copies a
// Canary's target into NAME-primary at each promotion, experiment
// annotation included; its pods got arms, and an experiment ran on the
// stable side that no canary analysis watches. A ReplicaSet of a
// Deployment that a flagger.app Canary controls now gets none; a
// Deployment merely named *-primary, and the target's own pods, do.
func TestFlaggerPrimaryRunsNoExperiment(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	metav1.AddMetaToScheme(scheme)
	yes := true
	ctrl := func(apiVersion, kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(name + "-uid"), Controller: &yes}}
	}
	obj := func(kind, name string, owners []metav1.OwnerReference) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: kind},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(name + "-uid"), OwnerReferences: owners}}
	}
	md := metadatafake.NewSimpleMetadataClient(scheme,
		obj("Deployment", "web-primary", ctrl("flagger.app/v1beta1", "Canary", "web")),
		obj("ReplicaSet", "web-primary-1", ctrl("apps/v1", "Deployment", "web-primary")),
		obj("Deployment", "web", nil),
		obj("ReplicaSet", "web-1", ctrl("apps/v1", "Deployment", "web")),
		obj("Deployment", "db-primary", nil),
		obj("ReplicaSet", "db-primary-1", ctrl("apps/v1", "Deployment", "db-primary")),
		// Flagger canaries DaemonSets too: NAME-primary is the DaemonSet.
		obj("DaemonSet", "agent-primary", ctrl("flagger.app/v1beta1", "Canary", "agent")),
		obj("DaemonSet", "agent", nil),
	)
	as := &ArmAssigner{Metadata: md}
	podOf := func(kind, owner string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: owner + "-abc", OwnerReferences: ctrl("apps/v1", kind, owner)}}
	}
	for _, p := range []*corev1.Pod{podOf("ReplicaSet", "web-primary-1"), podOf("DaemonSet", "agent-primary")} {
		if err := as.verifyOwner(ctx, p); !errors.Is(err, ErrFlaggerPrimary) {
			t.Errorf("%s, of Flagger's primary: %v, want ErrFlaggerPrimary", p.Name, err)
		}
	}
	for _, p := range []*corev1.Pod{podOf("ReplicaSet", "web-1"), podOf("ReplicaSet", "db-primary-1"), podOf("DaemonSet", "agent")} {
		if err := as.verifyOwner(ctx, p); err != nil {
			t.Errorf("%s: %v, want an arm", p.Name, err)
		}
	}
}

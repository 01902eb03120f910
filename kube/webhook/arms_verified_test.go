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

package webhook

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/gofit-dev/gofit/kube/admission"
)

// TestArmAssignerCountsAssignmentsNotYetStored: admission runs before the
// pod is written, so the next pod's assignment must count the ones on
// their way, once each, until their pods are stored or the TTL passes.
func TestArmAssignerCountsAssignmentsNotYetStored(t *testing.T) {
	ctx := context.Background()
	e, err := admission.ParseExperiment("name: g\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	md := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	now := time.Unix(1_700_000_000, 0)
	as := &ArmAssigner{Client: cs, Metadata: md, Namespaces: []string{"shop"}, PendingTTL: time.Minute, now: func() time.Time { return now },
		pick: func(int) int { return 0 }} // spec order on ties, for the expectations below
	t.Cleanup(as.Close)
	inShop := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop"}}
	var got []admission.Assignment
	for range 4 { // none of these pods is stored yet
		a, err := as.Assign(ctx, inShop, e)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	if got[0].Arm != "a" || got[1].Arm != "b" || got[2].Arm != "a" || got[3].Arm != "b" {
		t.Fatalf("arms %v: pending assignments not counted", got)
	}
	// The first two pods are stored: each is counted once, as a pod.
	for i, a := range got[:2] {
		p := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "p" + string(rune('0'+i)), Namespace: "shop",
			Labels:      map[string]string{admission.LabelExperiment: "g", admission.LabelArm: a.Arm},
			Annotations: map[string]string{admission.AnnotationArmTicket: a.Ticket}}}
		if _, err := md.Resource(podsResource).Namespace("shop").(metadatafake.MetadataClient).CreateFake(p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the cache to see the stored pods", 10*time.Second, func() bool {
		objs, _ := as.caches["shop"].inf.GetIndexer().ByIndex(byExperiment, "g")
		return len(objs) == 2
	})
	if a, _ := as.Assign(ctx, inShop, e); a.Arm != "a" {
		t.Errorf("after 2 stored and 2 pending over a and b, got %s, want a", a.Arm)
	}
	// The pending ones whose pods never came expire: the two stored pods
	// are a tie, and a tie goes to the first arm.
	now = now.Add(2 * time.Minute)
	l, err := cs.CoordinationV1().Leases("shop").Get(ctx, admission.ExperimentLease("g", ""), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := as.Assign(ctx, inShop, e); a.Arm != "a" {
		t.Errorf("after the pending ones expired: %s, want a (1 a, 1 b stored)", a.Arm)
	}
	if l.Labels[admission.LabelExperiment] != "g" {
		t.Errorf("lease labels %v", l.Labels)
	}
	if _, err := as.Assign(ctx, &corev1.Pod{}, e); err == nil {
		t.Error("a pod without a namespace got an arm")
	}
}

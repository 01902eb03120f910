package experiment

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gofit-dev/gofit/kube/admission"
)

// TestVerdictHandler: the guard's answer to a canary tool is "harmful"
// only for a stopped arm, "ok" only for a judgement on data within the
// stale bound, and "unknown" for everything it cannot vouch for: no
// look, a stale look (Prometheus down), no Lease, two workloads of one
// name. It answers only for its namespaces.
func TestVerdictHandler(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	lease := func(name, workload string, st admission.GuardStatus) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
			Labels:      map[string]string{admission.LabelExperiment: strings.Split(name, "-")[2]},
			Annotations: map[string]string{admission.AnnotationWorkload: workload, admission.AnnotationGuard: st.String()}}}
	}
	fresh, old := now.Add(-time.Minute), now.Add(-time.Hour)
	cs := fake.NewClientset(
		lease("gofit-experiment-gc-1", "Deployment/web", admission.GuardStatus{Looked: &fresh}),
		lease("gofit-experiment-stale-1", "Deployment/web", admission.GuardStatus{Looked: &old}),
		lease("gofit-experiment-new-1", "Deployment/web", admission.GuardStatus{}),
		lease("gofit-experiment-bad-1", "Rollout/api", admission.GuardStatus{Looked: &fresh, Stopped: map[string]admission.ArmStop{"nogc": {At: fresh, Reason: "8 restarts against 0"}}}),
		lease("gofit-experiment-two-1", "Deployment/a", admission.GuardStatus{Looked: &fresh}),
		lease("gofit-experiment-two-2", "Deployment/b", admission.GuardStatus{Looked: &fresh}),
	)
	h := VerdictHandler(cs, []string{"shop"}, 15*time.Minute, func() time.Time { return now })
	for _, tc := range []struct {
		path, want string
		code       int
	}{
		{"/v1/experiments/shop/gc", VerdictOK, 200},
		{"/v1/experiments/shop/stale", VerdictUnknown, 200},
		{"/v1/experiments/shop/new", VerdictUnknown, 200},
		{"/v1/experiments/shop/bad", VerdictHarmful, 200},
		{"/v1/experiments/shop/bad?workload=Rollout/api", VerdictHarmful, 200},
		{"/v1/experiments/shop/bad?workload=Rollout/other", VerdictUnknown, 200},
		{"/v1/experiments/shop/none", VerdictUnknown, 200},
		{"/v1/experiments/shop/two", VerdictUnknown, 200},
		{"/v1/experiments/shop/two?workload=Deployment/b", VerdictOK, 200},
		{"/v1/experiments/kube-system/gc", "", 404},
		{"/v1/experiments/shop/Bad_Name", "", 400},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.path, rec.Code, tc.code, rec.Body)
			continue
		}
		if tc.code != 200 {
			continue
		}
		var v GuardVerdict
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if v.Verdict != tc.want || v.Reason == "" {
			t.Errorf("%s: verdict %q (%s), want %q", tc.path, v.Verdict, v.Reason, tc.want)
		}
	}
}

// TestVerdictHandlerReadsOncePerExperiment: questions about one
// experiment within verdictCache cost one List of its Leases, and a
// change shows after it.
func TestVerdictHandlerReadsOncePerExperiment(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	looked := now.Add(-time.Minute)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gofit-experiment-gc-1", Namespace: "shop",
		Labels:      map[string]string{admission.LabelExperiment: "gc"},
		Annotations: map[string]string{admission.AnnotationWorkload: "Deployment/web", admission.AnnotationGuard: admission.GuardStatus{Looked: &looked}.String()}}}
	cs := fake.NewClientset(l)
	h := VerdictHandler(cs, nil, 15*time.Minute, func() time.Time { return now })
	ask := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/experiments/shop/gc", nil))
		var v GuardVerdict
		json.Unmarshal(rec.Body.Bytes(), &v)
		return v.Verdict
	}
	for range 50 {
		if v := ask(); v != VerdictOK {
			t.Fatalf("verdict %q, want ok", v)
		}
	}
	lists := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "list" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("50 questions listed the Leases %d times, want once", lists)
	}
	l.Annotations[admission.AnnotationGuard] = admission.GuardStatus{Looked: &looked, Stopped: map[string]admission.ArmStop{"b": {At: looked}}}.String()
	if _, err := cs.CoordinationV1().Leases("shop").Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(verdictCache)
	if v := ask(); v != VerdictHarmful {
		t.Errorf("after the cache's %v, verdict %q, want harmful", verdictCache, v)
	}
}

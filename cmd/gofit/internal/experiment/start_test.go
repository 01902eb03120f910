package experiment

import (
	"context"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/kube/admission"
)

// TestStartIsTheRunsStart: the report's span begins where the guard's
// looks count from, the Lease's run start, not at the oldest live pod
// (a rollout replaced them) nor at the Lease's creation (an older run);
// without a Lease, at the oldest live pod; two workloads need one named.
func TestStartIsTheRunsStart(t *testing.T) {
	run := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	lease := func(name, workload string, start time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
			CreationTimestamp: metav1.NewTime(run.Add(-24 * time.Hour)),
			Labels:            map[string]string{admission.LabelExperiment: "gmp"},
			Annotations: map[string]string{admission.AnnotationWorkload: workload,
				admission.AnnotationRun: admission.Run{Specs: []string{"d"}, Start: start}.String()}}}
	}
	pod := func(name string, started time.Time) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
			Labels:            map[string]string{admission.LabelExperiment: "gmp", admission.LabelArm: "a"},
			CreationTimestamp: metav1.NewTime(started)},
			Status: corev1.PodStatus{StartTime: &metav1.Time{Time: started}}}
	}
	for _, c := range []struct {
		name     string
		objs     []runtime.Object
		workload string
		want     time.Time
		how, err string
	}{
		{"the Lease's run", []runtime.Object{lease("l1", "Deployment/web", run), pod("web-1", run.Add(time.Hour))}, "", run, "Lease l1", ""},
		{"no Lease: the oldest live pod", []runtime.Object{pod("web-1", run.Add(time.Hour)), pod("web-2", run.Add(30*time.Minute))}, "", run.Add(30 * time.Minute), "oldest live pod", ""},
		{"two workloads", []runtime.Object{lease("l1", "Deployment/web", run), lease("l2", "Deployment/api", run)}, "", time.Time{}, "", "name one with --workload"},
		{"two workloads, one named", []runtime.Object{lease("l1", "Deployment/web", run), lease("l2", "Deployment/api", run.Add(time.Hour))}, "Deployment/api", run.Add(time.Hour), "Lease l2", ""},
		{"nothing", nil, "", time.Time{}, "", "give --from and --to"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, how, err := APIServer{Client: fake.NewSimpleClientset(c.objs...)}.Start(context.Background(), "shop", "gmp", c.workload)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one saying %q", err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case !got.Equal(c.want) || !strings.Contains(how, c.how):
				t.Errorf("start %v (%s), want %v (%s)", got, how, c.want, c.how)
			}
		})
	}
}

// TestCPUPerPodFollowsUnequalTraffic: an arm of the control's setting that
// gets half the requests spends about half the CPU per pod. That is the
// balancer's doing, not the setting's: cpu_cores is undecided and says
// why, while CPU per request, which traffic does not move, is judged.
func TestCPUPerPodFollowsUnequalTraffic(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	in := synth(rng, 60, []arm{{name: "a", latency: 1, cpu: 1, oomInWindow: -1, pods: aaPods}, {name: "half", latency: 1, cpu: 1, oomInWindow: -1, pods: aaPods}})
	for _, ws := range in.Arms[1].Windows {
		for i := range ws {
			w := &ws[i]
			w.Requests, w.CPUSeconds, w.GoBusy, w.GCSeconds = math.Round(w.Requests/2), w.CPUSeconds/2, w.GoBusy/2, w.GCSeconds/2
			for j := range w.Latency {
				w.Latency[j].Count = math.Round(w.Latency[j].Count / 2)
			}
		}
	}
	r, err := Analyze(in)
	if err != nil {
		t.Fatal(err)
	}
	if v := verdictOf(r, "half", "cpu_cores"); v.Verdict != stats.Undecided || !strings.Contains(v.Detail, "traffic differs") {
		t.Errorf("cpu_cores of an arm with half the traffic: %s (%s), want undecided for its traffic", v.Verdict, v.Detail)
	}
	if v := verdictOf(r, "half", "cpu_seconds_per_request"); v.Verdict == stats.Better || v.Verdict == stats.Worse {
		t.Errorf("cpu_seconds_per_request of the same setting: %s ×%.3f", v.Verdict, v.Ratio)
	}
}

package experiment

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
	"github.com/gofit-dev/gofit/kube/webhook"
)

// startAPIServer runs a real kube-apiserver and etcd (envtest).
func startAPIServer(t *testing.T) (kubernetes.Interface, metadata.Interface) {
	t.Helper()
	cfg := kubetest.Start(t, nil)
	return kubernetes.NewForConfigOrDie(cfg), metadata.NewForConfigOrDie(cfg)
}

// guardWorld is a namespace of experiments as the webhook leaves them:
// a ReplicaSet per experiment, pods given their arms by the real arm
// assigner (which writes the experiment's Lease).
type guardWorld struct {
	t   *testing.T
	ctx context.Context
	cs  kubernetes.Interface
	as  *webhook.ArmAssigner
	rs  map[string]*appsv1.ReplicaSet
}

func (w *guardWorld) experiment(spec string, pods int) *admission.Experiment {
	w.t.Helper()
	return w.experimentOf("", spec, pods)
}

// experimentOf is experiment in the workload (ReplicaSet APP-rs, pods
// labelled app=APP) of app, "" for the experiment's name.
func (w *guardWorld) experimentOf(app, spec string, pods int) *admission.Experiment {
	w.t.Helper()
	e, err := admission.ParseExperiment(spec)
	if err != nil {
		w.t.Fatal(err)
	}
	if app == "" {
		app = e.Name
	}
	labels := map[string]string{"app": app}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: app + "-rs", Namespace: "shop"},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}}}
	rs, err = w.cs.AppsV1().ReplicaSets("shop").Create(w.ctx, rs, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	w.rs[app] = rs
	for i := range pods {
		w.pod(app, e, spec, fmt.Sprintf("%s-%d", app, i))
	}
	return e
}

// pod admits one pod of the experiment: it asks the assigner for an arm
// and stores the pod with it, as the webhook would.
func (w *guardWorld) pod(app string, e *admission.Experiment, spec, name string) string {
	w.t.Helper()
	rs := w.rs[app]
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop",
		Labels:          map[string]string{"app": app},
		Annotations:     map[string]string{admission.AnnotationExperiment: spec},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	a, err := w.as.Assign(w.ctx, p, e)
	if err != nil {
		w.t.Fatal(err)
	}
	p.Labels[admission.LabelExperiment], p.Labels[admission.LabelArm] = e.Name, a.Arm
	p.Annotations[admission.AnnotationArmTicket] = a.Ticket
	p, err = w.cs.CoreV1().Pods("shop").Create(w.ctx, p, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	// Running, as the kubelet would say: a Pending pod's eviction ignores
	// PodDisruptionBudgets.
	p.Status.Phase = corev1.PodRunning
	if _, err := w.cs.CoreV1().Pods("shop").UpdateStatus(w.ctx, p, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	return a.Arm
}

// arms counts the live pods of app's workload by arm.
func (w *guardWorld) arms(app string) map[string]int {
	w.t.Helper()
	ps, err := w.cs.CoreV1().Pods("shop").List(w.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range ps.Items {
		out[p.Labels[admission.LabelArm]]++
	}
	return out
}

func (w *guardWorld) events(involved string) []corev1.Event {
	w.t.Helper()
	evs, err := w.cs.CoreV1().Events("shop").List(w.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + involved})
	if err != nil {
		w.t.Fatal(err)
	}
	return evs.Items
}

// TestGuardStopsAHarmfulArm against a real kube-apiserver: of three
// experiments judged by the real analysis on synthetic series, the one
// whose arm crash-loops is stopped (Lease status, its pods evicted, a
// Warning Event on its ReplicaSet, the metric), after which the webhook's
// assigner gives new pods the control; the A/A one is left alone; a
// PodDisruptionBudget that allows no disruption keeps a stopped arm's
// pods until a later look. Another workload that runs an experiment of
// the same name is another experiment: judged on its own, untouched. A
// second look repeats nothing, and a look past maxDuration writes the
// end once.
func TestGuardStopsAHarmfulArm(t *testing.T) {
	ctx := context.Background()
	cs, md := startAPIServer(t)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &guardWorld{t: t, ctx: ctx, cs: cs, as: &webhook.ArmAssigner{Client: cs, Metadata: md}, rs: map[string]*appsv1.ReplicaSet{}}
	t.Cleanup(w.as.Close)
	harmSpec := `{name: harm, control: base, arms: [{name: base, fit: gofit}, {name: crash, env: {GOGC: "5"}}]}`
	aaSpec := `{name: aa, maxDuration: 2h, arms: [{name: a, fit: gofit}, {name: a-again, fit: gofit}]}`
	heldSpec := `{name: held, arms: [{name: base, fit: gofit}, {name: crash, env: {GOGC: "5"}}]}`
	harm := w.experiment(harmSpec, 4)
	w.experiment(aaSpec, 4)
	w.experiment(heldSpec, 4)
	w.experimentOf("harm-too", harmSpec, 4) // harm in another workload, healthy
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "shop"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &intstr.IntOrString{Type: intstr.Int, IntVal: 4},
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "held"}}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("shop").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := w.arms("harm"); got["base"] != 2 || got["crash"] != 2 {
		t.Fatalf("harm's arms before the guard: %v", got)
	}

	// The judge: the real analysis of synthetic series, the crash arms
	// restarting every other minute from minute 10.
	judged := map[string]int{}
	judge := func(_ context.Context, r Running, seq *Sequential) (*Results, error) {
		judged[r.Workload]++
		rng := rand.New(rand.NewSource(int64(len(r.Spec.Name))))
		arms := []arm{{name: r.Spec.Arms[0].Name, latency: 1, cpu: 1, oomInWindow: -1}, {name: r.Spec.Arms[1].Name, latency: 1, cpu: 1, oomInWindow: -1}}
		in := synth(rng, 30, arms)
		in.Experiment, in.Namespace, in.Control = r.Spec.Name, r.Namespace, r.Spec.Control
		if r.Spec.Arms[1].Name == "crash" && r.Workload != "ReplicaSet/harm-too-rs" {
			for p := range in.Arms[1].Windows {
				for i := 10; i < 30; i += 2 {
					in.Arms[1].Windows[p][i].Restarts = 1
				}
			}
		}
		in.Seq, in.Resamples, in.VerdictsOnly = seq, 200, true
		return Analyze(in)
	}
	reg := prometheus.NewPedanticRegistry()
	g := &Guard{Client: cs, Judge: judge, Looks: DefaultLooks(), Metrics: NewGuardMetrics(reg), Identity: "guard-test"}
	if err := g.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(judged) != "map[ReplicaSet/aa-rs:1 ReplicaSet/harm-rs:1 ReplicaSet/harm-too-rs:1 ReplicaSet/held-rs:1]" {
		t.Fatalf("judged %v, want each experiment once", judged)
	}
	// lease is the guard status of experiment exp in app's workload.
	lease := func(exp, app string) admission.GuardStatus {
		t.Helper()
		return guardStatusOf(t, cs, admission.ExperimentLease(exp, "ReplicaSet/"+app+"-rs"))
	}
	if st := lease("harm", "harm"); len(st.Stopped) != 1 || !strings.Contains(st.Stopped["crash"].Reason, "restarts") {
		t.Errorf("harm's guard status %+v, want crash stopped for its restarts", st)
	}
	if st := lease("aa", "aa"); len(st.Stopped) != 0 || st.Expired != nil {
		t.Errorf("the A/A experiment was touched: %+v", st)
	}
	if st := lease("harm", "harm-too"); len(st.Stopped) != 0 {
		t.Errorf("harm in another workload stopped: %+v", st)
	}
	if got := w.arms("harm-too"); got["crash"] != 2 || got["base"] != 2 {
		t.Errorf("harm in another workload after the guard: %v, want both arms kept", got)
	}
	if evs := w.events("harm-too-rs"); len(evs) != 0 {
		t.Errorf("events on the other workload's harm: %+v", evs)
	}
	// The crash pods are gone (evicted; unscheduled pods go at once), the
	// held ones stay: the budget allows no disruption.
	if got := w.arms("harm"); got["crash"] != 0 || got["base"] != 2 {
		t.Errorf("harm's pods after the guard: %v, want crash evicted, base kept", got)
	}
	if got := w.arms("held"); got["crash"] != 2 {
		t.Errorf("held's pods after the guard: %v, want crash kept by the PodDisruptionBudget", got)
	}
	if got := w.arms("aa"); got["a"] != 2 || got["a-again"] != 2 {
		t.Errorf("the A/A experiment's pods: %v", got)
	}
	evs := w.events("harm-rs")
	if len(evs) != 1 || evs[0].Reason != "ArmStopped" || evs[0].Type != corev1.EventTypeWarning || !strings.Contains(evs[0].Message, "arm crash stopped") {
		t.Errorf("events on harm-rs: %+v", evs)
	}
	if evs := w.events("aa-rs"); len(evs) != 0 {
		t.Errorf("events on the A/A experiment: %+v", evs)
	}
	if v := testutil.ToFloat64(g.Metrics.stoppedGauge.WithLabelValues("shop", "harm", "ReplicaSet/harm-rs", "crash")); v != 1 {
		t.Errorf("gofit_experiment_arm_stopped{harm,crash} = %v", v)
	}
	if v := testutil.ToFloat64(g.Metrics.evictions.WithLabelValues("evicted")); v != 2 {
		t.Errorf("evicted %v, want 2", v)
	}
	if v := testutil.ToFloat64(g.Metrics.evictions.WithLabelValues("blocked")); v != 2 {
		t.Errorf("blocked by the budget %v, want 2", v)
	}
	// The ReplicaSet's replacements: the webhook gives them the control.
	for i := range 3 {
		if a := w.pod("harm", harm, harmSpec, fmt.Sprintf("harm-new-%d", i)); a != "base" {
			t.Errorf("replacement %d got arm %s, want the control base", i, a)
		}
	}
	// A second look, past the A/A experiment's maxDuration: nothing is
	// stopped twice; the end is written once.
	g.now = func() time.Time { return time.Now().Add(3 * time.Hour) }
	for range 2 {
		if err := g.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if evs := w.events("harm-rs"); len(evs) != 1 {
		t.Errorf("events on harm-rs after more looks: %d, want 1", len(evs))
	}
	if evs := w.events("aa-rs"); len(evs) != 1 || evs[0].Reason != "ExperimentEnded" {
		t.Errorf("events on aa-rs past maxDuration: %+v", evs)
	}
	if st := lease("aa", "aa"); st.Expired == nil || len(st.Stopped) != 0 {
		t.Errorf("aa's status past maxDuration: %+v", st)
	}
}

package experiment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gofit-dev/gofit/kube/admission"
)

// The guard: `gofit experiment guard` judges every running experiment
// every look and stops an arm that is harmful relative to its control.
// It is conservative: it only ever stops arms (never promotes one, never
// changes a workload), and everything it does is visible:
//
//   - the stop is written to the experiment's Lease (admission's
//     AnnotationGuard), which the webhook reads: new pods no longer get
//     the arm;
//   - the arm's pods are evicted through the Eviction API, so that
//     PodDisruptionBudgets hold; their ReplicaSet replaces them, and the
//     webhook gives the replacements an open arm;
//   - a Warning Event on the workload says what and why (kubectl get
//     events), and gofit_experiment_* metrics count it.
//
// An experiment past its maxDuration gives new pods the control without
// the guard (the webhook reads the deadline itself); the guard writes the
// Event once. Turning the guard off leaves every experiment as it is.

// Running is an experiment the guard found: its Lease, the spec its
// newest live pod carries, and its live pods.
type Running struct {
	Namespace string
	// Workload is the experiment's (Query.Workload's form): its Lease
	// says which; "" for a Lease of a webhook from before experiments had
	// workloads.
	Workload string
	Lease    *coordinationv1.Lease
	Spec     *admission.Experiment
	Pods     []corev1.Pod
	Started  time.Time // the Lease's current run's start (admission.RunStart): its first assignment
}

// Judge fetches and analyzes an experiment at one look.
type Judge func(ctx context.Context, r Running, seq *Sequential) (*Results, error)

// Guard is one guard; Run loops, Once is one look at every experiment.
type Guard struct {
	Client kubernetes.Interface
	Judge  Judge
	// Looks is the plan: Every is the guard's interval; Planned is used
	// for experiments without maxDuration.
	Looks   Looks
	Metrics *GuardMetrics // nil: none
	Log     *slog.Logger  // nil: silent
	// Identity names the guard in its Events (the pod's name).
	Identity string
	// Namespaces are where experiments may run, each with the guard's
	// Role; empty: every namespace, which takes cluster-wide rights.
	Namespaces []string
	now        func() time.Time

	mu   sync.Mutex
	seqs map[time.Duration]*Sequential // by planned length
}

// Decision is one arm the guard stops.
type Decision struct {
	Arm    string
	Reason string
}

// Decide is the guard's rule, pure: every arm but the control that the
// analysis found harmful and that is not stopped yet. It never promotes.
func Decide(r *Results, st admission.GuardStatus) []Decision {
	var out []Decision
	for _, a := range r.Arms {
		if a.Name == r.Control || !a.Harmful {
			continue
		}
		if _, done := st.Stopped[a.Name]; done {
			continue
		}
		out = append(out, Decision{Arm: a.Name, Reason: strings.Join(a.Harms, "; ")})
	}
	return out
}

// Run looks every Looks.Every until ctx ends; a look's errors are logged
// and counted, never fatal.
func (g *Guard) Run(ctx context.Context) error {
	t := time.NewTicker(g.Looks.Every)
	defer t.Stop()
	for ctx.Err() == nil {
		if err := g.Once(ctx); err != nil {
			g.log().Warn("guard look", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	return nil
}

func (g *Guard) log() *slog.Logger {
	if g.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Log
}

func (g *Guard) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// sequential is the boundaries of a planned length, simulated once.
func (g *Guard) sequential(planned time.Duration) (*Sequential, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.seqs[planned]; s != nil {
		return s, nil
	}
	l := g.Looks
	l.Planned = max(planned, l.Every)
	s, err := NewSequential(l)
	if err != nil {
		return nil, err
	}
	if g.seqs == nil {
		g.seqs = map[time.Duration]*Sequential{}
	}
	g.seqs[planned] = s
	return s, nil
}

// Find lists the running experiments: each Lease of the arm assigner
// with a live pod of its workload that carries its spec.
func (g *Guard) Find(ctx context.Context) ([]Running, error) {
	nss := g.Namespaces
	if len(nss) == 0 {
		nss = []string{metav1.NamespaceAll}
	}
	var all []coordinationv1.Lease
	for _, ns := range nss {
		leases, err := g.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: admission.LabelExperiment})
		if err != nil {
			if ns == metav1.NamespaceAll {
				return nil, fmt.Errorf("list experiment leases in every namespace (--namespaces names those the guard's Role is in): %w", err)
			}
			return nil, fmt.Errorf("list experiment leases in namespace %s: %w", ns, err)
		}
		all = append(all, leases.Items...)
	}
	var out []Running
	for i := range all {
		l := &all[i]
		name := l.Labels[admission.LabelExperiment]
		pods, err := g.Client.CoreV1().Pods(l.Namespace).List(ctx, metav1.ListOptions{LabelSelector: admission.LabelExperiment + "=" + name})
		if err != nil {
			return nil, fmt.Errorf("list pods of experiment %s/%s: %w", l.Namespace, name, err)
		}
		r := Running{Namespace: l.Namespace, Lease: l, Started: admission.RunStart(&l.ObjectMeta)}
		if w, ok := l.Annotations[admission.AnnotationWorkload]; ok {
			r.Workload = w
			if w == "" {
				r.Workload = NoController
			}
		} else {
			// A Lease from before Leases named their workload: the
			// experiment of the one workload whose live pods carry its
			// name; with several, whose it is cannot be told, and it is
			// left alone rather than judged or evicted across them.
			ws := map[string]bool{}
			for j := range pods.Items {
				if p := &pods.Items[j]; p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					ws[WorkloadOf(&p.ObjectMeta)] = true
				}
			}
			if len(ws) > 1 {
				g.log().Warn("lease names no workload and pods of several carry its experiment: not judged", "namespace", l.Namespace, "lease", l.Name, "experiment", name, "workloads", len(ws))
				continue
			}
			for w := range ws {
				r.Workload = w
			}
		}
		var newest *corev1.Pod
		for j := range pods.Items {
			p := &pods.Items[j]
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if r.Workload != "" && WorkloadOf(&p.ObjectMeta) != r.Workload {
				continue // another workload's experiment of the same name
			}
			r.Pods = append(r.Pods, *p)
			if _, ok := p.Annotations[admission.AnnotationExperiment]; ok && (newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time)) {
				newest = p
			}
		}
		if newest == nil {
			continue // no live pod: nothing to judge or evict
		}
		if r.Spec, err = admission.ParseExperiment(newest.Annotations[admission.AnnotationExperiment]); err != nil || r.Spec.Name != name {
			continue
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Spec.Name+"/"+out[i].Workload < out[j].Namespace+"/"+out[j].Spec.Name+"/"+out[j].Workload
	})
	return out, nil
}

// Once looks at every running experiment once.
func (g *Guard) Once(ctx context.Context) error {
	exps, err := g.Find(ctx)
	if err != nil {
		g.Metrics.look("error")
		return err
	}
	var errs []error
	stale := false
	for _, r := range exps {
		judged, err := g.guard(ctx, r)
		if err != nil {
			errs = append(errs, fmt.Errorf("experiment %s/%s of %s: %w", r.Namespace, r.Spec.Name, r.Workload, err))
		}
		stale = stale || !judged
	}
	g.Metrics.running(len(exps))
	if len(errs) > 0 {
		g.Metrics.look("error")
		return errors.Join(errs...)
	}
	g.Metrics.look("ok")
	if !stale {
		// Every experiment judged on its data: a look that saw none
		// (no series yet, or stale ones) leaves the timestamp, and its
		// alert, where it was.
		g.Metrics.lookDone(g.clock())
	}
	return nil
}

// guard looks at one experiment: judged says whether it had the data
// for a judgement (never when Prometheus failed or had no series).
func (g *Guard) guard(ctx context.Context, r Running) (judged bool, err error) {
	e := r.Spec
	st, err := admission.ParseGuardStatus(r.Lease.Annotations)
	if err != nil {
		return false, fmt.Errorf("lease %s/%s: %w", r.Namespace, r.Lease.Name, err)
	}
	now := g.clock()
	if d := e.Deadline(); d > 0 && now.Sub(r.Started) >= d && st.Expired == nil {
		if err := g.update(ctx, r, func(s *admission.GuardStatus) bool {
			if s.Expired != nil {
				return false
			}
			at := now.UTC()
			s.Expired = &at
			return true
		}); err != nil {
			return false, err
		}
		g.event(ctx, r, "ExperimentEnded", fmt.Sprintf("experiment %s ran its maxDuration %s: new pods get the control %s", e.Name, e.MaxDuration, e.Control))
		g.log().Info("experiment ended", "namespace", r.Namespace, "experiment", e.Name)
	}
	g.Metrics.ended(r.Namespace, e.Name, r.Workload, e.Deadline() > 0 && now.Sub(r.Started) >= e.Deadline())
	planned := e.Deadline()
	if planned <= 0 {
		planned = g.Looks.Planned
	}
	seq, err := g.sequential(planned)
	if err != nil {
		return false, err
	}
	res, err := g.Judge(ctx, r, seq)
	if err != nil && !errors.Is(err, ErrNoData) {
		// Fail closed: without data (Prometheus down, a query refused)
		// the guard judges nothing new, but the arms it stopped stay
		// stopped, and their pods keep being evicted.
		return false, errors.Join(fmt.Errorf("judge: %w", err), g.evictStopped(ctx, r, st))
	}
	if err != nil {
		g.log().Info("look", "namespace", r.Namespace, "experiment", e.Name, "workload", r.Workload, "no_data", err.Error())
	}
	if res != nil {
		// What each look saw, an arm a line: why an arm was or was not
		// stopped can be read after the fact.
		for _, a := range res.Arms {
			g.log().Info("look", "namespace", r.Namespace, "experiment", e.Name, "workload", r.Workload, "look", fmt.Sprintf("%d/%d", res.Look, res.Looks),
				"arm", a.Name, "pods", len(a.Pods), "windows", a.Windows, "restarts", a.Restarts, "oom_kills", a.OOMKills,
				"unready_share", float64(a.Unready), "harm_evidence", float64(a.HarmEvidence), "harm_bar", 1/res.HarmAlpha, "harms", len(a.Harms))
		}
		for _, d := range Decide(res, st) {
			if err := g.update(ctx, r, func(s *admission.GuardStatus) bool {
				if _, done := s.Stopped[d.Arm]; done {
					return false
				}
				if s.Stopped == nil {
					s.Stopped = map[string]admission.ArmStop{}
				}
				s.Stopped[d.Arm] = admission.ArmStop{At: now.UTC(), Reason: d.Reason}
				return true
			}); err != nil {
				return false, err
			}
			st.Stopped = withStop(st.Stopped, d.Arm, d.Reason, now)
			g.event(ctx, r, "ArmStopped", fmt.Sprintf("experiment %s: arm %s stopped as harmful against %s (look %d of %d): %s; its pods are evicted and new pods get the other arms", e.Name, d.Arm, res.Control, res.Look, res.Looks, d.Reason))
			g.log().Warn("arm stopped", "namespace", r.Namespace, "experiment", e.Name, "workload", r.Workload, "arm", d.Arm, "reason", d.Reason)
		}
	}
	// Too early for an interval (res nil, no error) is a judgement:
	// there was nothing yet to judge.
	judged = err == nil
	if judged {
		// The webhook gives out arms only while the guard keeps judging
		// (admission.GuardSilent): say that it did.
		at := now.UTC()
		if err := g.update(ctx, r, func(s *admission.GuardStatus) bool { s.Looked = &at; return true }); err != nil {
			return false, errors.Join(err, g.evictStopped(ctx, r, st))
		}
	}
	return judged, g.evictStopped(ctx, r, st)
}

// evictStopped evicts the live pods of every arm the Lease says is
// stopped (never the control's).
func (g *Guard) evictStopped(ctx context.Context, r Running, st admission.GuardStatus) error {
	for arm := range st.Stopped {
		if arm == r.Spec.Control {
			continue
		}
		g.Metrics.stopped(r.Namespace, r.Spec.Name, r.Workload, arm)
		if err := g.evict(ctx, r, arm); err != nil {
			return err
		}
	}
	return nil
}

func withStop(m map[string]admission.ArmStop, arm, reason string, now time.Time) map[string]admission.ArmStop {
	if m == nil {
		m = map[string]admission.ArmStop{}
	}
	m[arm] = admission.ArmStop{At: now.UTC(), Reason: reason}
	return m
}

// update changes the Lease's guard status, re-reading it on a conflict
// (the webhook writes the same Lease at every assignment).
func (g *Guard) update(ctx context.Context, r Running, change func(*admission.GuardStatus) bool) error {
	leases := g.Client.CoordinationV1().Leases(r.Namespace)
	l := r.Lease.DeepCopy()
	for range 20 {
		st, err := admission.ParseGuardStatus(l.Annotations)
		if err != nil {
			return fmt.Errorf("lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		if !change(&st) {
			return nil
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[admission.AnnotationGuard] = st.String()
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		if l, err = leases.Get(ctx, r.Lease.Name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("lease %s/%s: %w", r.Namespace, r.Lease.Name, err)
		}
		if !admission.RunStart(&l.ObjectMeta).Equal(r.Started) {
			// A new spec started a new run since the look: the
			// decision was about the old one.
			return fmt.Errorf("lease %s/%s: a new run started at %v: the look's decision is not written", r.Namespace, r.Lease.Name, admission.RunStart(&l.ObjectMeta))
		}
	}
	return fmt.Errorf("lease %s/%s: still conflicting after 20 attempts", r.Namespace, r.Lease.Name)
}

// evict asks the Eviction API to evict the arm's live pods; a
// PodDisruptionBudget that allows no disruption now (429) leaves a pod
// for the next look.
func (g *Guard) evict(ctx context.Context, r Running, arm string) error {
	for _, p := range r.Pods {
		if p.Labels[admission.LabelArm] != arm {
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
		var err error
		if rc, ok := g.Client.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
			// No retries: client-go would wait out a budget's 429 and its
			// Retry-After up to 10 times; the next look tries again.
			err = rc.Post().Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").
				MaxRetries(0).Body(ev).Do(ctx).Error()
		} else {
			err = g.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		}
		switch {
		case err == nil:
			g.Metrics.eviction("evicted")
			g.log().Info("evicted", "namespace", p.Namespace, "pod", p.Name, "arm", arm)
		case apierrors.IsTooManyRequests(err):
			g.Metrics.eviction("blocked")
			g.log().Info("eviction refused by a PodDisruptionBudget; next look", "namespace", p.Namespace, "pod", p.Name)
		case apierrors.IsNotFound(err):
		default:
			g.Metrics.eviction("error")
			return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

// owner is the workload an experiment's Events go on: the controller of
// its newest pod, and the Deployment above a ReplicaSet.
func (g *Guard) owner(ctx context.Context, r Running) corev1.ObjectReference {
	var newest *corev1.Pod
	for i := range r.Pods {
		if newest == nil || r.Pods[i].CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = &r.Pods[i]
		}
	}
	ref := corev1.ObjectReference{Kind: "Lease", APIVersion: "coordination.k8s.io/v1", Namespace: r.Namespace, Name: r.Lease.Name, UID: r.Lease.UID}
	if newest == nil {
		return ref
	}
	c := metav1.GetControllerOfNoCopy(newest)
	if c == nil {
		return corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.Namespace, Name: newest.Name, UID: newest.UID}
	}
	ref = corev1.ObjectReference{Kind: c.Kind, APIVersion: c.APIVersion, Namespace: r.Namespace, Name: c.Name, UID: c.UID}
	if c.Kind == "ReplicaSet" {
		if rs, err := g.Client.AppsV1().ReplicaSets(r.Namespace).Get(ctx, c.Name, metav1.GetOptions{}); err == nil {
			if d := metav1.GetControllerOfNoCopy(rs); d != nil {
				ref = corev1.ObjectReference{Kind: d.Kind, APIVersion: d.APIVersion, Namespace: r.Namespace, Name: d.Name, UID: d.UID}
			}
		}
	}
	return ref
}

// event writes a Warning Event on the experiment's workload; failing to
// write one is logged (the Lease and the metrics still say it).
func (g *Guard) event(ctx context.Context, r Running, reason, msg string) {
	now := metav1.NewTime(g.clock())
	id := g.Identity
	if id == "" {
		id, _ = os.Hostname()
	}
	obj := g.owner(ctx, r)
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: obj.Name + ".gofit-", Namespace: r.Namespace},
		InvolvedObject:      obj,
		Reason:              reason,
		Message:             msg,
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: "gofit-experiment-guard"},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "gofit.dev/experiment-guard",
		ReportingInstance:   id,
		Action:              reason,
	}
	if _, err := g.Client.CoreV1().Events(r.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		g.log().Warn("event", "namespace", r.Namespace, "reason", reason, "err", err)
	}
}

// GuardMetrics are the guard's gofit_experiment_* metrics, on a registry
// of the caller's.
type GuardMetrics struct {
	looks        *prometheus.CounterVec
	lastLook     prometheus.Gauge
	evictions    *prometheus.CounterVec
	runningGauge prometheus.Gauge
	stoppedGauge *prometheus.GaugeVec
	endedGauge   *prometheus.GaugeVec
}

// NewGuardMetrics registers the guard's metrics on reg.
func NewGuardMetrics(reg prometheus.Registerer) *GuardMetrics {
	m := &GuardMetrics{
		looks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gofit_experiment_guard_looks_total",
			Help: "Looks of the guard at every running experiment, by result (ok, error)."}, []string{"result"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gofit_experiment_guard_evictions_total",
			Help: "Evictions of a stopped arm's pods, by result (evicted; blocked by a PodDisruptionBudget, retried next look; error)."}, []string{"result"}),
		lastLook: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gofit_experiment_guard_last_look_success_timestamp_seconds",
			Help: "When the guard last completed a look at every running experiment with their data (Unix seconds); its start before the first. Stale: the guard judges nothing new (its stopped arms are still evicted)."}),
		runningGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gofit_experiment_running",
			Help: "Experiments the guard judged at its last look."}),
		stoppedGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gofit_experiment_arm_stopped",
			Help: "1 for an arm the guard stopped as harmful: new pods no longer get it."}, []string{"namespace", "experiment", "workload", "arm"}),
		endedGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gofit_experiment_ended",
			Help: "1 for an experiment past its maxDuration: new pods get the control."}, []string{"namespace", "experiment", "workload"}),
	}
	// Stale is counted from the start: a guard that never completes a look
	// alerts as one that stopped looking does, and one just started does
	// not.
	m.lastLook.Set(float64(time.Now().Unix()))
	reg.MustRegister(m.looks, m.lastLook, m.evictions, m.runningGauge, m.stoppedGauge, m.endedGauge)
	return m
}

func (m *GuardMetrics) look(result string) {
	if m != nil {
		m.looks.WithLabelValues(result).Inc()
	}
}

func (m *GuardMetrics) lookDone(at time.Time) {
	if m != nil {
		m.lastLook.Set(float64(at.UnixNano()) / 1e9)
	}
}

func (m *GuardMetrics) eviction(result string) {
	if m != nil {
		m.evictions.WithLabelValues(result).Inc()
	}
}

func (m *GuardMetrics) running(n int) {
	if m != nil {
		m.runningGauge.Set(float64(n))
	}
}

func (m *GuardMetrics) stopped(ns, exp, workload, arm string) {
	if m != nil {
		m.stoppedGauge.WithLabelValues(ns, exp, workload, arm).Set(1)
	}
}

func (m *GuardMetrics) ended(ns, exp, workload string, ended bool) {
	if m != nil {
		v := 0.0
		if ended {
			v = 1
		}
		m.endedGauge.WithLabelValues(ns, exp, workload).Set(v)
	}
}

// PromJudge is the guard's Judge against Prometheus: the experiment's
// series from its start (less warm-up) to the last whole window.
type PromJudge struct {
	Fetch func(ctx context.Context, q Query) (Input, error)
	Query Query // Window, Latency, ErrorMatcher, Matchers, Resamples, Seed
	Harm  Harm
}

// Judge implements Judge.
func (p PromJudge) Judge(ctx context.Context, r Running, seq *Sequential) (*Results, error) {
	q := p.Query
	q.Namespace, q.Name, q.Workload = r.Namespace, r.Spec.Name, r.Workload
	q.To = time.Now().Truncate(q.Window)
	q.From = r.Started.Truncate(q.Window)
	// Harm is anytime-valid from the first whole window (quality verdicts
	// stay undecided below stats.MinWindows, in Analyze): waiting for 8
	// windows kept a crash-looping arm running for 8 of them (review).
	if q.To.Sub(q.From) < q.Window {
		return nil, nil // not one whole window yet
	}
	in, err := p.Fetch(ctx, q)
	if err != nil {
		return nil, err
	}
	in.Seq, in.Harm, in.VerdictsOnly = seq, p.Harm, true
	return Analyze(in)
}

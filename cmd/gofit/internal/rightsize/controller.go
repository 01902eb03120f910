package rightsize

// The controller: rightsize's I/O shell. Each look lists the Deployments
// that opt in, reads each one's status annotation, plan (or, during a
// trial, its judgement) and pods, asks Next for the one action and carries
// it out against the API server: pod labels for the experiment's arms,
// in-place resizes through the pods' resize subresource, the template patch
// of a promotion, an Event and the status annotation. Prometheus is behind
// Plan and Judge (cmd/gofit wires fleet and experiment to them).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/fleet"
	labreport "github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
	"github.com/gofit-dev/gofit/kube/admission"
)

// Keys the controller writes, and its experiment's arms.
const (
	// KeyStatus on a workload's status Lease (LeaseName) is its Status
	// (JSON). Not on the Deployment: its annotations are copied into its
	// ReplicaSets and bump its generation, and a GitOps tool would see
	// each write as drift, or undo it.
	KeyStatus = "gofit.dev/rightsize-status"
	// LabelStatus marks the status Leases, so a look lists them at once.
	LabelStatus = "gofit.dev/rightsize-status"
	// Experiment is the gofit.dev/experiment label of a trial's pods;
	// ArmControl and ArmPlan their gofit.dev/arm labels. The guard's
	// analysis (experiment.Fetch) reads them as any experiment's.
	Experiment = "rightsize"
	ArmControl = "current"
	ArmPlan    = "plan"
)

// Controller is one rightsize controller.
type Controller struct {
	Client kubernetes.Interface
	Policy Policy
	// Namespaces are where it looks (each with its Role); empty: every
	// namespace (cluster-wide rights).
	Namespaces []string
	// Plan is fleet's plan for a Deployment, raised to floor (bytes).
	Plan func(ctx context.Context, d *appsv1.Deployment, floor float64) (Plan, error)
	// Judge is a running trial's standing; nil, nil before a whole window.
	Judge func(ctx context.Context, d *appsv1.Deployment, st Status) (*Judgement, error)
	// Files, if set, is the directory recommendations and promotions are
	// written into as strategic-merge patches (kubectl patch
	// --patch-file), one per workload.
	Files string
	// PromoteByFile: mode auto writes the promotion into Files and leaves
	// the template to whoever owns it (GitOps), instead of patching it.
	PromoteByFile bool
	Identity      string
	Log           *slog.Logger
	Metrics       *Metrics
	Now           func() time.Time
}

// Outcome is what a look did for one workload.
type Outcome struct {
	Workload string // namespace/Deployment/name
	Action   Action
	Err      error
}

// Once is one look at every opted-in Deployment. A workload's error is in
// its Outcome and does not stop the others; the error returned is the
// listing's.
func (c *Controller) Once(ctx context.Context) ([]Outcome, error) {
	now := c.now()
	var deps []appsv1.Deployment
	nsMeta := map[string]map[string]string{}
	scopes := c.Namespaces
	if len(scopes) == 0 {
		scopes = []string{metav1.NamespaceAll}
	}
	for _, ns := range scopes {
		l, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list Deployments in %q: %w", ns, err)
		}
		deps = append(deps, l.Items...)
	}
	for _, d := range deps {
		if _, ok := nsMeta[d.Namespace]; ok {
			continue
		}
		n, err := c.Client.CoreV1().Namespaces().Get(ctx, d.Namespace, metav1.GetOptions{})
		if err != nil {
			// A namespaced Role cannot read Namespaces: the workloads'
			// own keys still opt them in.
			c.log().Debug("namespace", "namespace", d.Namespace, "err", err)
			nsMeta[d.Namespace] = nil
			continue
		}
		nsMeta[d.Namespace] = merged(n.Labels, n.Annotations)
	}
	sort.Slice(deps, func(i, j int) bool {
		return deps[i].Namespace+"/"+deps[i].Name < deps[j].Namespace+"/"+deps[j].Name
	})
	leases := map[string]*coordinationv1.Lease{} // by namespace/name
	for _, ns := range scopes {
		l, err := c.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelStatus})
		if err != nil {
			return nil, fmt.Errorf("list status Leases in %q: %w", ns, err)
		}
		for i := range l.Items {
			leases[l.Items[i].Namespace+"/"+l.Items[i].Name] = &l.Items[i]
		}
	}
	statusOf := func(d *appsv1.Deployment) (Status, error) {
		return StatusOf(leases[d.Namespace+"/"+LeaseName(d.Name)], d)
	}
	load := map[string]int{}
	total := 0
	for i := range deps {
		if st, err := statusOf(&deps[i]); err == nil && st.Phase == Trialling {
			load[deps[i].Namespace]++
			total++
		}
	}
	var out []Outcome
	for i := range deps {
		d := &deps[i]
		o := Outcome{Workload: d.Namespace + "/Deployment/" + d.Name}
		st, err := statusOf(d)
		if err != nil {
			o.Err = err
			c.event(ctx, d, corev1.EventTypeWarning, "RightsizeInvalid", err.Error())
			out = append(out, o)
			continue
		}
		mode, _, err := ModeOf(merged(d.Labels, d.Annotations), nsMeta[d.Namespace])
		if err != nil {
			// A running trial is rolled back (as for off); nothing else
			// is done until the value is fixed.
			c.event(ctx, d, corev1.EventTypeWarning, "RightsizeInvalid", err.Error())
			if st.Phase != Trialling {
				o.Err = err
				out = append(out, o)
				continue
			}
		}
		if mode == Off && st.Phase != Trialling {
			continue // not opted in: never touched
		}
		in := Input{Now: now, Mode: mode, Status: st, Load: Load{Namespace: load[d.Namespace], Cluster: total}, Policy: c.Policy}
		raw, err := c.podList(ctx, d)
		if err != nil {
			o.Err = err
			out = append(out, o)
			continue
		}
		in.Pods = podsOf(raw)
		in.Blocked = blocked(d, raw)
		if st.Phase == Trialling {
			in.Resize = resizeState(raw, st)
			if in.Judgement, err = c.Judge(ctx, d, st); err != nil {
				// A trial unjudged for want of data is not promoted;
				// harm needs evidence, so the look waits.
				c.log().Warn("judge", "workload", o.Workload, "err", err)
			}
		} else {
			floor, err := FloorOf(d)
			if err != nil {
				o.Err = err
				c.event(ctx, d, corev1.EventTypeWarning, "RightsizeInvalid", err.Error())
				out = append(out, o)
				continue
			}
			if in.Plan, err = c.Plan(ctx, d, floor); err != nil {
				o.Err = fmt.Errorf("plan: %w", err)
				out = append(out, o)
				continue
			}
			in.NotInPlace = podQoSChange(d, in.Plan.Proposed)
		}
		o.Action = Next(in)
		o.Err = c.act(ctx, d, in, o.Action)
		if o.Err == nil {
			switch o.Action.Kind {
			case StartTrial:
				load[d.Namespace]++
				total++
			case Rollback, EndTrial, Pass, Promote:
				load[d.Namespace]--
				total--
			}
		}
		c.Metrics.action(d, o.Action.Kind, o.Err)
		out = append(out, o)
	}
	c.Metrics.trials(total)
	return out, nil
}

// Run looks every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for ctx.Err() == nil {
		outs, err := c.Once(ctx)
		if err != nil {
			c.log().Warn("look", "err", err)
		}
		for _, o := range outs {
			if o.Err != nil {
				c.log().Warn("rightsize", "workload", o.Workload, "action", o.Action.Kind, "err", o.Err)
			} else {
				c.log().Info("rightsize", "workload", o.Workload, "action", o.Action.Kind, "why", o.Action.Why)
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// LeaseName is the name of a Deployment's status Lease.
func LeaseName(deployment string) string {
	const prefix = "gofit-rightsize-"
	if len(prefix)+len(deployment) <= 253 {
		return prefix + deployment
	}
	h := sha256.Sum256([]byte(deployment))
	return prefix + deployment[:253-len(prefix)-13] + "-" + hex.EncodeToString(h[:6])
}

// StatusOf reads the Status on a Deployment's Lease l (nil: none, Idle).
func StatusOf(l *coordinationv1.Lease, d *appsv1.Deployment) (Status, error) {
	var st Status
	if l == nil {
		return st, nil
	}
	v, ok := l.Annotations[KeyStatus]
	if !ok {
		return st, nil
	}
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return Status{}, fmt.Errorf("annotation %s on Lease %s/%s of Deployment %s: %v (delete the Lease to start over)", KeyStatus, l.Namespace, l.Name, d.Name, err)
	}
	return st, nil
}

// FloorOf reads a Deployment's KeyFloor (a quantity: 96Mi); 0 without.
func FloorOf(d *appsv1.Deployment) (float64, error) {
	v, ok := merged(d.Labels, d.Annotations)[KeyFloor]
	if !ok {
		return 0, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return 0, fmt.Errorf("%s %q on %s/%s: want a memory quantity such as 96Mi", KeyFloor, v, d.Namespace, d.Name)
	}
	return float64(q.Value()), nil
}

// merged is labels overlaid with annotations (an annotation wins).
func merged(ls, as map[string]string) map[string]string {
	m := make(map[string]string, len(ls)+len(as))
	for k, v := range ls {
		m[k] = v
	}
	for k, v := range as {
		m[k] = v
	}
	return m
}

// podList is the Deployment's live pods.
func (c *Controller) podList(ctx context.Context, d *appsv1.Deployment) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s/%s: %w", d.Namespace, d.Name, err)
	}
	l, err := c.Client.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s/%s: %w", d.Namespace, d.Name, err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func podsOf(raw []corev1.Pod) []Pod {
	var out []Pod
	for _, p := range raw {
		ready := false
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		out = append(out, Pod{Name: p.Name, Node: p.Spec.NodeName, Ready: ready})
	}
	return out
}

// blocked says why no trial may start on the Deployment now: it is
// rolling out (the control would mix revisions), or it or its pods run
// another experiment (whose arm labels a trial would take over).
func blocked(d *appsv1.Deployment, pods []corev1.Pod) string {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.Replicas != want {
		return fmt.Sprintf("rolling out (%d of %d pods updated, %d in all)", d.Status.UpdatedReplicas, want, d.Status.Replicas)
	}
	if _, ok := d.Spec.Template.Annotations[admission.AnnotationExperiment]; ok {
		return "its pod template runs an experiment (" + admission.AnnotationExperiment + ")"
	}
	for _, p := range pods {
		if e, ok := p.Labels[admission.LabelExperiment]; ok && e != Experiment {
			return fmt.Sprintf("pod %s is in experiment %s", p.Name, e)
		}
	}
	return ""
}

// podQoSChange says how the plan would change the QoS class of the whole
// pod (the template's containers, the plan's over them); "" if it would
// not.
func podQoSChange(d *appsv1.Deployment, proposed map[string]Setting) string {
	now, next := map[string]Setting{}, map[string]Setting{}
	for _, ctr := range d.Spec.Template.Spec.Containers {
		s := settingOf(ctr.Resources)
		now[ctr.Name], next[ctr.Name] = s, s
		if p, ok := proposed[ctr.Name]; ok {
			next[ctr.Name] = Setting{Requests: p.Requests, Limits: p.Limits}
		}
	}
	if a, b := QoS(now), QoS(next); a != b {
		return fmt.Sprintf("it moves the pods (with their other containers) from QoS class %s to %s", a, b)
	}
	return ""
}

func settingOf(r corev1.ResourceRequirements) Setting {
	return Setting{
		Requests: fleet.Resources{CPU: r.Requests.Cpu().AsApproximateFloat64(), Memory: r.Requests.Memory().AsApproximateFloat64()},
		Limits:   fleet.Resources{CPU: r.Limits.Cpu().AsApproximateFloat64(), Memory: r.Limits.Memory().AsApproximateFloat64()},
	}
}

// resizeState reads the kubelet's answer to a trial's resizes from its
// pods' status: applied when every trial pod's containers run with the
// plan's resources and no resize is pending or in progress.
func resizeState(pods []corev1.Pod, st Status) Resize {
	r := Resize{Applied: true}
	n := 0
	for _, p := range pods {
		if !slices.Contains(st.Pods, p.Name) {
			continue
		}
		n++
		for _, cond := range p.Status.Conditions {
			switch {
			case cond.Type == corev1.PodResizePending && cond.Reason == corev1.PodReasonInfeasible:
				r.Infeasible = fmt.Sprintf("pod %s: %s", p.Name, cond.Message)
				r.Applied = false
			case (cond.Type == corev1.PodResizePending || cond.Type == corev1.PodResizeInProgress) && cond.Status == corev1.ConditionTrue:
				r.Applied = false
			}
		}
		for name, want := range st.Proposed {
			i := slices.IndexFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == name })
			if i < 0 || p.Status.ContainerStatuses[i].Resources == nil || !sameResources(settingOf(*p.Status.ContainerStatuses[i].Resources), want) {
				r.Applied = false
			}
		}
	}
	if n == 0 {
		r.Applied = false
	}
	return r
}

// sameResources compares as the API rounds: CPU to the millicore,
// memory to the byte.
func sameResources(a, b Setting) bool {
	m := func(x float64) int64 { return int64(math.Ceil(x*1000 - 1e-9)) }
	by := func(x float64) int64 { return int64(math.Ceil(x)) }
	return m(a.Requests.CPU) == m(b.Requests.CPU) && m(a.Limits.CPU) == m(b.Limits.CPU) &&
		by(a.Requests.Memory) == by(b.Requests.Memory) && by(a.Limits.Memory) == by(b.Limits.Memory)
}

// act carries out a.
func (c *Controller) act(ctx context.Context, d *appsv1.Deployment, in Input, a Action) error {
	ref := d.Namespace + "/" + d.Name
	switch a.Kind {
	case None, Wait:
		return nil
	case DoRecommend:
		file, err := c.writeFile(d, a.Next.Proposed, "recommendation")
		if err != nil {
			return err
		}
		if err := c.setStatus(ctx, d, a.Next); err != nil {
			return err
		}
		c.event(ctx, d, corev1.EventTypeNormal, "RightsizeRecommended", withFile(a.Why+"; "+describe(a.Next.Current, a.Next.Proposed), file))
	case StartTrial:
		if err := c.start(ctx, d, a); err != nil {
			return fmt.Errorf("start the trial on %s: %w", ref, err)
		}
		if err := c.setStatus(ctx, d, a.Next); err != nil {
			// Without the status the next look would not know the
			// trial: put the pods back.
			return errors.Join(err, c.putBack(ctx, d, a.Next.Current, a.Pods))
		}
		c.event(ctx, d, corev1.EventTypeNormal, "RightsizeTrialStarted", a.Why+"; "+describe(a.Next.Current, a.Next.Proposed)+"; pods "+strings.Join(a.Pods, ", "))
	case Rollback, EndTrial, Pass:
		if err := c.putBack(ctx, d, in.Status.Current, in.Status.Pods); err != nil {
			return fmt.Errorf("put the trial's pods of %s back: %w", ref, err)
		}
		file := ""
		if a.Kind == Pass {
			var err error
			if file, err = c.writeFile(d, in.Status.Proposed, "promotion"); err != nil {
				return err
			}
		}
		if err := c.setStatus(ctx, d, a.Next); err != nil {
			return err
		}
		typ, reason := corev1.EventTypeWarning, "RightsizeRolledBack"
		switch a.Kind {
		case EndTrial:
			reason = "RightsizeTrialEnded"
		case Pass:
			typ, reason = corev1.EventTypeNormal, "RightsizePassed"
		}
		c.event(ctx, d, typ, reason, withFile(a.Why, file))
	case Promote:
		file, err := c.writeFile(d, in.Status.Proposed, "promotion")
		if err != nil {
			return err
		}
		if !c.PromoteByFile {
			patch, err := templatePatch(d, in.Status.Proposed)
			if err != nil {
				return err
			}
			if _, err := c.Client.AppsV1().Deployments(d.Namespace).Patch(ctx, d.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "gofit-rightsize"}); err != nil {
				return fmt.Errorf("promote %s: %w", ref, err)
			}
			// The trial's pods already run the template's resources: only
			// the labels go (a paused Deployment may not roll at once).
			if err := c.putBack(ctx, d, nil, nil); err != nil {
				return err
			}
		} else if err := c.putBack(ctx, d, in.Status.Current, in.Status.Pods); err != nil {
			return err
		}
		if err := c.setStatus(ctx, d, a.Next); err != nil {
			return err
		}
		c.event(ctx, d, corev1.EventTypeNormal, "RightsizePromoted", withFile(a.Why+"; "+describe(in.Status.Current, in.Status.Proposed), file))
	default:
		return fmt.Errorf("unknown action %q", a.Kind)
	}
	return nil
}

func withFile(msg, file string) string {
	if file == "" {
		return msg
	}
	return msg + "; patch in " + file
}

// start labels the ready pods with their arms and resizes the trial's in
// place; on an error it puts back what it did.
func (c *Controller) start(ctx context.Context, d *appsv1.Deployment, a Action) error {
	var done []string
	for _, p := range a.Pods {
		if err := c.resize(ctx, d.Namespace, p, a.Next.Proposed); err != nil {
			return errors.Join(err, c.putBack(ctx, d, a.Next.Current, done))
		}
		done = append(done, p)
	}
	raw, err := c.podList(ctx, d)
	if err != nil {
		return errors.Join(err, c.putBack(ctx, d, a.Next.Current, done))
	}
	for _, p := range podsOf(raw) {
		arm := ArmControl
		if slices.Contains(a.Pods, p.Name) {
			arm = ArmPlan
		} else if !p.Ready {
			continue
		}
		if err := c.label(ctx, d.Namespace, p.Name, arm); err != nil {
			return errors.Join(err, c.putBack(ctx, d, a.Next.Current, done))
		}
	}
	return nil
}

// putBack resizes the trial's pods that are still there to the settings
// they had and takes the workload's pods out of the trial (its labels
// only: another experiment's stay). A pod the API will not resize back is
// evicted (PodDisruptionBudgets hold), so that its replacement starts
// from the template; one that cannot be put back either way keeps its
// labels, and the error leaves the status as it was, for the next look
// to try again.
func (c *Controller) putBack(ctx context.Context, d *appsv1.Deployment, current map[string]Setting, trial []string) error {
	raw, err := c.podList(ctx, d)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range raw {
		if slices.Contains(trial, p.Name) {
			if err := c.resize(ctx, d.Namespace, p.Name, current); err != nil {
				ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: d.Namespace}}
				if eerr := c.Client.CoreV1().Pods(d.Namespace).EvictV1(ctx, ev); eerr != nil && !apierrors.IsNotFound(eerr) {
					errs = append(errs, err, fmt.Errorf("evict pod %s/%s instead: %w", d.Namespace, p.Name, eerr))
					continue
				}
				c.event(ctx, d, corev1.EventTypeWarning, "RightsizeEvicted", fmt.Sprintf("pod %s could not be resized back (%v): evicted, its replacement starts from the template", p.Name, err))
				continue
			}
		}
		if p.Labels[admission.LabelExperiment] == Experiment {
			errs = append(errs, c.label(ctx, d.Namespace, p.Name, ""))
		}
	}
	return errors.Join(errs...)
}

// resize sets the containers' resources through the resize subresource.
func (c *Controller) resize(ctx context.Context, ns, pod string, s map[string]Setting) error {
	var cs []map[string]any
	for _, name := range sortedKeys(s) {
		cs = append(cs, map[string]any{"name": name, "resources": resourcesOf(s[name])})
	}
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": cs}})
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, pod, types.StrategicMergePatchType, b, metav1.PatchOptions{FieldManager: "gofit-rightsize"}, "resize"); err != nil {
		return fmt.Errorf("resize pod %s/%s: %w", ns, pod, err)
	}
	return nil
}

// label sets (arm != "") or removes a pod's experiment and arm labels.
func (c *Controller) label(ctx context.Context, ns, pod, arm string) error {
	ls := map[string]any{admission.LabelExperiment: nil, admission.LabelArm: nil}
	if arm != "" {
		ls = map[string]any{admission.LabelExperiment: Experiment, admission.LabelArm: arm}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": ls}})
	if _, err := c.Client.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, b, metav1.PatchOptions{FieldManager: "gofit-rightsize"}); err != nil {
		return fmt.Errorf("label pod %s/%s: %w", ns, pod, err)
	}
	return nil
}

func (c *Controller) setStatus(ctx context.Context, d *appsv1.Deployment, st Status) error {
	v, err := json.Marshal(st)
	if err != nil {
		return err
	}
	leases := c.Client.CoordinationV1().Leases(d.Namespace)
	name := LeaseName(d.Name)
	for range 5 {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			// Owned by the Deployment: deleting it deletes the status.
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.Namespace,
				Labels:          map[string]string{LabelStatus: "true"},
				Annotations:     map[string]string{KeyStatus: string(v)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID}}}}
			if _, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: "gofit-rightsize"}); err == nil || !apierrors.IsAlreadyExists(err) {
				return wrapStatus(err, d)
			}
			continue
		}
		if err != nil {
			return wrapStatus(err, d)
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[KeyStatus] = string(v)
		if _, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: "gofit-rightsize"}); err == nil || !apierrors.IsConflict(err) {
			return wrapStatus(err, d)
		}
	}
	return fmt.Errorf("write the status Lease of %s/%s: still conflicting", d.Namespace, d.Name)
}

func wrapStatus(err error, d *appsv1.Deployment) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("write the status Lease of %s/%s: %w", d.Namespace, d.Name, err)
}

// resourcesOf is a Setting's requests and limits as the API takes them;
// a limit of 0 is removed (null in a strategic-merge patch).
func resourcesOf(s Setting) map[string]map[string]any {
	q := func(r float64, cpu bool) any {
		if r <= 0 {
			return nil
		}
		if cpu {
			return resource.NewMilliQuantity(int64(math.Ceil(r*1000-1e-9)), resource.DecimalSI).String()
		}
		return resource.NewQuantity(int64(math.Ceil(r)), resource.BinarySI).String()
	}
	return map[string]map[string]any{
		"requests": {"cpu": q(s.Requests.CPU, true), "memory": q(s.Requests.Memory, false)},
		"limits":   {"cpu": q(s.Limits.CPU, true), "memory": q(s.Limits.Memory, false)},
	}
}

// templatePatch is the strategic-merge patch of a promotion: each
// container's resources and Go environment in the pod template. An env
// var that the template sets from a source (valueFrom) has it removed, or
// the API would refuse both.
func templatePatch(d *appsv1.Deployment, s map[string]Setting) ([]byte, error) {
	var cs []map[string]any
	for _, name := range sortedKeys(s) {
		c := map[string]any{"name": name, "resources": resourcesOf(s[name])}
		var env []map[string]any
		for _, k := range sortedKeys(s[name].Env) {
			env = append(env, map[string]any{"name": k, "value": s[name].Env[k], "valueFrom": nil})
		}
		if len(env) > 0 {
			c["env"] = env
		}
		cs = append(cs, c)
	}
	return json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": cs}}}})
}

// writeFile writes the settings as a patch of the Deployment's template
// into Files; "" when Files is not set.
func (c *Controller) writeFile(d *appsv1.Deployment, s map[string]Setting, what string) (string, error) {
	if c.Files == "" {
		return "", nil
	}
	js, err := templatePatch(d, s)
	if err != nil {
		return "", err
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("%s.deployment.%s.rightsize.yaml", d.Namespace, d.Name)
	body := fmt.Sprintf("# gofit rightsize: %s/Deployment/%s, %s (%s)\n# kubectl patch deployment %s -n %s --type strategic --patch-file %s\n%s",
		d.Namespace, d.Name, what, c.now().UTC().Format(time.RFC3339), d.Name, d.Namespace, name, y)
	if err := os.MkdirAll(c.Files, 0o755); err != nil {
		return "", fmt.Errorf("--out: %w", err)
	}
	path := filepath.Join(c.Files, name)
	if err := labreport.WriteAtomic(path, []byte(body)); err != nil {
		return "", err
	}
	return path, nil
}

// describe says what changes, container by container.
func describe(from, to map[string]Setting) string {
	var parts []string
	for _, name := range sortedKeys(to) {
		a, b := from[name], to[name]
		f := func(s Setting) string {
			return fmt.Sprintf("CPU %s/%s memory %s/%s", cpuOf(s.Requests.CPU), cpuOf(s.Limits.CPU), memOf(s.Requests.Memory), memOf(s.Limits.Memory))
		}
		p := fmt.Sprintf("%s: %s → %s", name, f(a), f(b))
		if len(b.Env) > 0 {
			var kv []string
			for _, k := range sortedKeys(b.Env) {
				kv = append(kv, k+"="+b.Env[k])
			}
			p += " with " + strings.Join(kv, " ")
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func cpuOf(c float64) string {
	if c <= 0 {
		return "none"
	}
	return strconv.FormatFloat(math.Ceil(c*1000-1e-9), 'f', 0, 64) + "m"
}

func memOf(b float64) string {
	if b <= 0 {
		return "none"
	}
	return bytesOf(b)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// event writes an Event on the Deployment; failing to is logged.
func (c *Controller) event(ctx context.Context, d *appsv1.Deployment, typ, reason, msg string) {
	now := metav1.NewTime(c.now())
	if len(msg) > 1000 {
		msg = msg[:1000] + "…"
	}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: d.Name + ".gofit-rightsize-", Namespace: d.Namespace},
		InvolvedObject:      corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1", Namespace: d.Namespace, Name: d.Name, UID: d.UID},
		Reason:              reason,
		Message:             msg,
		Type:                typ,
		Source:              corev1.EventSource{Component: "gofit-rightsize"},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "gofit.dev/rightsize",
		ReportingInstance:   c.Identity,
		Action:              reason,
	}
	if ev.ReportingInstance == "" {
		ev.ReportingInstance, _ = os.Hostname()
	}
	if _, err := c.Client.CoreV1().Events(d.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		c.log().Warn("event", "workload", d.Namespace+"/"+d.Name, "reason", reason, "err", err)
	}
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Controller) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

// Metrics are the controller's gofit_rightsize_* metrics.
type Metrics struct {
	actions *prometheus.CounterVec
	running prometheus.Gauge
}

// NewMetrics registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gofit_rightsize_actions_total",
			Help: "Actions taken per workload: recommend, start-trial, rollback, end-trial, pass, promote (result ok or error)."},
			[]string{"namespace", "workload", "action", "result"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gofit_rightsize_trials", Help: "Trials running after the last look."}),
	}
	reg.MustRegister(m.actions, m.running)
	return m
}

func (m *Metrics) action(d *appsv1.Deployment, k Kind, err error) {
	if m == nil || k == None || k == Wait || k == "" {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.actions.WithLabelValues(d.Namespace, "Deployment/"+d.Name, string(k), result).Inc()
}

func (m *Metrics) trials(n int) {
	if m != nil {
		m.running.Set(float64(n))
	}
}

// selectorOf is a Deployment's selector as fleet's Query takes it (k=v
// terms; matchExpressions are not read through kube_pod_labels).
func SelectorOf(d *appsv1.Deployment) (string, error) {
	if d.Spec.Selector == nil || len(d.Spec.Selector.MatchExpressions) > 0 {
		return "", fmt.Errorf("selector of %s/%s: only matchLabels can be read through kube_pod_labels", d.Namespace, d.Name)
	}
	return labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String(), nil
}

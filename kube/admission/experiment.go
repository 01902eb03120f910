package admission

// Experiments on live traffic: a workload's pod template carries
// AnnotationExperiment, and each new pod gets one of its arms. This file is
// pure: the spec's parser, the rule that picks the least-filled arm and the
// patch that gives a pod its arm. Which pods are live in which arm is I/O,
// behind ArmAssigner (kube/webhook implements it against the API server).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/fit"
)

// Annotations and labels of experiments.
const (
	// AnnotationExperiment on a pod (template) asks for an experiment:
	// YAML or JSON, see Experiment.
	AnnotationExperiment = "gofit.dev/experiment"
	// LabelExperiment and LabelArm name the experiment and the arm a pod
	// was given; the report selects pods by them.
	LabelExperiment = "gofit.dev/experiment"
	LabelArm        = "gofit.dev/arm"
	// AnnotationArmTicket is the assignment's unique ticket: it lets an
	// assigner tell an assignment still on its way to the API server from
	// a pod already stored, so that neither is counted twice.
	AnnotationArmTicket = "gofit.dev/arm-ticket"
)

// Arm fits.
const (
	FitGofit = "gofit" // gofit's plan, as the webhook injects it outside experiments
	FitNone  = "none"  // Go's own defaults; GOFIT=off keeps a linked library out of it too
)

// ArmDeadline bounds an arm assignment.
const ArmDeadline = time.Second

// MaxArms bounds an experiment: each arm needs pods, and more arms than
// this would leave each with too few to decide anything.
const MaxArms = 8

// Experiment is the value of AnnotationExperiment.
type Experiment struct {
	Name    string `json:"name"`              // unique in the namespace; a label value
	Control string `json:"control,omitempty"` // the arm the others are judged against; the first when empty
	Arms    []Arm  `json:"arms"`
	// MaxDuration ("2h") ends the experiment: once this long has passed
	// since its first arm was assigned, every new pod gets the control
	// (and the guard plans its looks over it).
	MaxDuration string `json:"maxDuration,omitempty"`
}

// Arm is one setting under test: fit (gofit or none) or env (exactly these
// Go runtime variables), not both.
type Arm struct {
	Name string            `json:"name"`
	Fit  string            `json:"fit,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
}

// ArmVars are the variables an env arm may set.
func ArmVars() []string { return []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG"} }

// ParseExperiment reads an AnnotationExperiment value. Errors name the
// field ("arms[1].env.GOGC") so that an admission warning can say what to
// fix.
func ParseExperiment(s string) (*Experiment, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty: want YAML or JSON with name and arms")
	}
	js, err := yaml.YAMLToJSON([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	// A misspelt field ("evn") would otherwise give an arm with Go's
	// defaults under the name of another setting: refuse it.
	dec.DisallowUnknownFields()
	var e Experiment
	if err := dec.Decode(&e); err != nil {
		return nil, fieldError(err)
	}
	if err := e.check(); err != nil {
		return nil, err
	}
	if e.Control == "" {
		e.Control = e.Arms[0].Name
	}
	return &e, nil
}

// fieldError rewrites encoding/json's errors to name the field plainly.
func fieldError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	if s, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("unknown field %s (want name, control, maxDuration, arms[].name, arms[].fit, arms[].env)", s)
	}
	return err
}

func (e *Experiment) check() error {
	if e.Name == "" {
		return errors.New("field name: missing")
	}
	if errs := validation.IsValidLabelValue(e.Name); len(errs) > 0 || len(validation.IsDNS1123Label(e.Name)) > 0 {
		return fmt.Errorf("field name: %q is not a DNS label (lowercase letters, digits and '-', up to 63)", e.Name)
	}
	if len(e.Arms) < 2 {
		return fmt.Errorf("field arms: %d arms, want at least 2", len(e.Arms))
	}
	if len(e.Arms) > MaxArms {
		return fmt.Errorf("field arms: %d arms, want at most %d", len(e.Arms), MaxArms)
	}
	seen := map[string]bool{}
	for i, a := range e.Arms {
		f := fmt.Sprintf("arms[%d]", i)
		switch {
		case a.Name == "":
			return fmt.Errorf("field %s.name: missing", f)
		case len(validation.IsDNS1123Label(a.Name)) > 0:
			return fmt.Errorf("field %s.name: %q is not a DNS label (lowercase letters, digits and '-', up to 63)", f, a.Name)
		case seen[a.Name]:
			return fmt.Errorf("field %s.name: %q names two arms", f, a.Name)
		case a.Fit != "" && a.Env != nil:
			return fmt.Errorf("field %s: has both fit and env; an arm is one or the other", f)
		case a.Fit == "" && len(a.Env) == 0:
			return fmt.Errorf("field %s: want fit (gofit or none) or env", f)
		case a.Fit != "" && a.Fit != FitGofit && a.Fit != FitNone:
			return fmt.Errorf("field %s.fit: %q is not gofit or none", f, a.Fit)
		}
		seen[a.Name] = true
		for _, k := range slices.Sorted(maps.Keys(a.Env)) {
			if err := checkArmVar(k, a.Env[k]); err != nil {
				return fmt.Errorf("field %s.env.%s: %w", f, k, err)
			}
		}
	}
	if e.MaxDuration != "" {
		if d, err := time.ParseDuration(e.MaxDuration); err != nil || d <= 0 {
			return fmt.Errorf("field maxDuration: %q is not a positive duration (such as 2h or 90m)", e.MaxDuration)
		}
	}
	if e.Control != "" && !seen[e.Control] {
		return fmt.Errorf("field control: %q names no arm", e.Control)
	}
	return nil
}

// checkArmVar accepts what Go's runtime accepts: a value it would ignore
// would make the arm Go's default under another name.
func checkArmVar(name, v string) error {
	switch name {
	case "GOMAXPROCS":
		if n, err := strconv.Atoi(v); err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer", v)
		}
	case "GOGC":
		if _, err := strconv.Atoi(v); err != nil && v != "off" {
			return fmt.Errorf("%q is not an integer or off", v)
		}
	case "GOMEMLIMIT":
		if _, err := fit.ParseMemLimit(v); err != nil {
			return fmt.Errorf("%q: %w", v, err)
		}
	case "GODEBUG":
		if v == "" {
			return errors.New("empty")
		}
	default:
		return fmt.Errorf("not a Go runtime variable an arm may set (%s)", strings.Join(ArmVars(), ", "))
	}
	return nil
}

// Arm returns the arm called name.
func (e *Experiment) Arm(name string) (Arm, bool) {
	for _, a := range e.Arms {
		if a.Name == name {
			return a, true
		}
	}
	return Arm{}, false
}

// ArmNames lists the arms in the spec's order.
func (e *Experiment) ArmNames() []string {
	out := make([]string, len(e.Arms))
	for i, a := range e.Arms {
		out[i] = a.Name
	}
	return out
}

// Assignment is an arm given to one pod, with its unique ticket.
type Assignment struct {
	Arm    string
	Ticket string
	// Note, when set, says why the pod got the arm it got against the
	// spread (AnnotationArmNote, and an admission warning).
	Note string
}

// ArmAssigner gives a new pod of an experiment its arm (pod is the pod
// being admitted, with its namespace set; it is not stored yet, so it has
// no UID). An implementation counts the arm of every live pod of the
// experiment in the namespace and of every assignment not yet stored, and
// picks with LeastFilled; it must be safe for concurrent use across
// processes (two webhook replicas). Whatever it keeps should go when the
// pod's owners do.
type ArmAssigner interface {
	Assign(ctx context.Context, pod *corev1.Pod, e *Experiment) (Assignment, error)
}

// LeastFilled picks the arm with the fewest pods in counts, and among
// arms tied for the fewest, the one pick(n) chooses of the n tied (in
// arms' order); pick returns a number in [0, n). Each new pod going to an
// arm with the fewest keeps the arms within one pod of each other for any
// number of pods; with pick uniform (rand.IntN), each block of len(arms)
// pods from level counts is a random permutation of the arms (permuted
// blocks), so no arm lines up with the order pods are created in, and so
// with a node or zone that topology spreading fills in turn. A nil pick
// takes the first tied arm (spec order).
func LeastFilled(arms []string, counts map[string]int, pick func(n int) int) string {
	var tied []string
	for _, a := range arms {
		switch {
		case len(tied) == 0 || counts[a] < counts[tied[0]]:
			tied = append(tied[:0], a)
		case counts[a] == counts[tied[0]]:
			tied = append(tied, a)
		}
	}
	if len(tied) == 0 {
		return ""
	}
	if pick == nil || len(tied) == 1 {
		return tied[0]
	}
	return tied[pick(len(tied))]
}

// WithArmAssigner lets the Mutator run experiments (Admit); without one a
// pod asking for an experiment gets the normal fit and a warning.
func WithArmAssigner(a ArmAssigner) MutatorOption { return func(m *Mutator) { m.arms = a } }

// Admit fits a pod being created: with its experiment's arm when it asks
// for one and an arm can be had, with the normal fit (Create) otherwise.
// Like Create it never fails: an experiment never blocks or breaks a pod.
func (m *Mutator) Admit(ctx context.Context, pod *corev1.Pod) Result {
	s, ok := pod.Annotations[AnnotationExperiment]
	if !ok {
		return m.Create(pod)
	}
	if pod.Annotations[AnnotationInject] == "false" {
		return m.Create(pod) // opted out of gofit altogether: no arm either
	}
	e, err := ParseExperiment(s)
	if err != nil {
		return m.normal(pod, err.Error())
	}
	if r, ok := m.keptArm(pod, e); ok {
		return r
	}
	if m.arms == nil {
		return m.normal(pod, "this webhook runs without experiments (start it with --experiments and API access)")
	}
	// Well inside the API server's timeout for the webhook (2 s as
	// shipped): a slow assignment then gives the normal fit and a
	// warning, not a pod admitted with nothing.
	ctx, cancel := context.WithTimeout(ctx, ArmDeadline)
	defer cancel()
	as, err := m.arms.Assign(ctx, pod, e)
	if err != nil {
		return m.normal(pod, fmt.Sprintf("no arm assigned: %v", err))
	}
	return m.withArm(pod, e, as)
}

// Preview fits a pod in a dry run (kubectl --dry-run=server, a dryRun
// request): as Admit, but it assigns no arm, since an assignment is a
// write (the experiment's Lease) and the webhook declares sideEffects:
// None. A pod that already has its arm keeps it; any other experiment pod
// gets the normal fit and a warning that says why.
func (m *Mutator) Preview(pod *corev1.Pod) Result {
	s, ok := pod.Annotations[AnnotationExperiment]
	if !ok || pod.Annotations[AnnotationInject] == "false" {
		return m.Create(pod)
	}
	e, err := ParseExperiment(s)
	if err != nil {
		return m.normal(pod, err.Error())
	}
	if r, ok := m.keptArm(pod, e); ok {
		return r
	}
	return m.normal(pod, "a dry run is given no arm (assigning one writes the experiment's Lease)")
}

// keptArm is a reinvocation's result (or a pod re-admitted with its
// labels): it keeps its arm.
func (m *Mutator) keptArm(pod *corev1.Pod, e *Experiment) (Result, bool) {
	arm, ok := e.Arm(pod.Labels[LabelArm])
	if !ok || pod.Labels[LabelExperiment] != e.Name || pod.Annotations[AnnotationArmTicket] == "" {
		return Result{}, false
	}
	return m.withArm(pod, e, Assignment{Arm: arm.Name, Ticket: pod.Annotations[AnnotationArmTicket]}), true
}

// normal is the normal fit for an experiment pod that gets no arm, with a
// warning that says why.
func (m *Mutator) normal(pod *corev1.Pod, why string) Result {
	r := m.Create(pod)
	r.Warnings = append([]string{fmt.Sprintf("annotation %s: %s; the pod gets gofit's normal fit and no arm", AnnotationExperiment, why)}, r.Warnings...)
	return r
}

// withArm labels the pod with its arm and gives it the arm's settings.
func (m *Mutator) withArm(pod *corev1.Pod, e *Experiment, as Assignment) Result {
	arm, _ := e.Arm(as.Arm)
	var res Result
	if arm.Fit == FitGofit {
		res = m.Create(pod)
	} else {
		res = m.setArmEnv(pod, arm)
	}
	res.Patch = append(res.Patch, metaPatch(pod, "labels", pod.Labels, map[string]string{LabelExperiment: e.Name, LabelArm: arm.Name})...)
	notes := map[string]string{AnnotationArmTicket: as.Ticket}
	if as.Note != "" {
		notes[AnnotationArmNote] = as.Note
		res.Warnings = append(res.Warnings, "experiment "+e.Name+": "+as.Note)
	}
	res.Patch = append(res.Patch, metaPatch(pod, "annotations", patchedAnnotations(pod, res.Patch), notes)...)
	if len(res.Patch) > 0 {
		res.Outcome = OutcomePatched
	}
	return res
}

// patchedAnnotations is the pod's annotations as the patch so far leaves
// them: Create may have added the map itself.
func patchedAnnotations(pod *corev1.Pod, patch []PatchOp) map[string]string {
	if pod.Annotations != nil {
		return pod.Annotations
	}
	for _, op := range patch {
		if op.Path == "/metadata/annotations" {
			return map[string]string{} // exists now
		}
	}
	return nil
}

// metaPatch sets keys in metadata.labels or metadata.annotations (current
// is the map as it stands, nil when absent), leaving equal values alone.
func metaPatch(pod *corev1.Pod, field string, current, set map[string]string) []PatchOp {
	if current == nil {
		return []PatchOp{{Op: "add", Path: "/metadata/" + field, Value: set}}
	}
	var out []PatchOp
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if v, ok := current[k]; ok && v == set[k] {
			continue
		}
		out = append(out, PatchOp{Op: "add", Path: "/metadata/" + field + "/" + escapePointer(k), Value: set[k]})
	}
	return out
}

// setArmEnv gives every container gofit would fit exactly the arm's Go
// variables and GOFIT=off, so that a binary linking gofit's library keeps
// them too. A container's own entries for other Go variables stay (they
// are the same in every arm); an entry of its own for one of the arm's is
// overridden by a later entry (the kubelet passes the last of a name).
func (m *Mutator) setArmEnv(pod *corev1.Pod, arm Arm) Result {
	res := Result{Outcome: OutcomeUnchanged}
	ch := readChoices(pod, m.pl)
	if ch.err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%v; arm %q injected nothing", ch.err, arm.Name))
		return res
	}
	want := map[string]string{"GOFIT": "off"}
	for k, v := range arm.Env {
		want[k] = v
	}
	for _, t := range targets(pod) {
		if ch.modes.of(t.c.Name) == ModeOff {
			continue
		}
		env := slices.Clone(t.c.Env)
		for _, name := range slices.Sorted(maps.Keys(want)) {
			j := lastEntry(env, name)
			if j >= 0 && env[j].ValueFrom == nil {
				env[j].Value = want[name]
				continue
			}
			env = append(env, corev1.EnvVar{Name: name, Value: want[name]})
		}
		if slices.EqualFunc(env, t.c.Env, func(a, b corev1.EnvVar) bool {
			return a.Name == b.Name && a.Value == b.Value && a.ValueFrom == b.ValueFrom
		}) {
			continue
		}
		op := "replace"
		if len(t.c.Env) == 0 {
			op = "add"
		}
		res.Patch = append(res.Patch, PatchOp{Op: op, Path: t.path + "/env", Value: env})
	}
	if len(res.Patch) > 0 {
		res.Outcome = OutcomePatched
	}
	return res
}

// lastEntry is the index of the last env entry called name, -1 for none.
func lastEntry(env []corev1.EnvVar, name string) int {
	for j := len(env) - 1; j >= 0; j-- {
		if env[j].Name == name {
			return j
		}
	}
	return -1
}

package admission

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/internal/qty"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// Mutator fits pods. It is pure: a pod in, a patch, a record and warnings
// out. The zero value uses fit's default policy and assumes nothing of
// the images' Go release.
type Mutator struct {
	pl   planner
	arms ArmAssigner // nil: no experiments (experiment.go)
}

// NewMutator returns a Mutator that plans with pol (built and validated by
// fit.New, so that an admission never meets an invalid option), assuming
// images built with DefaultGoVersion unless an option says otherwise.
func NewMutator(pol fit.Policy, opts ...MutatorOption) *Mutator {
	m := &Mutator{pl: planner{pol: pol, goVersion: DefaultGoVersion}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// MutatorOption configures a Mutator.
type MutatorOption func(*Mutator)

// WithGoVersion sets the Go release assumed for images ("go1.26"; ""
// for unknown: a runtime that does not read cgroups). It decides the
// warnings about what Go's runtime would do alone.
func WithGoVersion(v string) MutatorOption { return func(m *Mutator) { m.pl.goVersion = v } }

// PatchOp is one RFC 6902 JSON Patch operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Outcome names what happened to one admission, for metrics and logs.
type Outcome string

const (
	OutcomePatched   Outcome = "patched"   // the pod was changed
	OutcomeUnchanged Outcome = "unchanged" // looked at, nothing to change (also a reinvocation)
	OutcomeSkipped   Outcome = "skipped"   // the pod opted out
	OutcomeIgnored   Outcome = "ignored"   // not a request this webhook handles
	OutcomeWarned    Outcome = "warned"    // a resize that left injected values stale
	OutcomeError     Outcome = "error"     // an internal error or a bad request; the pod was admitted unchanged
	OutcomeBusy      Outcome = "busy"      // refused unread: too many reviews in flight
)

// Outcomes lists every Outcome.
func Outcomes() []Outcome {
	return []Outcome{OutcomePatched, OutcomeUnchanged, OutcomeSkipped, OutcomeIgnored, OutcomeWarned, OutcomeError, OutcomeBusy}
}

// Result is the outcome of one mutation.
type Result struct {
	Outcome  Outcome
	Patch    []PatchOp
	Warnings []string
	Record   *podplan.Record // what AnnotationPlan now says; nil when the pod was not fitted
}

// goVars are the Go runtime variables the webhook reads from a container's
// env.
func goVars() [4]string { return [...]string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG"} }

// target is one container the webhook fits: every regular container and
// every restartable init container (a sidecar, which runs as long as the
// pod). Run-to-completion init containers are left alone.
type target struct {
	path string // JSON pointer to the container
	c    *corev1.Container
}

func targets(pod *corev1.Pod) []target {
	var out []target
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, target{fmt.Sprintf("/spec/initContainers/%d", i), c})
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, target{fmt.Sprintf("/spec/containers/%d", i), &pod.Spec.Containers[i]})
	}
	return out
}

// annotationMirror marks the mirror pod the kubelet creates in the API for
// a static pod.
const annotationMirror = "kubernetes.io/config.mirror"

// Create fits a pod being created. It never fails: what it cannot read it
// leaves alone and says so in a warning.
func (m *Mutator) Create(pod *corev1.Pod) Result {
	var res Result
	if _, ok := pod.Annotations[annotationMirror]; ok {
		// The kubelet runs a static pod from its own manifest: env added
		// to its mirror in the API never reaches the container, and a
		// plan annotation would claim values it does not run with.
		res.Outcome = OutcomeSkipped
		return res
	}
	ch := readChoices(pod, m.pl)
	warn := ch.warnings
	if ch.optOut || ch.err != nil {
		res.Outcome = OutcomeSkipped
		if ch.err != nil {
			// A misread choice could freeze a gofit/auto container or
			// leave too little room for non-Go memory: fit nothing, say
			// why.
			warn = append(warn, fmt.Sprintf("%v; gofit injected nothing", ch.err))
		}
		res.Warnings = append(warn, m.allAsIs(pod)...)
		return res
	}
	md, nonGo, prev, pl := ch.modes, ch.nonGo, ch.prev, ch.pl

	rec := &podplan.Record{Containers: []podplan.Container{}}
	var replaces, removes, adds []PatchOp
	for _, t := range targets(pod) {
		f := fitContainer(pod, t.c, md.of(t.c.Name), nonGo[t.c.Name], prev.Container(t.c.Name), pl)
		rec.Containers = append(rec.Containers, f.rec)
		warn = append(warn, f.warnings...)
		env := t.path + "/env"
		for _, e := range f.replace {
			replaces = append(replaces, PatchOp{Op: "replace", Path: fmt.Sprintf("%s/%d/value", env, e.index), Value: e.value})
		}
		// Removals go last-index-first so earlier indices stay valid.
		sort.Sort(sort.Reverse(sort.IntSlice(f.remove)))
		for _, i := range f.remove {
			removes = append(removes, PatchOp{Op: "remove", Path: fmt.Sprintf("%s/%d", env, i)})
		}
		switch {
		case len(f.add) == 0:
		case len(t.c.Env) == 0:
			adds = append(adds, PatchOp{Op: "add", Path: env, Value: f.add})
		default:
			for _, e := range f.add {
				adds = append(adds, PatchOp{Op: "add", Path: env + "/-", Value: e})
			}
		}
	}
	res.Patch = append(append(replaces, removes...), adds...)

	b, err := json.Marshal(rec)
	if err != nil { // cannot happen with these types; admit the pod unchanged
		return Result{Outcome: OutcomeError, Warnings: []string{fmt.Sprintf("gofit: encode plan: %v", err)}}
	}
	if s, ok := pod.Annotations[AnnotationPlan]; !ok || s != string(b) {
		if pod.Annotations == nil {
			res.Patch = append(res.Patch, PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{AnnotationPlan: string(b)}})
		} else {
			res.Patch = append(res.Patch, PatchOp{Op: "add", Path: "/metadata/annotations/" + escapePointer(AnnotationPlan), Value: string(b)})
		}
	}
	res.Record = rec
	res.Warnings = dedupe(warn)
	res.Outcome = OutcomeUnchanged
	if len(res.Patch) > 0 {
		res.Outcome = OutcomePatched
	}
	return res
}

// Resize checks an in-place resize (pods/resize): env vars keep the values
// computed for the old limits, so warn for each injected value the new
// limits would change, naming the fix. It never patches.
func (m *Mutator) Resize(pod *corev1.Pod) Result {
	res := Result{Outcome: OutcomeUnchanged}
	ch := readChoices(pod, m.pl)
	if ch.optOut {
		return res
	}
	if ch.err != nil {
		// Nothing was injected at creation either.
		res.Warnings = dedupe(append(append(ch.warnings, fmt.Sprintf("%v; gofit injected nothing", ch.err)), m.allAsIs(pod)...))
		res.Outcome = OutcomeWarned
		return res
	}
	md, nonGo, prev, pl := ch.modes, ch.nonGo, ch.prev, ch.pl
	var warn []string
	for _, t := range targets(pod) {
		c := t.c
		pr := prev.Container(c.Name)
		if pr == nil || len(pr.Env) == 0 {
			if md.of(c.Name) != ModeAuto {
				warn = append(warn, asIs(pod, c, pl)...)
			}
			continue
		}
		lim := containerLimits(pod, c)
		want := plan(lim, nonGo[c.Name], pl)
		owned := ownedEnv(c, pr)
		stale := false
		runtimeEnv, _ := userEnv(pod, c, owned)
		for _, name := range slices.Sorted(maps.Keys(pr.Env)) {
			if _, ours := owned[name]; !ours || name == fit.MarkerVar {
				continue
			}
			now := want.value(name)
			runtimeSees(runtimeEnv, name, now)
			if now == pr.Env[name] {
				continue
			}
			stale = true
			if now == "" {
				now = "nothing"
			}
			warn = append(warn, fmt.Sprintf("container %q: %s=%s was set for the limits at creation (%s); gofit would now set %s. A binary that imports github.com/gofit-dev/gofit/auto follows the resize itself (the %s marker hands it the value); any other keeps the old value until the pod is recreated (e.g. kubectl rollout restart)",
				c.Name, name, pr.Env[name], limitsText(pr.CPU, pr.Memory), now, fit.MarkerVar))
		}
		if !stale {
			for _, w := range mistakes(lim, withoutEmpty(runtimeEnv), nonGo[c.Name], pl) {
				warn = append(warn, fmt.Sprintf("container %q: %s", c.Name, w))
			}
		}
	}
	res.Warnings = dedupe(warn)
	if len(res.Warnings) > 0 {
		res.Outcome = OutcomeWarned
	}
	return res
}

func limitsText(cpu, mem string) string {
	var parts []string
	if cpu != "" {
		parts = append(parts, "cpu "+cpu)
	}
	if mem != "" {
		parts = append(parts, "memory "+mem)
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

func (p planned) value(name string) string {
	switch name {
	case "GOMAXPROCS":
		return p.GOMAXPROCS
	case "GOMEMLIMIT":
		return p.GOMEMLIMIT
	}
	return ""
}

func (p planned) reasons(name string) []string {
	if name == "GOMAXPROCS" {
		return p.GOMAXPROCSReasons
	}
	return p.GOMEMLIMITReasons
}

type envEdit struct {
	index int
	value string
}

type fitted struct {
	rec      podplan.Container
	add      []corev1.EnvVar
	replace  []envEdit
	remove   []int
	warnings []string
}

// fitContainer decides GOMAXPROCS and GOMEMLIMIT for one container, each on
// its own, and the mistakes to warn about.
func fitContainer(pod *corev1.Pod, c *corev1.Container, mode Mode, nonGo int64, prev *podplan.Container, pl planner) fitted {
	lim := containerLimits(pod, c)
	f := fitted{rec: podplan.Container{Name: c.Name, Mode: mode, Reasons: []string{}}}
	if lim.CPUMilli > 0 {
		f.rec.CPU = resource.NewMilliQuantity(lim.CPUMilli, resource.DecimalSI).String()
	}
	if lim.Memory > 0 {
		f.rec.Memory = resource.NewQuantity(lim.Memory, resource.BinarySI).String()
	}
	owned := ownedEnv(c, prev)
	known, set := userEnv(pod, c, owned)
	mayFrom := envFromMaySet(c)
	want := plan(lim, nonGo, pl)
	runtimeEnv := known // what the Go runtime will see, for the warnings

	for _, name := range []string{"GOMAXPROCS", "GOMEMLIMIT"} {
		value := want.value(name)
		inject := false
		switch {
		case set[name]:
			f.rec.Reasons = append(f.rec.Reasons, name+" left alone: the container's env sets it")
		case mayFrom[name] != "":
			f.rec.Reasons = append(f.rec.Reasons, fmt.Sprintf("%s left alone: envFrom %s may set it (an env entry would override it)", name, mayFrom[name]))
		case value == "":
			which := "CPU"
			if name == "GOMEMLIMIT" {
				which = "memory"
			}
			f.rec.Reasons = append(f.rec.Reasons, fmt.Sprintf("%s not set: no %s limit", name, which))
		case mode == ModeAuto:
			f.rec.Reasons = append(f.rec.Reasons, fmt.Sprintf("%s not set: mode auto, gofit/auto sets %s in-process and follows resizes", name, value))
			runtimeSees(runtimeEnv, name, value)
		case mode == ModeOff:
			f.rec.Reasons = append(f.rec.Reasons, name+" not set: mode off")
		default:
			inject = true
			f.rec.Reasons = append(f.rec.Reasons, want.reasons(name)...)
			runtimeSees(runtimeEnv, name, value)
		}
		if (set[name] || mayFrom[name] != "") && known[name] == "" {
			// Set where the webhook cannot read it (a ConfigMap, a
			// Secret): assume the user chose well rather than guess.
			if value != "" {
				runtimeEnv[name] = value
			}
		}

		j, ours := owned[name]
		switch {
		case inject && ours:
			if c.Env[j].Value != value {
				f.replace = append(f.replace, envEdit{j, value})
			}
		case inject:
			f.add = append(f.add, corev1.EnvVar{Name: name, Value: value})
		case ours:
			f.remove = append(f.remove, j)
		}
		if inject {
			if f.rec.Env == nil {
				f.rec.Env = map[string]string{}
			}
			f.rec.Env[name] = value
		}
	}
	// The marker names exactly the values injected, so the runtime
	// library (gofit/auto) inside treats them as gofit's, not the user's,
	// and follows the limits from there: an in-place resize included.
	j, ours := owned[fit.MarkerVar]
	switch {
	case len(f.rec.Env) > 0:
		mark := marker(f.rec.Env)
		f.rec.Env[fit.MarkerVar] = mark
		switch {
		case !ours:
			// After any entry of the user's: the kubelet passes the
			// last of duplicate names.
			f.add = append(f.add, corev1.EnvVar{Name: fit.MarkerVar, Value: mark})
		case c.Env[j].Value != mark:
			f.replace = append(f.replace, envEdit{j, mark})
		}
	case ours:
		f.remove = append(f.remove, j)
	}
	for _, w := range mistakes(lim, withoutEmpty(runtimeEnv), nonGo, pl) {
		f.warnings = append(f.warnings, fmt.Sprintf("container %q: %s", c.Name, w))
	}
	return f
}

// marker is the value of fit.MarkerVar for the variables injected
// ("GOMAXPROCS=2,GOMEMLIMIT=966367641"), in the order fit writes it;
// TestMarkerIsFits checks that fit reads it back as gofit's.
func marker(env map[string]string) string {
	var parts []string
	for _, name := range []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC"} {
		if v, ok := env[name]; ok {
			parts = append(parts, name+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

// runtimeSees notes a value gofit sets for the warnings' view of the
// container. GOMEMLIMIT is left out: fit then plans it itself, the same
// value, and keeps its warnings about a limit too small for the heap.
func runtimeSees(env map[string]string, name, value string) {
	if name != "GOMEMLIMIT" {
		env[name] = value
	}
}

// allAsIs warns about every container's mistakes without fitting any.
func (m *Mutator) allAsIs(pod *corev1.Pod) []string {
	var out []string
	for _, t := range targets(pod) {
		out = append(out, asIs(pod, t.c, m.pl)...)
	}
	return out
}

// asIs warns about a container's mistakes without fitting it.
func asIs(pod *corev1.Pod, c *corev1.Container, pl planner) []string {
	lim := containerLimits(pod, c)
	known, set := userEnv(pod, c, nil)
	mayFrom := envFromMaySet(c)
	want := plan(lim, 0, pl)
	for _, name := range []string{"GOMAXPROCS", "GOMEMLIMIT"} {
		if (set[name] || mayFrom[name] != "") && known[name] == "" && want.value(name) != "" {
			known[name] = want.value(name)
		}
	}
	var out []string
	for _, w := range mistakes(lim, withoutEmpty(known), 0, pl) {
		out = append(out, fmt.Sprintf("container %q: %s", c.Name, w))
	}
	return out
}

// ownedEnv finds the env entries a previous pass of the webhook added: the
// record names them with their values, and an entry counts only while it
// still has exactly that literal value.
func ownedEnv(c *corev1.Container, prev *podplan.Container) map[string]int {
	owned := map[string]int{}
	if prev == nil {
		return owned
	}
	for name, v := range prev.Env {
		for j := len(c.Env) - 1; j >= 0; j-- {
			e := c.Env[j]
			if e.Name != name {
				continue
			}
			if e.ValueFrom == nil && e.Value == v {
				owned[name] = j
			}
			break // the last entry of a name is the one the container gets
		}
	}
	return owned
}

// userEnv returns the Go variables the container's own env sets: known
// holds the values the webhook can work out (literals, resourceFieldRef),
// set every name the env sets at all. Entries at owned indices are the
// webhook's, not the user's.
func userEnv(pod *corev1.Pod, c *corev1.Container, owned map[string]int) (known map[string]string, set map[string]bool) {
	known, set = map[string]string{}, map[string]bool{}
	skip := map[int]bool{}
	for _, j := range owned {
		skip[j] = true
	}
	for j, e := range c.Env {
		if gv := goVars(); skip[j] || !slices.Contains(gv[:], e.Name) {
			continue
		}
		set[e.Name] = true
		delete(known, e.Name)
		switch {
		case e.ValueFrom == nil:
			known[e.Name] = e.Value
		case e.ValueFrom.ResourceFieldRef != nil:
			if v, ok := resolveResourceRef(pod, c, e.ValueFrom.ResourceFieldRef); ok {
				known[e.Name] = v
			}
		}
	}
	return known, set
}

// envFromMaySet returns, per Go variable, the envFrom source that could
// define it: one without a prefix, or with a prefix the name starts with.
// The webhook does not read ConfigMaps or Secrets (it needs no API access
// to serve), so "could" is all it can know.
func envFromMaySet(c *corev1.Container) map[string]string {
	out := map[string]string{}
	for _, src := range c.EnvFrom {
		var what string
		switch {
		case src.ConfigMapRef != nil:
			what = fmt.Sprintf("configMapRef %q", src.ConfigMapRef.Name)
		case src.SecretRef != nil:
			what = fmt.Sprintf("secretRef %q", src.SecretRef.Name)
		default:
			what = "source"
		}
		for _, v := range goVars() {
			if strings.HasPrefix(v, src.Prefix) && out[v] == "" {
				out[v] = what
			}
		}
	}
	return out
}

// resolveResourceRef works out the value the kubelet gives a
// resourceFieldRef env var (the usual hand-written GOMAXPROCS and
// GOMEMLIMIT): the container's own value divided by the divisor, rounded
// up. Without a limit the kubelet uses the node's allocatable, unknown here.
func resolveResourceRef(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, bool) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		c = findContainer(pod, ref.ContainerName)
		if c == nil {
			return "", false
		}
	}
	var list corev1.ResourceList
	res, ok := strings.CutPrefix(ref.Resource, "limits.")
	if ok {
		list = c.Resources.Limits
	} else if res, ok = strings.CutPrefix(ref.Resource, "requests."); ok {
		list = c.Resources.Requests
	} else {
		return "", false
	}
	q, ok := list[corev1.ResourceName(res)]
	if !ok || q.IsZero() || !qty.Tame(q) {
		return "", false
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	if !qty.Tame(div) {
		return "", false
	}
	switch res {
	case "cpu":
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(div.MilliValue()))), 10), true
	case "memory":
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(div.Value()))), 10), true
	}
	return "", false
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// Bounds on pod-spec quantities. Quantity's int64 accessors wrap or give 0
// past int64, so every figure is compared against its bound first. No
// Linux machine has more CPUs than NR_CPUS allows (8192) or more memory
// than 1 EiB: a limit above either is no limit on any node, and Go's
// runtime sizes itself there better than a figure from the spec would.
var (
	maxCPU    = resource.MustParse("8192")
	maxMemory = resource.MustParse("1Ei")
)

// milliCPU is a CPU quantity in millicores; false for none, zero,
// negative or beyond maxCPU.
func milliCPU(list corev1.ResourceList) (int64, bool) {
	q, ok := list[corev1.ResourceCPU]
	if !ok || q.Sign() <= 0 || !qty.Tame(q) || q.Cmp(maxCPU) > 0 {
		return 0, false
	}
	return q.MilliValue(), q.MilliValue() > 0
}

// memoryBytes is a memory quantity in bytes; false for none, zero,
// negative or beyond maxMemory.
func memoryBytes(list corev1.ResourceList) (int64, bool) {
	q, ok := list[corev1.ResourceMemory]
	if !ok || q.Sign() <= 0 || !qty.Tame(q) || q.Cmp(maxMemory) > 0 {
		return 0, false
	}
	return q.Value(), q.Value() > 0
}

// containerLimits reads a container's limits, tightened by pod-level
// limits (spec.resources) where the pod sets them: the pod cgroup bounds
// every container in it.
func containerLimits(pod *corev1.Pod, c *corev1.Container) limits {
	l := limits{}
	name := fmt.Sprintf("container %s", c.Name)
	if v, ok := milliCPU(c.Resources.Limits); ok {
		l.CPUMilli, l.LeafCPUMilli, l.CPUSource = v, v, name
	}
	if v, ok := milliCPU(c.Resources.Requests); ok {
		l.CPURequestMilli = v
	}
	if v, ok := memoryBytes(c.Resources.Limits); ok {
		l.Memory, l.MemorySource = v, name
	}
	if pr := pod.Spec.Resources; pr != nil {
		if v, ok := milliCPU(pr.Limits); ok && (l.CPUMilli == 0 || v < l.CPUMilli) {
			l.CPUMilli, l.CPUSource = v, "the pod"
		}
		if v, ok := memoryBytes(pr.Limits); ok && (l.Memory == 0 || v < l.Memory) {
			l.Memory, l.MemorySource = v, "the pod"
		}
	}
	return l
}

func withoutEmpty(m map[string]string) map[string]string {
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return m
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// escapePointer escapes a JSON Pointer reference token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

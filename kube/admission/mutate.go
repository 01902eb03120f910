package admission

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// Mutator fits pods. It is pure: a pod in, a patch, a record and warnings
// out. The zero value uses fit's default policy.
type Mutator struct {
	pol fit.Policy
}

// NewMutator returns a Mutator that plans with pol (built and validated by
// fit.New, so that an admission never meets an invalid option).
func NewMutator(pol fit.Policy) *Mutator {
	return &Mutator{pol: pol}
}

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

// Create fits a pod being created. It never fails: what it cannot read it
// leaves alone and says so in a warning.
func (m *Mutator) Create(pod *corev1.Pod) Result {
	var res Result
	var warn []string
	ann := pod.Annotations

	switch v := ann[AnnotationInject]; v {
	case "false":
		res.Outcome = OutcomeSkipped
		for _, t := range targets(pod) {
			res.Warnings = append(res.Warnings, m.asIs(pod, t.c)...)
		}
		return res
	case "", "true":
	default:
		warn = append(warn, fmt.Sprintf("annotation %s=%q: want \"false\" to opt the pod out; fitting it", AnnotationInject, v))
	}

	md, err := parseModes(ann[AnnotationContainers])
	if err == nil {
		err = checkNames(AnnotationContainers, keys(md.byName), pod)
	}
	var nonGo map[string]int64
	if err == nil {
		nonGo, err = parseNonGo(ann[AnnotationNonGoMemory])
	}
	if err == nil {
		err = checkNames(AnnotationNonGoMemory, keys(nonGo), pod)
	}
	if err != nil {
		// A misread choice could freeze a gofit/auto container or leave
		// too little room for non-Go memory: fit nothing, say why.
		res.Outcome = OutcomeSkipped
		res.Warnings = append(warn, fmt.Sprintf("%v; gofit injected nothing", err))
		for _, t := range targets(pod) {
			res.Warnings = append(res.Warnings, m.asIs(pod, t.c)...)
		}
		return res
	}

	var prev *podplan.Record
	if s, ok := ann[AnnotationPlan]; ok {
		if prev, err = podplan.Parse(s); err != nil {
			warn = append(warn, fmt.Sprintf("%v; treating every Go variable in the pod as the user's", err))
		}
	}

	rec := &podplan.Record{Containers: []podplan.Container{}}
	var replaces, removes, adds []PatchOp
	for _, t := range targets(pod) {
		f := m.fitContainer(pod, t.c, md.of(t.c.Name), nonGo[t.c.Name], prev.Container(t.c.Name))
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
	if s, ok := ann[AnnotationPlan]; !ok || s != string(b) {
		if ann == nil {
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
	if pod.Annotations[AnnotationInject] == "false" {
		return res
	}
	var prev *podplan.Record
	if s, ok := pod.Annotations[AnnotationPlan]; ok {
		prev, _ = podplan.Parse(s) // unreadable: nothing is known to be ours
	}
	nonGo, _ := parseNonGo(pod.Annotations[AnnotationNonGoMemory])
	md, _ := parseModes(pod.Annotations[AnnotationContainers])
	var warn []string
	for _, t := range targets(pod) {
		c := t.c
		pr := prev.Container(c.Name)
		if pr == nil || len(pr.Env) == 0 {
			if md.of(c.Name) != ModeAuto {
				warn = append(warn, m.asIs(pod, c)...)
			}
			continue
		}
		lim := containerLimits(pod, c)
		want := plan(lim, nonGo[c.Name], m.pol)
		owned := ownedEnv(c, pr)
		stale := false
		runtimeEnv, _ := userEnv(pod, c, owned)
		for _, name := range sortedKeys(pr.Env) {
			if _, ours := owned[name]; !ours {
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
			warn = append(warn, fmt.Sprintf("container %q: %s=%s was set for the limits at creation (%s); gofit would now set %s, but env vars do not follow a resize: recreate the pod (e.g. kubectl rollout restart) or import github.com/gofit-dev/gofit/auto",
				c.Name, name, pr.Env[name], limitsText(pr.CPU, pr.Memory), now))
		}
		if !stale {
			for _, w := range mistakes(lim, withoutEmpty(runtimeEnv), nonGo[c.Name], m.pol) {
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
func (m *Mutator) fitContainer(pod *corev1.Pod, c *corev1.Container, mode Mode, nonGo int64, prev *podplan.Container) fitted {
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
	want := plan(lim, nonGo, m.pol)
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
	for _, w := range mistakes(lim, withoutEmpty(runtimeEnv), nonGo, m.pol) {
		f.warnings = append(f.warnings, fmt.Sprintf("container %q: %s", c.Name, w))
	}
	return f
}

// runtimeSees notes a value gofit sets for the warnings' view of the
// container. GOMEMLIMIT is left out: fit then plans it itself, the same
// value, and keeps its warnings about a limit too small for the heap.
func runtimeSees(env map[string]string, name, value string) {
	if name != "GOMEMLIMIT" {
		env[name] = value
	}
}

// asIs warns about a container's mistakes without fitting it.
func (m *Mutator) asIs(pod *corev1.Pod, c *corev1.Container) []string {
	lim := containerLimits(pod, c)
	known, set := userEnv(pod, c, nil)
	mayFrom := envFromMaySet(c)
	want := plan(lim, 0, m.pol)
	for _, name := range []string{"GOMAXPROCS", "GOMEMLIMIT"} {
		if (set[name] || mayFrom[name] != "") && known[name] == "" && want.value(name) != "" {
			known[name] = want.value(name)
		}
	}
	var out []string
	for _, w := range mistakes(lim, withoutEmpty(known), 0, m.pol) {
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
	if !ok || q.IsZero() {
		return "", false
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
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

// containerLimits reads a container's limits, tightened by pod-level
// limits (spec.resources) where the pod sets them: the pod cgroup bounds
// every container in it.
func containerLimits(pod *corev1.Pod, c *corev1.Container) limits {
	l := limits{}
	name := fmt.Sprintf("container %s", c.Name)
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok && q.Sign() > 0 {
		l.CPUMilli, l.LeafCPUMilli, l.CPUSource = q.MilliValue(), q.MilliValue(), name
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok && q.Sign() > 0 {
		l.Memory, l.MemorySource = q.Value(), name
	}
	if pr := pod.Spec.Resources; pr != nil {
		if q, ok := pr.Limits[corev1.ResourceCPU]; ok && q.Sign() > 0 && (l.CPUMilli == 0 || q.MilliValue() < l.CPUMilli) {
			l.CPUMilli, l.CPUSource = q.MilliValue(), "the pod"
		}
		if q, ok := pr.Limits[corev1.ResourceMemory]; ok && q.Sign() > 0 && (l.Memory == 0 || q.Value() < l.Memory) {
			l.Memory, l.MemorySource = q.Value(), "the pod"
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

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]string) []string { return keys(m) }

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

package admission

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/kube/internal/qty"
	"github.com/gofit-dev/gofit/kube/podplan"
)

// Annotations the webhook reads and writes on pods.
const (
	// AnnotationInject set to "false" leaves the whole pod alone (warnings
	// about mistakes are still returned).
	AnnotationInject = "gofit.dev/inject"

	// AnnotationContainers chooses per container: a comma-separated list of
	// NAME=MODE, where MODE is env (inject; the default), auto (the binary
	// imports gofit/auto, which follows resizes in-process: inject nothing)
	// or off. NAME "*" sets the default for containers not listed. One list
	// rather than one key per container because a container name (up to 63
	// characters) does not fit in an annotation key's 63-character name.
	AnnotationContainers = "gofit.dev/containers"

	// AnnotationNonGoMemory declares memory a container's cgroup is charged
	// for that the Go heap does not own (cgo, mmapped files, a page cache the
	// service relies on): NAME=QUANTITY,... GOMEMLIMIT then leaves room for it
	// below the limit, as `gofit run` does for what it measures.
	AnnotationNonGoMemory = "gofit.dev/non-go-memory"

	// AnnotationCPURequestFactor opts a pod in to GOMAXPROCS from its CPU
	// request where a container has no CPU limit: max(minimum, ceil(request
	// × factor)) (fit.Options.CPURequestFactor). A factor such as "1" or
	// "1.5", read as GOFIT_CPU_REQUEST_FACTOR is; "off" (or "0") switches
	// off a default the webhook was started with (--cpu-request-factor).
	AnnotationCPURequestFactor = "gofit.dev/cpu-request-factor"

	// AnnotationPlan records what the webhook did and why (JSON,
	// podplan.Record).
	AnnotationPlan = podplan.Annotation
)

// Mode is how the webhook treats one container (podplan owns the record
// it is written in).
type Mode = podplan.Mode

const (
	ModeEnv  = podplan.ModeEnv
	ModeAuto = podplan.ModeAuto
	ModeOff  = podplan.ModeOff
)

// choices are what a pod's annotations ask of the webhook, read in one
// place for Create and Resize alike.
type choices struct {
	optOut bool
	modes  modes
	nonGo  map[string]int64
	pl     planner         // the webhook's, or with the pod's CPU request factor
	prev   *podplan.Record // what an earlier pass recorded; nil when none or unreadable
	// warnings are about annotations read in part; err is an annotation
	// that makes fitting unsafe (a misread mode or non-Go allowance): the
	// pod is then left alone.
	warnings []string
	err      error
}

// readChoices reads AnnotationInject, AnnotationContainers,
// AnnotationNonGoMemory, AnnotationCPURequestFactor and AnnotationPlan.
func readChoices(pod *corev1.Pod, pl planner) choices {
	ann := pod.Annotations
	ch := choices{modes: modes{def: ModeEnv}, pl: pl}
	switch v := ann[AnnotationInject]; v {
	case "false":
		ch.optOut = true
		return ch
	case "", "true":
	default:
		ch.warnings = append(ch.warnings, fmt.Sprintf("annotation %s=%q: want \"false\" to opt the pod out; fitting it", AnnotationInject, v))
	}
	ch.modes, ch.err = parseModes(ann[AnnotationContainers])
	if ch.err == nil {
		ch.err = checkNames(AnnotationContainers, slices.Sorted(maps.Keys(ch.modes.byName)), pod)
	}
	if ch.err == nil {
		ch.nonGo, ch.err = parseNonGo(ann[AnnotationNonGoMemory])
	}
	if ch.err == nil {
		ch.err = checkNames(AnnotationNonGoMemory, slices.Sorted(maps.Keys(ch.nonGo)), pod)
	}
	if v, ok := ann[AnnotationCPURequestFactor]; ok {
		p, err := requestFactor(pl.pol, v)
		if err != nil {
			ch.warnings = append(ch.warnings, fmt.Sprintf("annotation %s: %v; using the webhook's setting", AnnotationCPURequestFactor, err))
		} else {
			ch.pl.pol = p
		}
	}
	if s, ok := ann[AnnotationPlan]; ok {
		prev, err := podplan.Parse(s)
		if err != nil {
			ch.warnings = append(ch.warnings, fmt.Sprintf("%v; treating every Go variable in the pod as the user's", err))
		} else {
			ch.prev = prev
		}
	}
	return ch
}

// requestFactor is pol with the CPU request factor an annotation names,
// read as GOFIT_CPU_REQUEST_FACTOR is (0 is off), and "off" besides.
func requestFactor(pol fit.Policy, v string) (fit.Policy, error) {
	opt := pol.Options()
	if v = strings.TrimSpace(v); v == "off" {
		v = "0"
	}
	if err := opt.Set("GOFIT_CPU_REQUEST_FACTOR", v); err != nil {
		return pol, err
	}
	return fit.New(opt)
}

// parseList splits "a=x, b=y" into pairs, checking names are container
// names (or "*").
func parseList(key, s string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, val, ok := strings.Cut(item, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok || val == "" {
			return nil, fmt.Errorf("annotation %s: %q is not NAME=VALUE", key, item)
		}
		if name != "*" && len(validation.IsDNS1123Label(name)) > 0 {
			return nil, fmt.Errorf("annotation %s: %q is not a container name", key, name)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("annotation %s: container %q listed twice", key, name)
		}
		out[name] = val
	}
	return out, nil
}

// modes reads AnnotationContainers.
type modes struct {
	def    Mode
	byName map[string]Mode
}

func (m modes) of(name string) Mode {
	if v, ok := m.byName[name]; ok {
		return v
	}
	return m.def
}

func parseModes(s string) (modes, error) {
	out := modes{def: ModeEnv, byName: map[string]Mode{}}
	list, err := parseList(AnnotationContainers, s)
	if err != nil {
		return out, err
	}
	for name, v := range list {
		m := Mode(v)
		if m != ModeEnv && m != ModeAuto && m != ModeOff {
			return out, fmt.Errorf("annotation %s: mode %q for %q is not env, auto or off", AnnotationContainers, v, name)
		}
		if name == "*" {
			out.def = m
		} else {
			out.byName[name] = m
		}
	}
	return out, nil
}

// parseNonGo reads AnnotationNonGoMemory into bytes per container.
func parseNonGo(s string) (map[string]int64, error) {
	list, err := parseList(AnnotationNonGoMemory, s)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for name, v := range list {
		q, err := qty.Parse(v)
		if err != nil || q.Sign() < 0 || q.Cmp(maxMemory) > 0 {
			return nil, fmt.Errorf("annotation %s: %q for %q is not a memory quantity up to 1Ei (e.g. 64Mi)", AnnotationNonGoMemory, v, name)
		}
		out[name] = q.Value()
	}
	return out, nil
}

// checkNames reports names in the per-container lists that match no
// container in the pod: almost always a typo that would silently
// inject into a container meant to be left alone.
func checkNames(key string, names []string, pod *corev1.Pod) error {
	known := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		known[c.Name] = true
	}
	for _, c := range pod.Spec.InitContainers {
		known[c.Name] = true
	}
	for _, n := range names {
		if n != "*" && !known[n] {
			return fmt.Errorf("annotation %s names container %q, which the pod does not have", key, n)
		}
	}
	return nil
}

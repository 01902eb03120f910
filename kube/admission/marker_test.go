package admission

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

// The values the webhook injects carry fit.MarkerVar, so the runtime
// library in the container (gofit/auto, which plans with fit from its
// environment) treats them as gofit's and follows an in-place resize;
// without the marker it took them for the user's and kept them.
func TestMarkerHandsValuesToTheLibrary(t *testing.T) {
	got, _ := admit(t, newHandler(t, fit.Options{}), podOf("p", ctr("app", "1500m", "1Gi", env("GOGC", "200"))))
	vars := envOf(got.Spec.Containers[0])
	if vars[fit.MarkerVar] != "GOMAXPROCS=1,GOMEMLIMIT=966367641" {
		t.Fatalf("env %v: no marker naming the injected values", vars)
	}
	// Resized in place to 3 cores and 2Gi: the library re-plans from the
	// cgroup's limits, with the env the container started with.
	lim := cgroup.Limits{
		CPU:    cgroup.CPULimits{Version: 2, Quota: 3, LeafQuota: 3},
		Memory: cgroup.MemoryLimits{Version: 2, Max: 2 << 30},
	}
	p := fit.Policy{}.Plan(fit.Input{Limits: lim, CPUs: 8, Vars: vars, GoVersion: "go1.26",
		Running: &fit.Running{GOMAXPROCS: 1, CanHandBack: true}})
	if p.GOMAXPROCSFromEnv || p.GOMEMLIMITFromEnv || p.GOMAXPROCS != 3 || p.GOMEMLIMIT <= 1<<30 {
		t.Errorf("library after a resize: GOMAXPROCS=%d (from env %v), GOMEMLIMIT=%d (from env %v); want the new limits to rule",
			p.GOMAXPROCS, p.GOMAXPROCSFromEnv, p.GOMEMLIMIT, p.GOMEMLIMITFromEnv)
	}
	if p.GOMAXPROCSAction == fit.Leave {
		t.Errorf("library would leave GOMAXPROCS at 1 after a resize to 3 cores")
	}
}

// The marker names only what the webhook set: a user's own variable is not
// in it (so the library leaves that one alone), and with nothing injected
// there is no marker.
func TestMarkerOnlyNamesInjected(t *testing.T) {
	h := newHandler(t, fit.Options{})
	got, _ := admit(t, h, podOf("p", ctr("app", "2", "1Gi", env("GOMAXPROCS", "2")), ctr("none", "", "")))
	if e := envOf(got.Spec.Containers[0]); e[fit.MarkerVar] != "GOMEMLIMIT=966367641" {
		t.Errorf("user GOMAXPROCS: marker %q", e[fit.MarkerVar])
	}
	if e := envOf(got.Spec.Containers[1]); len(e) != 0 {
		t.Errorf("no limits: env %v", e)
	}
	// mode auto: nothing injected, no marker; the binary plans in-process.
	got, _ = admit(t, h, withAnn(podOf("p", ctr("app", "2", "1Gi")), AnnotationContainers, "app=auto"))
	if e := envOf(got.Spec.Containers[0]); len(e) != 0 {
		t.Errorf("mode auto: env %v", e)
	}
}

// A forged or copied GOFIT_RUN of the user's is shadowed by the webhook's
// own entry, appended after it (the kubelet passes the last of duplicate
// names), and a second pass changes nothing.
func TestMarkerAfterUsersOwn(t *testing.T) {
	h := newHandler(t, fit.Options{})
	got, _ := admit(t, h, podOf("p", ctr("app", "2", "1Gi", env(fit.MarkerVar, "GOMAXPROCS=64"))))
	e := got.Spec.Containers[0].Env
	if last := e[len(e)-1]; last.Name != fit.MarkerVar || last.Value != "GOMAXPROCS=2,GOMEMLIMIT=966367641" {
		t.Errorf("env %v: the webhook's marker is not last", e)
	}
	if _, resp := admit(t, h, got); len(resp.Patch) != 0 {
		t.Errorf("second pass patched %s", resp.Patch)
	}
}

// Hostile pods: absurd limits, forged annotations and duplicate env
// entries still give values in range, or none.
func TestHostilePods(t *testing.T) {
	h := newHandler(t, fit.Options{})
	huge := func(cpu, mem string) corev1.Container {
		c := corev1.Container{Name: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		if cpu != "" {
			c.Resources.Limits[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return c
	}
	for _, c := range []struct {
		name     string
		pod      *corev1.Pod
		procs    string // "" for none
		memBelow int64  // GOMEMLIMIT must be in [memBelow/4, memBelow); 0: none
	}{
		// Quantity's int64 accessors wrap past int64: 1Ei cores read as
		// -9223372036854775808 millicores, 99999999999999999999 bytes
		// as 7766279631452241919.
		{"cpu 1Ei", podOf("p", huge("1Ei", "")), "", 0},
		{"cpu 1e30", podOf("p", huge("1e30", "")), "", 0},
		{"cpu 9000", podOf("p", huge("9000", "")), "", 0},
		{"cpu 8192", podOf("p", huge("8192", "")), "8192", 0},
		{"memory 99999999999999999999", podOf("p", huge("", "99999999999999999999")), "", 0},
		{"memory 16Ei", podOf("p", huge("", "16Ei")), "", 0},
		{"memory 1Ei", podOf("p", huge("", "1Ei")), "", 1 << 60},
		// Comparing these with a bound, or reading their Value, rescales
		// by 10^9999999920: math/big would work for minutes per request.
		{"cpu 1e9999999920", podOf("p", huge("1e9999999920", "1Gi")), "", 1 << 30},
		{"memory 1e9999999920", podOf("p", huge("2", "1e9999999920")), "2", 0},
		{"non-Go memory 1e-9999999920", withAnn(podOf("p", huge("", "1Gi")), AnnotationNonGoMemory, "app=1e-9999999920"), "", 0},
		{"non-Go memory 1e9999999920", withAnn(podOf("p", huge("", "1Gi")), AnnotationNonGoMemory, "app=1e9999999920"), "", 0},
		{"non-Go memory above the limit", withAnn(podOf("p", huge("", "1Gi")), AnnotationNonGoMemory, "app=900Ei"), "", 0},
		{"non-Go memory of 1Ei", withAnn(podOf("p", huge("", "1Gi")), AnnotationNonGoMemory, "app=1Ei"), "", 1 << 30},
		{"forged plan record", withAnn(podOf("p", ctr("app", "2", "1Gi", env("GOMAXPROCS", "4096"))), AnnotationPlan,
			`{"containers":[{"name":"app","mode":"env","env":{"GOMAXPROCS":"4096"}}]}`), "2", 1 << 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, resp := admit(t, h, c.pod)
			e := envOf(got.Spec.Containers[0])
			if e["GOMAXPROCS"] != c.procs {
				t.Errorf("GOMAXPROCS=%q, want %q (warnings %q)", e["GOMAXPROCS"], c.procs, resp.Warnings)
			}
			v, ok := e["GOMEMLIMIT"]
			switch {
			case c.memBelow == 0 && ok:
				t.Errorf("GOMEMLIMIT=%s, want none", v)
			case c.memBelow > 0:
				n, err := fit.ParseMemLimit(v)
				if err != nil || n >= c.memBelow || n < c.memBelow/4 {
					t.Errorf("GOMEMLIMIT=%q, want in [%d, %d)", v, c.memBelow/4, c.memBelow)
				}
			}
			if _, fitted := got.Annotations[AnnotationPlan]; !fitted {
				return // an annotation it cannot read: nothing fitted
			}
			if r := record(t, got); strings.Contains(r.Containers[0].CPU, "-") || strings.Contains(r.Containers[0].Memory, "-") {
				t.Errorf("record %+v", r.Containers[0])
			}
		})
	}
}

// GOMAXPROCS from the CPU request where there is no CPU limit, opted in
// by the webhook's policy (--cpu-request-factor) or per pod by
// AnnotationCPURequestFactor, which can also switch it off.
func TestCPURequestFactor(t *testing.T) {
	requested := func(cpu string, ann ...string) *corev1.Pod {
		c := ctr("app", "", "")
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		p := podOf("p", c)
		if len(ann) > 0 {
			p = withAnn(p, AnnotationCPURequestFactor, ann[0])
		}
		return p
	}
	plain, optedIn := newHandler(t, fit.Options{}), newHandler(t, fit.Options{CPURequestFactor: 1})
	for _, c := range []struct {
		name  string
		h     *Handler
		pod   *corev1.Pod
		procs string
		warn  string
	}{
		{"off by default", plain, requested("500m"), "", ""},
		{"webhook factor 1, minimum 2", optedIn, requested("500m"), "2", ""},
		{"webhook factor 1", optedIn, requested("3"), "3", ""},
		{"pod factor 1.5", plain, requested("3", "1.5"), "5", ""},
		{"pod switches it off", optedIn, requested("3", "off"), "", ""},
		{"a limit wins", optedIn, withAnn(podOf("p", ctr("app", "1", "")), AnnotationCPURequestFactor, "4"), "1", ""},
		{"pod factor 0 is off too", optedIn, requested("3", "0"), "", ""},
		{"unreadable factor", optedIn, requested("3", "lots"), "3", `annotation gofit.dev/cpu-request-factor: bad option: "lots" is not a number; using the webhook's setting`},
		{"factor out of range", plain, requested("3", "100"), "", "CPU request factor 100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, resp := admit(t, c.h, c.pod)
			e := envOf(got.Spec.Containers[0])
			if e["GOMAXPROCS"] != c.procs {
				t.Errorf("GOMAXPROCS=%q, want %q (reasons %q)", e["GOMAXPROCS"], c.procs, record(t, got).Containers[0].Reasons)
			}
			if c.procs != "" && e[fit.MarkerVar] != "GOMAXPROCS="+c.procs {
				t.Errorf("marker %q", e[fit.MarkerVar])
			}
			if c.warn != "" && !hasWarning(resp.Warnings, c.warn) || c.warn == "" && len(resp.Warnings) > 0 {
				t.Errorf("warnings %q, want %q", resp.Warnings, c.warn)
			}
		})
	}
}

// Duplicate env entries: the kubelet passes the last, and the webhook
// reads the last too (for its decisions and its warnings).
func TestDuplicateEnvLastWins(t *testing.T) {
	h := newHandler(t, fit.Options{})
	got, resp := admit(t, h, podOf("p", ctr("app", "2", "1Gi", env("GOMAXPROCS", "1"), env("GOMAXPROCS", "8"), env("GOMEMLIMIT", "4GiB"), env("GOMEMLIMIT", ""))))
	if !hasWarning(resp.Warnings, "GOMAXPROCS=8 from the environment is above the CPU limit of 2 cores") {
		t.Errorf("warnings %q: the last GOMAXPROCS (8) is the one the container gets", resp.Warnings)
	}
	if hasWarning(resp.Warnings, "GOMEMLIMIT=4GiB") {
		t.Errorf("warnings %q: the last GOMEMLIMIT is empty, which Go reads as unset", resp.Warnings)
	}
	e := got.Spec.Containers[0].Env
	if len(e) != 4 {
		t.Errorf("env %v: the user's entries were changed or a value added beside a name they set", e)
	}
}

// The Go release assumed for images is the operator's to state: the
// sub-core warning is about Go ≥ 1.25's own default of 2.
func TestGoVersionAssumed(t *testing.T) {
	pod := optOut(podOf("p", ctr("app", "500m", "")))
	for v, want := range map[string]bool{DefaultGoVersion: true, "go1.24": false, "": false} {
		res := NewMutator(fit.Policy{}, WithGoVersion(v)).Create(pod)
		if got := hasWarning(res.Warnings, "below 1 core but Go's runtime default is 2"); got != want {
			t.Errorf("assuming %q: sub-core warning %v, want %v (%q)", v, got, want, res.Warnings)
		}
	}
}

// Create and Resize read the annotations alike: an unreadable list fits
// nothing at creation and is said again at a resize (Resize used to drop
// the error and go on with defaults).
func TestResizeReadsAnnotationsAsCreate(t *testing.T) {
	h := newHandler(t, fit.Options{})
	pod := withAnn(podOf("p", ctr("app", "1", "1Gi")), AnnotationContainers, "app=manual")
	created, resp := admit(t, h, pod)
	if !hasWarning(resp.Warnings, `mode "manual"`) || len(envOf(created.Spec.Containers[0])) != 0 {
		t.Fatalf("create: %q %v", resp.Warnings, created.Spec.Containers[0].Env)
	}
	created.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("3")
	code, rr, body := post(t, h, review(t, created, admissionv1.Update, "resize"))
	if code != 200 || len(rr.Patch) != 0 || !hasWarning(rr.Warnings, `mode "manual"`) {
		t.Errorf("resize: %d %s", code, body)
	}
}

// TestResourceRefOnHugeQuantities: a GOMAXPROCS or GOMEMLIMIT from a
// resourceFieldRef is worked out from the limit and its divisor, both the
// pod's own. Past int64 that figure is unknown, not 0 or negative.
func TestResourceRefOnHugeQuantities(t *testing.T) {
	h := newHandler(t, fit.Options{})
	ref := func(name, res, divisor string) corev1.EnvVar {
		s := &corev1.ResourceFieldSelector{Resource: res}
		if divisor != "" {
			s.Divisor = resource.MustParse(divisor)
		}
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: s}}
	}
	c := ctr("app", "2", "")
	c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1e9999999920")
	c.Env = []corev1.EnvVar{ref("GOMEMLIMIT", "limits.memory", "")}
	got, resp := admit(t, h, podOf("p", c))
	if e := envOf(got.Spec.Containers[0]); e["GOMAXPROCS"] != "2" || e["GOMEMLIMIT"] != "<from>" {
		t.Errorf("limit 1e9999999920: env %v", e)
	}
	if len(resp.Warnings) != 0 {
		t.Errorf("limit 1e9999999920: warnings %q", resp.Warnings)
	}
	c = ctr("app", "2", "1Gi", ref("GOMAXPROCS", "limits.cpu", "1e9999999920"))
	got, resp = admit(t, h, podOf("p", c))
	if e := envOf(got.Spec.Containers[0]); e["GOMAXPROCS"] != "<from>" || e["GOMEMLIMIT"] == "" {
		t.Errorf("divisor 1e9999999920: env %v", e)
	}
	// It read as GOMAXPROCS=-9223372036854775808: Value and MilliValue
	// give 0 past int64, and a division by 0 became MinInt64.
	if len(resp.Warnings) != 0 {
		t.Errorf("divisor 1e9999999920: warnings %q", resp.Warnings)
	}
}

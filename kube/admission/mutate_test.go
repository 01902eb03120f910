package admission

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gofit-dev/gofit/fit"
)

func TestQuantities(t *testing.T) {
	cases := []struct {
		cpu, mem string
		ceil     bool
		want     map[string]string
	}{
		{cpu: "250m", want: map[string]string{"GOMAXPROCS": "1", "GOFIT_RUN": "GOMAXPROCS=1"}},
		{cpu: "1.5", want: map[string]string{"GOMAXPROCS": "1", "GOFIT_RUN": "GOMAXPROCS=1"}},
		{cpu: "1.5", ceil: true, want: map[string]string{"GOMAXPROCS": "2", "GOFIT_RUN": "GOMAXPROCS=2"}},
		{cpu: "2000m", want: map[string]string{"GOMAXPROCS": "2", "GOFIT_RUN": "GOMAXPROCS=2"}},
		{cpu: "3", want: map[string]string{"GOMAXPROCS": "3", "GOFIT_RUN": "GOMAXPROCS=3"}},
		// More cores than this machine has: the pod's limit alone decides.
		{cpu: "64", want: map[string]string{"GOMAXPROCS": "64", "GOFIT_RUN": "GOMAXPROCS=64"}},
		{mem: "1e9", want: map[string]string{"GOMEMLIMIT": "900000000", "GOFIT_RUN": "GOMEMLIMIT=900000000"}},
		// 123 MiB without a non-go-memory annotation: the ratio (issue 15).
		{mem: "128974848", want: map[string]string{"GOMEMLIMIT": "116077363", "GOFIT_RUN": "GOMEMLIMIT=116077363"}},
		{mem: "1Gi", want: map[string]string{"GOMEMLIMIT": "966367641", "GOFIT_RUN": "GOMEMLIMIT=966367641"}},
		{mem: "1G", want: map[string]string{"GOMEMLIMIT": "900000000", "GOFIT_RUN": "GOMEMLIMIT=900000000"}},
		{cpu: "250m", mem: "512Mi", want: map[string]string{"GOMAXPROCS": "1", "GOMEMLIMIT": "483183820", "GOFIT_RUN": "GOMAXPROCS=1,GOMEMLIMIT=483183820"}},
		{want: map[string]string{}}, // no limit, no variable
	}
	for _, c := range cases {
		t.Run(c.cpu+"/"+c.mem, func(t *testing.T) {
			h := newHandler(t, fit.Options{Rounding: rounding(c.ceil)})
			got, resp := admit(t, h, podOf("p", ctr("app", c.cpu, c.mem)))
			if e := envOf(got.Spec.Containers[0]); !reflect.DeepEqual(e, c.want) {
				t.Errorf("env %v, want %v", e, c.want)
			}
			if len(resp.Warnings) > 0 {
				t.Errorf("warnings %q", resp.Warnings)
			}
			rec := record(t, got)
			if len(rec.Containers) != 1 || len(rec.Containers[0].Reasons) == 0 {
				t.Errorf("record %+v", rec)
			}
		})
	}
}

func rounding(ceil bool) fit.Rounding {
	if ceil {
		return fit.Ceil
	}
	return fit.Floor
}

func TestMemoryRatioAndNonGo(t *testing.T) {
	h := newHandler(t, fit.Options{MemoryRatio: 0.8})
	got, _ := admit(t, h, podOf("p", ctr("app", "", "1000M")))
	if v := envOf(got.Spec.Containers[0])["GOMEMLIMIT"]; v != "800000000" {
		t.Errorf("ratio 0.8 of 1000M: GOMEMLIMIT=%s", v)
	}

	// 1Gi less 200Mi declared non-Go memory and a 1/32 margin: 792Mi.
	p := podOf("p", ctr("app", "", "1Gi"), ctr("other", "", "1Gi"))
	p.Annotations = map[string]string{AnnotationNonGoMemory: "app=200Mi"}
	got, _ = admit(t, newHandler(t, fit.Options{}), p)
	if v := envOf(got.Spec.Containers[0])["GOMEMLIMIT"]; v != "830472192" {
		t.Errorf("non-Go 200Mi of 1Gi: GOMEMLIMIT=%s, want 830472192", v)
	}
	if v := envOf(got.Spec.Containers[1])["GOMEMLIMIT"]; v != "966367641" {
		t.Errorf("other container: GOMEMLIMIT=%s", v)
	}
	// The floor: never below a quarter of the limit.
	p = podOf("p", ctr("app", "", "1Gi"))
	p.Annotations = map[string]string{AnnotationNonGoMemory: "app=1000Mi"}
	got, resp := admit(t, newHandler(t, fit.Options{}), p)
	if v := envOf(got.Spec.Containers[0])["GOMEMLIMIT"]; v != "268435456" {
		t.Errorf("non-Go 1000Mi of 1Gi: GOMEMLIMIT=%s, want a quarter", v)
	}
	if !hasWarning(resp.Warnings, "little for the Go heap") {
		t.Errorf("warnings %q", resp.Warnings)
	}
}

func TestInitContainersAndSidecars(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := podOf("p", ctr("app", "2", "1Gi"))
	p.Spec.InitContainers = []corev1.Container{ctr("migrate", "1", "256Mi"), ctr("proxy", "500m", "128Mi")}
	p.Spec.InitContainers[1].RestartPolicy = &always
	got, _ := admit(t, newHandler(t, fit.Options{}), p)
	if e := envOf(got.Spec.InitContainers[0]); len(e) != 0 {
		t.Errorf("run-to-completion init container got %v", e)
	}
	if e := envOf(got.Spec.InitContainers[1]); e["GOMAXPROCS"] != "1" || e["GOMEMLIMIT"] != "120795955" {
		t.Errorf("sidecar env %v", e)
	}
	if e := envOf(got.Spec.Containers[0]); e["GOMAXPROCS"] != "2" || e["GOMEMLIMIT"] != "966367641" {
		t.Errorf("app env %v", e)
	}
	if n := len(record(t, got).Containers); n != 2 {
		t.Errorf("record has %d containers, want the sidecar and app", n)
	}
}

func TestUserEnvIsTheirs(t *testing.T) {
	h := newHandler(t, fit.Options{})
	// A user GOMAXPROCS does not stop GOMEMLIMIT, and is never overwritten.
	got, resp := admit(t, h, podOf("p", ctr("app", "2", "1Gi", env("FOO", "1"), env("GOMAXPROCS", "8"))))
	e := envOf(got.Spec.Containers[0])
	if e["GOMAXPROCS"] != "8" || e["GOMEMLIMIT"] != "966367641" || e["FOO"] != "1" {
		t.Errorf("env %v", e)
	}
	if !hasWarning(resp.Warnings, `container "app": GOMAXPROCS=8 from the environment is above the CPU limit`) {
		t.Errorf("no above-limit warning: %q", resp.Warnings)
	}
	if got.Spec.Containers[0].Env[0].Name != "FOO" || got.Spec.Containers[0].Env[1].Name != "GOMAXPROCS" {
		t.Errorf("user env reordered: %v", got.Spec.Containers[0].Env)
	}

	// The usual hand-written YAML: GOMEMLIMIT from limits.memory is 100%.
	ref := corev1.EnvVar{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}}
	got, resp = admit(t, h, podOf("p", ctr("app", "500m", "1Gi", ref)))
	e = envOf(got.Spec.Containers[0])
	if e["GOMEMLIMIT"] != "<from>" || e["GOMAXPROCS"] != "1" {
		t.Errorf("env %v", e)
	}
	if !hasWarning(resp.Warnings, "GOMEMLIMIT=1073741824 from the environment is at or above the memory limit") {
		t.Errorf("no at-limit warning: %q", resp.Warnings)
	}

	// envFrom without a prefix may set anything: leave both alone.
	c := ctr("app", "2", "1Gi")
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	got, _ = admit(t, h, podOf("p", c))
	if e := envOf(got.Spec.Containers[0]); len(e) != 0 {
		t.Errorf("envFrom without prefix: env %v", e)
	}
	if r := record(t, got).Containers[0].Reasons; !hasWarning(r, `envFrom configMapRef "cfg" may set it`) {
		t.Errorf("reasons %q", r)
	}
	// A prefix that no Go variable starts with cannot set them.
	c.EnvFrom[0].Prefix = "APP_"
	got, _ = admit(t, h, podOf("p", c))
	if e := envOf(got.Spec.Containers[0]); e["GOMAXPROCS"] != "2" || e["GOMEMLIMIT"] == "" {
		t.Errorf("envFrom APP_: env %v", e)
	}
	// "GO" could give GOMAXPROCS from a key MAXPROCS.
	c.EnvFrom[0].Prefix = "GO"
	c.EnvFrom[0].ConfigMapRef = nil
	c.EnvFrom[0].SecretRef = &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}
	got, _ = admit(t, h, podOf("p", c))
	if e := envOf(got.Spec.Containers[0]); len(e) != 0 {
		t.Errorf("envFrom GO: env %v", e)
	}
}

func TestWarnings(t *testing.T) {
	h := newHandler(t, fit.Options{})
	cases := []struct {
		name string
		pod  *corev1.Pod
		want string // "" means no warning at all
	}{
		{"GOGC off without memory limit", podOf("p", ctr("app", "1", "", env("GOGC", "off"))), "GOGC=off without GOMEMLIMIT"},
		{"GOGC off with a limit is fine", podOf("p", ctr("app", "1", "1Gi", env("GOGC", "off"))), ""},
		{"GOMEMLIMIT at the limit", podOf("p", ctr("app", "", "1Gi", env("GOMEMLIMIT", "1GiB"))), "at or above the memory limit"},
		{"GOMEMLIMIT below the limit", podOf("p", ctr("app", "", "1Gi", env("GOMEMLIMIT", "900MiB"))), ""},
		{"sub-core, injected: no warning", podOf("p", ctr("app", "500m", "")), ""},
		{"sub-core, opted out", optOut(podOf("p", ctr("app", "500m", ""))), "below 1 core but Go's runtime default is 2"},
		{"sub-core, mode off", withAnn(podOf("p", ctr("app", "500m", "")), AnnotationContainers, "app=off"), "below 1 core"},
		{"sub-core, mode auto: the library fixes it", withAnn(podOf("p", ctr("app", "500m", "")), AnnotationContainers, "app=auto"), ""},
		{"sub-core, GODEBUG containermaxprocs=0", optOut(podOf("p", ctr("app", "500m", "", env("GODEBUG", "containermaxprocs=0")))), ""},
		{"user GOMAXPROCS above, opted out", optOut(podOf("p", ctr("app", "1", "", env("GOMAXPROCS", "4")))), "above the CPU limit"},
		{"malformed GOMEMLIMIT", podOf("p", ctr("app", "", "1Gi", env("GOMEMLIMIT", "lots"))), "refuses to start"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, resp := admit(t, h, c.pod)
			if c.want == "" && len(resp.Warnings) > 0 || c.want != "" && !hasWarning(resp.Warnings, c.want) {
				t.Errorf("warnings %q, want %q", resp.Warnings, c.want)
			}
			for _, w := range resp.Warnings {
				if !strings.HasPrefix(w, `container "app": `) {
					t.Errorf("warning does not name the container: %q", w)
				}
				if len(w) > 256 {
					t.Errorf("warning over 256 characters (the API server may truncate): %q", w)
				}
			}
		})
	}
}

func TestOptOutAndModes(t *testing.T) {
	h := newHandler(t, fit.Options{})
	p := optOut(podOf("p", ctr("app", "2", "1Gi")))
	got, resp := admit(t, h, p)
	if len(resp.Patch) != 0 || len(envOf(got.Spec.Containers[0])) != 0 {
		t.Errorf("opted-out pod patched: %s", resp.Patch)
	}

	p = withAnn(podOf("p", ctr("app", "2", "1Gi"), ctr("auto", "2", "1Gi"), ctr("proxy", "1", "64Mi")), AnnotationContainers, "auto=auto, proxy=off")
	got, _ = admit(t, h, p)
	if e := envOf(got.Spec.Containers[0]); len(e) != 3 || e[fit.MarkerVar] != "GOMAXPROCS=2,GOMEMLIMIT=966367641" {
		t.Errorf("app env %v", e)
	}
	for _, i := range []int{1, 2} {
		if e := envOf(got.Spec.Containers[i]); len(e) != 0 {
			t.Errorf("%s env %v", got.Spec.Containers[i].Name, e)
		}
	}
	rec := record(t, got)
	if rec.Containers[1].Mode != ModeAuto || rec.Containers[2].Mode != ModeOff || rec.Containers[0].Mode != ModeEnv {
		t.Errorf("record modes %+v", rec)
	}

	// "*" sets the default.
	got, _ = admit(t, h, withAnn(podOf("p", ctr("app", "2", "1Gi"), ctr("b", "2", "1Gi")), AnnotationContainers, "*=off,b=env"))
	if len(envOf(got.Spec.Containers[0])) != 0 || len(envOf(got.Spec.Containers[1])) != 3 {
		t.Errorf("*=off,b=env: %v %v", got.Spec.Containers[0].Env, got.Spec.Containers[1].Env)
	}

	// A choice the webhook cannot read fits nothing, and says why.
	for _, bad := range []struct{ key, val, want string }{
		{AnnotationContainers, "app=manual", `mode "manual"`},
		{AnnotationContainers, "app", `"app" is not NAME=VALUE`},
		{AnnotationContainers, "ap=auto", `names container "ap"`},
		{AnnotationNonGoMemory, "app=lots", `"lots" for "app" is not a memory quantity`},
	} {
		got, resp := admit(t, h, withAnn(podOf("p", ctr("app", "2", "1Gi")), bad.key, bad.val))
		if len(resp.Patch) != 0 || len(got.Spec.Containers[0].Env) != 0 {
			t.Errorf("%s=%s: patched %s", bad.key, bad.val, resp.Patch)
		}
		if !hasWarning(resp.Warnings, bad.want) || !hasWarning(resp.Warnings, "injected nothing") {
			t.Errorf("%s=%s: warnings %q", bad.key, bad.val, resp.Warnings)
		}
	}
}

// TestMirrorPod: the webhook patched mirror pods, whose static container
// never sees the env (the kubelet runs the manifest on disk); the plan
// annotation then claimed values the container did not run with.
func TestMirrorPod(t *testing.T) {
	p := withAnn(podOf("etcd-node-a", ctr("etcd", "2", "1Gi")), "kubernetes.io/config.mirror", "0f3c9a1e5b7d4c2a8e6f1b3d5a7c9e1f")
	got, resp := admit(t, newHandler(t, fit.Options{}), p)
	if len(resp.Patch) != 0 || len(envOf(got.Spec.Containers[0])) != 0 {
		t.Errorf("mirror pod patched: %s", resp.Patch)
	}
}

func TestPodLevelLimits(t *testing.T) {
	p := podOf("p", ctr("app", "", ""), ctr("small", "500m", "256Mi"))
	p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}}
	got, _ := admit(t, newHandler(t, fit.Options{}), p)
	if e := envOf(got.Spec.Containers[0]); e["GOMAXPROCS"] != "2" || e["GOMEMLIMIT"] != "966367641" {
		t.Errorf("pod-level limits only: %v", e)
	}
	if e := envOf(got.Spec.Containers[1]); e["GOMAXPROCS"] != "1" || e["GOMEMLIMIT"] != "241591910" {
		t.Errorf("container tighter than the pod: %v", e)
	}
}

func TestIdempotent(t *testing.T) {
	h := newHandler(t, fit.Options{})
	always := corev1.ContainerRestartPolicyAlways
	p := podOf("p", ctr("app", "1500m", "1Gi", env("A", "1")), ctr("bare", "", ""), ctr("user", "2", "1Gi", env("GOMAXPROCS", "2")))
	p.Spec.InitContainers = []corev1.Container{ctr("proxy", "250m", "64Mi")}
	p.Spec.InitContainers[0].RestartPolicy = &always
	p.Annotations = map[string]string{"other": "x"}
	once, resp := admit(t, h, p)
	if len(resp.Patch) == 0 {
		t.Fatal("first pass changed nothing")
	}
	twice, resp := admit(t, h, once)
	if len(resp.Patch) != 0 {
		t.Fatalf("second pass patched: %s", resp.Patch)
	}
	if !reflect.DeepEqual(once, twice) {
		t.Fatal("second pass changed the pod")
	}

	// A reinvocation after another webhook raised a limit updates the
	// value it added, and only that.
	once.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("3")
	again, resp := admit(t, h, once)
	if e := envOf(again.Spec.Containers[0]); e["GOMAXPROCS"] != "3" || e["A"] != "1" || e[fit.MarkerVar] != "GOMAXPROCS=3,GOMEMLIMIT=966367641" || len(again.Spec.Containers[0].Env) != 4 {
		t.Errorf("after a limit change: %v (patch %s)", again.Spec.Containers[0].Env, resp.Patch)
	}
	// ...and a value the user changed afterwards is theirs.
	once.Spec.Containers[0].Env[1].Value = "7"
	again, _ = admit(t, h, once)
	if e := envOf(again.Spec.Containers[0]); e["GOMAXPROCS"] != "7" {
		t.Errorf("user value overwritten: %v", e)
	}
}

func TestResize(t *testing.T) {
	h := newHandler(t, fit.Options{})
	created, _ := admit(t, h, podOf("p", ctr("app", "1500m", "1Gi"), ctr("auto", "1", "1Gi")))

	resize := func(pod *corev1.Pod) *admissionv1.AdmissionResponse {
		code, resp, body := post(t, h, review(t, pod, admissionv1.Update, "resize"))
		if code != 200 || !resp.Allowed || len(resp.Patch) != 0 {
			t.Fatalf("resize: %d %s", code, body)
		}
		return resp
	}
	// Same plan (1.5 → 1.9 cores is still GOMAXPROCS=1): no warning.
	same := created.DeepCopy()
	same.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1900m")
	if w := resize(same).Warnings; len(w) != 0 {
		t.Errorf("resize within the plan warned: %q", w)
	}
	up := created.DeepCopy()
	up.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("4")
	up.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
	w := resize(up).Warnings
	if !hasWarning(w, `container "app": GOMAXPROCS=1 was set for the limits at creation (cpu 1500m, memory 1Gi); gofit would now set 4`) ||
		!hasWarning(w, "GOMEMLIMIT=966367641 was set") || !hasWarning(w, "until the pod is recreated") || !hasWarning(w, "gofit/auto") {
		t.Errorf("resize warnings %q", w)
	}
	for _, s := range w {
		if strings.Contains(s, `"auto"`) {
			t.Errorf("warned about an untouched container: %q", s)
		}
	}
}

func hasWarning(ws []string, sub string) bool {
	for _, w := range ws {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

func optOut(p *corev1.Pod) *corev1.Pod { return withAnn(p, AnnotationInject, "false") }

func withAnn(p *corev1.Pod, k, v string) *corev1.Pod {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

func TestRecordIsJSON(t *testing.T) {
	got, _ := admit(t, newHandler(t, fit.Options{}), podOf("p", ctr("app", "250m", "1Gi")))
	var r map[string]any
	if err := json.Unmarshal([]byte(got.Annotations[AnnotationPlan]), &r); err != nil {
		t.Fatal(err)
	}
	c := record(t, got).Containers[0]
	if c.CPU != "250m" || c.Memory != "1Gi" || c.Env["GOMAXPROCS"] != "1" || c.Env["GOMEMLIMIT"] != "966367641" {
		t.Errorf("record %+v", c)
	}
	if !hasWarning(c.Reasons, "GOMAXPROCS=1: CPU limit 0.25 cores") ||
		!hasWarning(c.Reasons, "GOMEMLIMIT=") {
		t.Errorf("reasons %q", c.Reasons)
	}
}

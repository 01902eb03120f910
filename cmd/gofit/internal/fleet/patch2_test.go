package fleet

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

func unfittedResults(t testing.TB, w Workload) *Results {
	t.Helper()
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.1, wave: 0.03, throttled: 0.3, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 4, gomemlimit: math.MaxInt64, gogc: 100,
		req: Resources{0.25, 256 * mib}, lim: Resources{0.25, 256 * mib}}
	in := input(week, step, s.pod("web-1", week, step))
	in.Groups[0].Workload = w
	r := Analyze(in, Options{})
	if !r.Containers[0].Gofit.Enough() {
		t.Fatalf("no figures: %q", r.Containers[0].Gofit.Missing)
	}
	return r
}

// applyPatch applies a patch file's body to obj (a typed object) with
// the API server's strategic merge.
func applyPatch(t *testing.T, p Patch, obj any, into any) {
	t.Helper()
	orig, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSON(p.Body)
	if err != nil {
		t.Fatalf("%s: %v", p.File, err)
	}
	out, err := strategicpatch.StrategicMergePatch(orig, patch, obj)
	if err != nil {
		t.Fatalf("%s: %v", p.File, err)
	}
	if err := json.Unmarshal(out, into); err != nil {
		t.Fatal(err)
	}
}

// checkEnv: the API server refuses an env var with both a value and a
// valueFrom ("may not be specified when `value` is not empty").
func checkEnv(t *testing.T, file string, env []corev1.EnvVar) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, e := range env {
		if e.Value != "" && e.ValueFrom != nil {
			t.Errorf("%s: env %s has a value %q and a valueFrom: the API server rejects it", file, e.Name, e.Value)
		}
		m[e.Name] = e.Value
	}
	return m
}

// TestPatchReplacesValueFrom: a container whose GOMEMLIMIT and GOGC come
// from valueFrom gets the plan's values in their place.
func TestPatchReplacesValueFrom(t *testing.T) {
	r := unfittedResults(t, Workload{Namespace: "shop", Kind: "Deployment", Name: "web"})
	ps, _, err := Patches(r)
	if err != nil {
		t.Fatal(err)
	}
	d := appsv1.Deployment{}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "web:1", Env: []corev1.EnvVar{
		{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
		{Name: "GOGC", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "go"}, Key: "gogc"}}},
		{Name: "GOMAXPROCS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
	}}}
	g := r.Containers[0].Gofit
	for _, p := range ps {
		var got appsv1.Deployment
		applyPatch(t, p, d, &got)
		env := checkEnv(t, p.File, got.Spec.Template.Spec.Containers[0].Env)
		if p.Mode == "env" && (env["GOMEMLIMIT"] != g.Env["GOMEMLIMIT"] || env["GOMAXPROCS"] != "1") {
			t.Errorf("%s: env %v, want the plan's %v", p.File, env, g.Env)
		}
	}
}

// TestPatchesJobs: a CronJob's pods are patched through its jobTemplate;
// a bare Job, whose pod template is immutable, gets no patch and a reason.
func TestPatchesJobs(t *testing.T) {
	r := unfittedResults(t, Workload{Namespace: "batch", Kind: "CronJob", Name: "report"})
	job := unfittedResults(t, Workload{Namespace: "batch", Kind: "Job", Name: "once"})
	r.Containers = append(r.Containers, job.Containers...)
	ps, skipped, err := Patches(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("%d patches, want the CronJob's two: %+v", len(ps), ps)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "batch/Job/once") || !strings.Contains(skipped[0], "immutable") {
		t.Errorf("skipped %q, want the Job named with the reason", skipped)
	}
	cj := batchv1.CronJob{}
	cj.Spec.Schedule = "@daily"
	cj.Spec.JobTemplate.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "report:1"}}
	g := r.Containers[0].Gofit
	for _, p := range ps {
		if !strings.Contains(string(p.Body), "kubectl patch cronjob report -n batch") {
			t.Errorf("%s: header\n%s", p.File, p.Body)
		}
		var got batchv1.CronJob
		applyPatch(t, p, cj, &got)
		c := got.Spec.JobTemplate.Spec.Template.Spec.Containers
		if len(c) != 1 || c[0].Image != "report:1" || c[0].Resources.Limits.Memory().Value() != int64(float64(g.Memory)) {
			t.Errorf("%s: containers %+v", p.File, c)
		}
	}
}

var kubectlLine = regexp.MustCompile(`^# kubectl patch [a-z]+ [a-z0-9.-]+ -n [a-z0-9-]+ --type strategic --patch-file [A-Za-z0-9%._-]+$`)

// checkPatchFiles: every file name is one plain element, the header is
// two comment lines whatever the labels held, the kubectl line is plain
// names, and the body is YAML.
func checkPatchFiles(t *testing.T, ps []Patch) {
	t.Helper()
	for _, p := range ps {
		if !filepath.IsLocal(p.File) || strings.ContainsAny(p.File, `/\`) || strings.HasPrefix(p.File, ".") {
			t.Errorf("file %q is not one plain name", p.File)
		}
		lines := strings.Split(string(p.Body), "\n")
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, "#") {
				n++
			}
		}
		if n != 2 || !strings.HasPrefix(lines[0], "# gofit fleet: ") || !kubectlLine.MatchString(lines[1]) {
			t.Errorf("%s: header\n%s", p.File, p.Body)
		}
		if _, err := yaml.YAMLToJSON(p.Body); err != nil {
			t.Errorf("%s: %v", p.File, err)
		}
	}
}

// TestPatchLabels: Prometheus label values become file names and a
// shell command only as valid Kubernetes names; a cluster label is
// escaped. A cluster of ../../x writes nothing outside --out, a newline
// injects no YAML or shell (issue 51).
func TestPatchLabels(t *testing.T) {
	for _, tc := range []struct {
		w       Workload
		patched bool
	}{
		{Workload{Cluster: "../../x", Namespace: "shop", Kind: "Deployment", Name: "web"}, true},
		{Workload{Cluster: "eu\n# kubectl delete ns shop", Namespace: "shop", Kind: "Deployment", Name: "web"}, true},
		{Workload{Namespace: "../etc", Kind: "Deployment", Name: "web"}, false},
		{Workload{Namespace: "shop", Kind: "Deployment", Name: "web; rm -rf ~"}, false},
		{Workload{Namespace: "shop", Kind: "Deployment", Name: "web\nspec: {}"}, false},
	} {
		r := unfittedResults(t, tc.w)
		ps, skipped, err := Patches(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(ps) > 0; got != tc.patched {
			t.Errorf("%q: patched %v, want %v (skipped %q)", tc.w, got, tc.patched, skipped)
		}
		if !tc.patched && (len(skipped) != 1 || !strings.Contains(skipped[0], "not a valid")) {
			t.Errorf("%q: skipped %q, want the reason", tc.w, skipped)
		}
		checkPatchFiles(t, ps)
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		if _, _, err := WriteFiles(out, r); err != nil {
			t.Fatal(err)
		}
		filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if rel, _ := filepath.Rel(out, path); path != dir && !filepath.IsLocal(rel) {
				t.Errorf("%q: wrote %s outside --out", tc.w, path)
			}
			return err
		})
	}
}

// FuzzPatchLabels: whatever the labels, patch files are plain names
// inside --out and their header is two comment lines.
func FuzzPatchLabels(f *testing.F) {
	f.Add("../../x", "shop", "web", "app")
	f.Add("eu\nx", "shop", "web.v2", "app")
	f.Add("", "a", "b", "c")
	r := unfittedResults(f, Workload{Namespace: "shop", Kind: "Deployment", Name: "web"})
	f.Fuzz(func(t *testing.T, cluster, ns, name, container string) {
		rr := *r
		c := rr.Containers[0]
		c.Workload = Workload{Cluster: cluster, Namespace: ns, Kind: "Deployment", Name: name}
		c.Container = container
		rr.Containers = []Container{c}
		ps, _, err := Patches(&rr)
		if err != nil {
			t.Fatal(err)
		}
		checkPatchFiles(t, ps)
	})
}

// TestCPULimitChoices: --cpu-limit none removes the limit, keep leaves
// it, the default sets it.
func TestCPULimitChoices(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.1, wave: 0.03, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: math.MaxInt64, gogc: 100,
		req: Resources{0.25, 256 * mib}, lim: Resources{2, 256 * mib}}
	d := appsv1.Deployment{}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "web:1", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}}}
	for _, tc := range []struct{ mode, want string }{{"", "150m"}, {CPULimitNone, ""}, {CPULimitKeep, "2"}} {
		r := Analyze(input(week, step, s.pod("web-1", week, step)), Options{CPULimit: tc.mode})
		ps, _, err := Patches(r)
		if err != nil || len(ps) != 2 {
			t.Fatalf("%q: %d patches, %v", tc.mode, len(ps), err)
		}
		var got appsv1.Deployment
		applyPatch(t, ps[0], d, &got)
		lim := got.Spec.Template.Spec.Containers[0].Resources.Limits
		cpu, ok := lim[corev1.ResourceCPU]
		if gotS := map[bool]string{true: cpu.String(), false: ""}[ok]; gotS != tc.want {
			t.Errorf("--cpu-limit %q: limit %q, want %q\n%s", tc.mode, gotS, tc.want, ps[0].Body)
		}
	}
}

// TestKeptLimitBoundsTheRequest: with --cpu-limit keep and demand above
// the limit kept, the request stops at the limit (the API server refuses a
// request above its limit), and the reasons say so. Before, the patch
// asked for 300m under a kept 250m limit.
func TestKeptLimitBoundsTheRequest(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.29, wave: 0.01, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: math.MaxInt64, gogc: 100,
		req: Resources{0.25, 256 * mib}, lim: Resources{0.25, 256 * mib}}
	r := Analyze(input(week, step, s.pod("web-1", week, step)), Options{CPULimit: CPULimitKeep})
	g := r.Containers[0].Gofit
	if float64(g.CPURequest) != 0.25 || !g.CPULimitKept {
		t.Fatalf("request %v, limit kept %v: want the kept limit 0.25", g.CPURequest, g.CPULimitKept)
	}
	if !strings.Contains(strings.Join(g.Reasons, "\n"), "capped at the kept limit 250m") {
		t.Errorf("reasons do not say the request was capped: %q", g.Reasons)
	}
	d := appsv1.Deployment{}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "web:1", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}}}
	ps, _, err := Patches(r)
	if err != nil || len(ps) == 0 {
		t.Fatalf("%d patches, %v", len(ps), err)
	}
	var got appsv1.Deployment
	applyPatch(t, ps[0], d, &got)
	res := got.Spec.Template.Spec.Containers[0].Resources
	if res.Requests.Cpu().Cmp(*res.Limits.Cpu()) > 0 {
		t.Errorf("patched request %s above the limit %s\n%s", res.Requests.Cpu(), res.Limits.Cpu(), ps[0].Body)
	}
}

// TestPatchUnderHPA: under an HPA on CPU utilisation the patch leaves
// CPU as it is (requests and limit) and sets memory; with AllowHPA it
// sets both.
func TestPatchUnderHPA(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.1, wave: 0.03, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: math.MaxInt64, gogc: 100,
		req: Resources{0.5, 256 * mib}, lim: Resources{1, 256 * mib}}
	d := appsv1.Deployment{}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "web:1", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
	for _, allow := range []bool{false, true} {
		in := input(week, step, s.pod("web-1", week, step))
		in.Groups[0].HPA = &HPA{Name: "web", CPU: true}
		r := Analyze(in, Options{AllowHPA: allow})
		ps, _, err := Patches(r)
		if err != nil || len(ps) != 2 {
			t.Fatalf("allow %v: %d patches, %v", allow, len(ps), err)
		}
		var got appsv1.Deployment
		applyPatch(t, ps[0], d, &got)
		res := got.Spec.Template.Spec.Containers[0].Resources
		kept := res.Requests.Cpu().String() == "500m" && res.Limits.Cpu().String() == "1"
		if kept == allow || res.Limits.Memory().Value() != int64(float64(r.Containers[0].Gofit.Memory)) {
			t.Errorf("allow %v: resources %+v\n%s", allow, res, ps[0].Body)
		}
		if g := r.Containers[0].Gofit; g.GOMAXPROCS != 1 || g.Env["GOMAXPROCS"] != "1" {
			t.Errorf("allow %v: GOMAXPROCS %d env %v: want fit's for the limit in force", allow, g.GOMAXPROCS, g.Env)
		}
	}
}

// TestReusedOutDropsStalePatches: a second run into the same --out that
// no longer patches a workload removes the first run's patch files for it
// (applied with the rest, one would undo a newer patch), and leaves files
// that gofit fleet did not write.
func TestReusedOutDropsStalePatches(t *testing.T) {
	out := t.TempDir()
	first := unfittedResults(t, Workload{Namespace: "shop", Kind: "Deployment", Name: "old"})
	files, _, err := WriteFiles(out, first)
	if err != nil {
		t.Fatal(err)
	}
	var oldPatches []string
	for _, f := range files {
		if strings.Contains(f, "old") {
			oldPatches = append(oldPatches, f)
		}
	}
	if len(oldPatches) == 0 {
		t.Fatalf("the first run wrote no patch for old: %v", files)
	}
	mine := filepath.Join(out, "patches", "notes.yaml")
	if err := os.WriteFile(mine, []byte("# my notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second := unfittedResults(t, Workload{Namespace: "shop", Kind: "Deployment", Name: "new"})
	_, said, err := WriteFiles(out, second)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range oldPatches {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s from the first run is still there (%v)", f, err)
		}
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a file gofit fleet did not write was removed: %v", err)
	}
	if n := len(said); n < len(oldPatches) || !strings.Contains(strings.Join(said, "\n"), "removed patches/") {
		t.Errorf("what was removed is not said: %q", said)
	}
	k, err := os.ReadFile(filepath.Join(out, "kustomize", "env", "kustomization.yaml"))
	if err == nil && strings.Contains(string(k), "deployment.old.") {
		t.Errorf("the kustomization still lists old:\n%s", k)
	}
}

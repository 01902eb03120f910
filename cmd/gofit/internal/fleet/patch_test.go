package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"
)

// TestPatchesApply applies both patches of an unfitted Deployment with
// the API server's strategic merge: resources replaced, the Go env
// merged into the container's own env by name, the annotation added.
func TestPatchesApply(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.1, wave: 0.03, throttled: 0.3, gc: 0.01, live: 40 * mib, nonHeap: 20 * mib, gomaxprocs: 4, gomemlimit: 1 << 62, gogc: 100,
		req: Resources{0.25, 256 * mib}, lim: Resources{0.25, 256 * mib}}
	r := Analyze(input(week, step, s.pod("web-1", week, step)), Options{})
	ps, _, err := Patches(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].File != "shop.deployment.web.env.yaml" || ps[1].File != "shop.deployment.web.webhook.yaml" {
		t.Fatalf("patches %+v", ps)
	}
	d := appsv1.Deployment{}
	d.Spec.Template.Spec.Containers = []corev1.Container{
		{Name: "app", Image: "web:1", Env: []corev1.EnvVar{{Name: "LOG", Value: "info"}, {Name: "GOMAXPROCS", Value: "4"}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}},
		{Name: "sidecar", Image: "envoy"},
	}
	orig, _ := json.Marshal(d)
	g := r.Containers[0].Gofit
	for _, p := range ps {
		if !strings.HasPrefix(string(p.Body), "# gofit fleet: shop/Deployment/web") {
			t.Errorf("%s: no header:\n%s", p.File, p.Body)
		}
		patch, err := yaml.YAMLToJSON(p.Body)
		if err != nil {
			t.Fatalf("%s: %v", p.File, err)
		}
		out, err := strategicpatch.StrategicMergePatch(orig, patch, appsv1.Deployment{})
		if err != nil {
			t.Fatalf("%s: %v", p.File, err)
		}
		var got appsv1.Deployment
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		c := got.Spec.Template.Spec.Containers
		if len(c) != 2 || c[0].Image != "web:1" || c[1].Name != "sidecar" {
			t.Fatalf("%s: containers %+v", p.File, c)
		}
		lim := c[0].Resources.Limits
		if lim.Cpu().MilliValue() != int64(float64(g.CPULimit)*1000+0.5) || lim.Memory().Value() != int64(float64(g.Memory)) {
			t.Errorf("%s: limits %v, want %v cores and %v bytes", p.File, lim, g.CPULimit, g.Memory)
		}
		env := map[string]string{}
		for _, e := range c[0].Env {
			env[e.Name] = e.Value
		}
		switch p.Mode {
		case "env":
			if env["LOG"] != "info" || env["GOMAXPROCS"] != "1" || env["GOMEMLIMIT"] != g.Env["GOMEMLIMIT"] || len(c[0].Env) != 4 {
				t.Errorf("env patch: env %v", c[0].Env)
			}
		case "webhook":
			if _, ok := env["GOMAXPROCS"]; ok || env["LOG"] != "info" || got.Spec.Template.Annotations[annotationNonGo] != "app=20Mi" {
				t.Errorf("webhook patch: env %v annotations %v", c[0].Env, got.Spec.Template.Annotations)
			}
		}
	}
}

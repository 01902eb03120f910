//go:build !nokube

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/experiment"
	"github.com/gofit-dev/gofit/kube/admission"
)

// TestRolloutTemplates: deploy/rollouts' Argo AnalysisTemplate runs
// `gofit experiment report` with flags gofit has (its {{args.*}} filled
// with its defaults or samples), failing on harmful and worse; the Flagger
// MetricTemplate reads a metric the guard exports.
func TestRolloutTemplates(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "rollouts")
	b, err := os.ReadFile(filepath.Join(dir, "argo-analysistemplate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Args    []struct{ Name, Value string }
			Metrics []struct {
				Provider struct {
					Job struct {
						Spec struct {
							Template struct {
								Spec struct {
									Containers []struct {
										Image string
										Args  []string
									}
								}
							}
						}
					}
				}
			}
		}
	}
	var web []byte
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var kind struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			t.Fatalf("argo-analysistemplate.yaml: %v", err)
		}
		switch {
		case kind.Kind == "AnalysisTemplate" && kind.Metadata.Name == "gofit-experiment":
			if err := yaml.Unmarshal(doc, &tmpl); err != nil {
				t.Fatal(err)
			}
		case kind.Kind == "AnalysisTemplate" && kind.Metadata.Name == "gofit-experiment-guard":
			web = doc
		}
	}
	checkGuardWebTemplate(t, web)
	if tmpl.Kind != "AnalysisTemplate" || len(tmpl.Spec.Metrics) != 1 {
		t.Fatalf("no AnalysisTemplate with one metric: %+v", tmpl)
	}
	samples := map[string]string{"namespace": "shop", "experiment": "gc"}
	for _, a := range tmpl.Spec.Args {
		if _, given := samples[a.Name]; !given {
			samples[a.Name] = a.Value // its default ("" for the workload)
		}
	}
	c := tmpl.Spec.Metrics[0].Provider.Job.Spec.Template.Spec.Containers[0]
	argRE := regexp.MustCompile(`\{\{args\.([a-z]+)\}\}`)
	var args []string
	for _, a := range c.Args {
		args = append(args, argRE.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := samples[argRE.FindStringSubmatch(m)[1]]
			if !ok {
				t.Errorf("%s: no such argument", m)
			}
			return v
		}))
	}
	if !strings.Contains(strings.Join(args, " "), "--fail-on=harmful,worse") || !pinnedImage(c.Image) {
		t.Errorf("report job: image %s, args %q", c.Image, args)
	}
	// Every flag parses: the run stops at a check that comes after
	// parsing (--resamples), not at "flag provided but not defined".
	var out, errb bytes.Buffer
	code := Main(append(args, "--resamples", "1"), &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "--resamples 1") {
		t.Errorf("gofit %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}

	b, err = os.ReadFile(filepath.Join(dir, "flagger-metrictemplate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var mt struct {
		Kind string
		Spec struct{ Query string }
	}
	if err := yaml.Unmarshal(b, &mt); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("internal", "experiment", "guard.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`gofit_experiment_[a-z_]+`).FindString(mt.Spec.Query)
	if mt.Kind != "MetricTemplate" || m == "" || !bytes.Contains(src, []byte(`"`+m+`"`)) {
		t.Errorf("Flagger MetricTemplate %s reads %q, which the guard does not export", mt.Kind, m)
	}
}

func pinnedImage(img string) bool {
	i := strings.LastIndex(img, ":")
	return i > 0 && img[i+1:] != "latest" && !strings.Contains(img[i:], "/")
}

// checkGuardWebTemplate: the AnalysisTemplate gofit-experiment-guard asks
// the guard's verdict endpoint at a URL it serves, reads the field it
// writes, and maps its three verdicts to Argo's three outcomes: harmful
// fails, ok passes, unknown (an outage) matches neither and is
// Inconclusive. The URL is served here by the guard's handler over a
// fake API server, with the template's arguments filled in.
func checkGuardWebTemplate(t *testing.T, doc []byte) {
	t.Helper()
	var tmpl struct {
		Spec struct {
			Args    []struct{ Name, Value string }
			Metrics []struct {
				Count            int    `json:"count"`
				SuccessCondition string `json:"successCondition"`
				FailureCondition string `json:"failureCondition"`
				Provider         struct {
					Web struct {
						URL      string `json:"url"`
						JSONPath string `json:"jsonPath"`
					}
				}
			}
		}
	}
	if err := yaml.Unmarshal(doc, &tmpl); err != nil || len(tmpl.Spec.Metrics) != 1 {
		t.Fatalf("AnalysisTemplate gofit-experiment-guard: %v, %d metrics", err, len(tmpl.Spec.Metrics))
	}
	m := tmpl.Spec.Metrics[0]
	if m.SuccessCondition != `result == "`+experiment.VerdictOK+`"` || m.FailureCondition != `result == "`+experiment.VerdictHarmful+`"` {
		t.Errorf("conditions %q, %q: want ok to pass and harmful to fail, unknown neither", m.SuccessCondition, m.FailureCondition)
	}
	if m.Count < 1 {
		t.Errorf("count %d: without one Argo measures forever, and an analysis step never ends", m.Count)
	}
	if m.Provider.Web.JSONPath != "{$.verdict}" {
		t.Errorf("jsonPath %q: the guard writes verdict", m.Provider.Web.JSONPath)
	}
	looked := time.Now().Add(-time.Minute)
	cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gofit-experiment-gc-1", Namespace: "shop",
		Labels:      map[string]string{admission.LabelExperiment: "gc"},
		Annotations: map[string]string{admission.AnnotationWorkload: "Rollout/web", admission.AnnotationGuard: admission.GuardStatus{Looked: &looked}.String()}}})
	srv := httptest.NewServer(experiment.VerdictHandler(cs, []string{"shop"}, 15*time.Minute, nil))
	defer srv.Close()
	vals := map[string]string{"namespace": "shop", "experiment": "gc", "workload": "Rollout/web"}
	for _, a := range tmpl.Spec.Args {
		if a.Name == "guard" {
			if a.Value != "http://gofit-experiment-guard.gofit-system.svc:9090" {
				t.Errorf("guard's default %q: not the Service deploy/webhook/experiments makes", a.Value)
			}
			vals["guard"] = srv.URL
		}
	}
	url := regexp.MustCompile(`\{\{args\.([a-z]+)\}\}`).ReplaceAllStringFunc(m.Provider.Web.URL, func(s string) string {
		return vals[s[len("{{args."):len(s)-2]]
	})
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var v experiment.GuardVerdict
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 200 || v.Verdict != experiment.VerdictOK {
		t.Errorf("GET %s: %d, %+v, %v: want the experiment's verdict ok", url, resp.StatusCode, v, err)
	}
}

//go:build !nokube

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
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
		Kind string
		Spec struct {
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
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal(doc, &kind); err != nil {
			t.Fatalf("argo-analysistemplate.yaml: %v", err)
		}
		if kind.Kind == "AnalysisTemplate" {
			if err := yaml.Unmarshal(doc, &tmpl); err != nil {
				t.Fatal(err)
			}
		}
	}
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

package fleet

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// annotationNonGo is the webhook's annotation for memory outside the Go
// heap (kube/admission.AnnotationNonGoMemory; spelt here so the command's
// analysis does not link the webhook).
const annotationNonGo = "gofit.dev/non-go-memory"

// Patch is one file of patches/.
type Patch struct {
	Workload Workload
	// Mode is "env" (resources and the Go env, for workloads without the
	// webhook) or "webhook" (resources and the non-Go memory annotation:
	// the webhook injects the env from the limits at admission).
	Mode string
	File string
	Body []byte
}

// Patches are strategic-merge patches per workload, one with resources
// and env, one with resources and the webhook's annotation, for the
// containers gofit has figures for. Bare pods get none: their resources
// are changed by recreating them.
func Patches(r *Results) ([]Patch, error) {
	byW := map[string][]Container{}
	var order []string
	for _, c := range r.Containers {
		if !c.Gofit.Enough() || c.Workload.Kind == "Pod" {
			continue
		}
		k := c.Workload.String()
		if byW[k] == nil {
			order = append(order, k)
		}
		byW[k] = append(byW[k], c)
	}
	sort.Strings(order)
	var out []Patch
	for _, k := range order {
		cs := byW[k]
		w := cs[0].Workload
		api, path := apiOf(w.Kind)
		if api == "" {
			continue
		}
		for _, mode := range []string{"env", "webhook"} {
			var containers []any
			var nonGo []string
			for _, c := range cs {
				g := c.Gofit
				res := map[string]any{
					"requests": map[string]string{"cpu": qtyCPU(float64(g.CPURequest)), "memory": qtyMem(float64(g.Memory))},
					"limits":   map[string]string{"cpu": qtyCPU(float64(g.CPULimit)), "memory": qtyMem(float64(g.Memory))},
				}
				ct := map[string]any{"name": c.Container, "resources": res}
				if mode == "env" {
					keys := make([]string, 0, len(g.Env))
					for k := range g.Env {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					var env []map[string]string
					for _, k := range keys {
						env = append(env, map[string]string{"name": k, "value": g.Env[k]})
					}
					ct["env"] = env
				} else {
					// The webhook leaves a user's GOMAXPROCS and GOMEMLIMIT
					// alone: remove them (a no-op where absent) so that it
					// plans both from the new limits.
					env := []map[string]string{{"name": "GOMAXPROCS", "$patch": "delete"}, {"name": "GOMEMLIMIT", "$patch": "delete"}}
					if g.GOGC != "" {
						env = append(env, map[string]string{"name": "GOGC", "value": g.GOGC})
					}
					ct["env"] = env
					if g.NonGo > 0 {
						nonGo = append(nonGo, c.Container+"="+qtyMem(float64(g.NonGo)))
					}
				}
				containers = append(containers, ct)
			}
			tmpl := map[string]any{"spec": map[string]any{"containers": containers}}
			if len(nonGo) > 0 {
				tmpl["metadata"] = map[string]any{"annotations": map[string]string{annotationNonGo: strings.Join(nonGo, ",")}}
			}
			var body any = map[string]any{"template": tmpl}
			for i := len(path) - 1; i >= 0; i-- {
				body = map[string]any{path[i]: body}
			}
			b, err := yaml.Marshal(body)
			if err != nil {
				return nil, fmt.Errorf("patch for %s: %w", w, err)
			}
			file := fmt.Sprintf("%s.%s.%s.%s.yaml", w.Namespace, strings.ToLower(w.Kind), w.Name, mode)
			if w.Cluster != "" {
				file = w.Cluster + "." + file
			}
			head := fmt.Sprintf("# gofit fleet: %s (%s)\n# kubectl patch %s %s -n %s --type strategic --patch-file %s\n",
				w, map[string]string{"env": "resources and Go env", "webhook": "resources; the gofit webhook injects the env"}[mode],
				strings.ToLower(w.Kind), w.Name, w.Namespace, file)
			out = append(out, Patch{Workload: w, Mode: mode, File: file, Body: append([]byte(head), b...)})
		}
	}
	return out, nil
}

// apiOf is a kind's place for its pod template: the path of fields above
// "template" (the whole patch nests under spec).
func apiOf(kind string) (string, []string) {
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet":
		return "apps/v1", []string{"spec"}
	case "Job":
		return "batch/v1", []string{"spec"}
	case "CronJob":
		return "batch/v1", []string{"spec", "jobTemplate", "spec"}
	}
	return "", nil
}

func qtyCPU(c float64) string {
	m := int64(math.Ceil(c*1000 - 1e-6))
	if m%1000 == 0 {
		return strconv.FormatInt(m/1000, 10)
	}
	return strconv.FormatInt(m, 10) + "m"
}

func qtyMem(b float64) string {
	return strconv.FormatInt(int64(math.Ceil(b/(1<<20)-1e-9)), 10) + "Mi"
}

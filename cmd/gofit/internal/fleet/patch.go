package fleet

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
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
	// File is a plain file name (no directory): its parts are valid
	// Kubernetes names and the cluster label, escaped.
	File string
	Body []byte
	// Kustomize is the same patch as a kustomize patch file: the object's
	// apiVersion, kind and metadata, then the patch.
	Kustomize []byte
}

// Patches are strategic-merge patches per workload, one with resources
// and env, one with resources and the webhook's annotation, for the
// containers gofit has figures for. Bare pods get none (their resources
// are changed by recreating them), nor do Jobs (a Job's pod template is
// immutable: a CronJob's jobTemplate is patched instead), nor workloads
// whose labels are not valid Kubernetes names: skipped says which and why.
func Patches(r *Results) (patches []Patch, skipped []string, err error) {
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
	for _, k := range order {
		cs := byW[k]
		w := cs[0].Workload
		api, path := apiOf(w.Kind)
		switch {
		case w.Kind == "Job":
			skipped = append(skipped, fmt.Sprintf("%s: no patch: a Job's pod template is immutable; change the manifest or the controller that makes it", safeName(w)))
			continue
		case api == "":
			skipped = append(skipped, fmt.Sprintf("%s: no patch: gofit patches Deployments, StatefulSets, DaemonSets, ReplicaSets and CronJobs", safeName(w)))
			continue
		}
		if why := invalidNames(w, cs); why != "" {
			skipped = append(skipped, fmt.Sprintf("%s: no patch: %s", safeName(w), why))
			continue
		}
		for _, mode := range []string{"env", "webhook"} {
			var containers []any
			var nonGo []string
			for _, c := range cs {
				ct := map[string]any{"name": c.Container}
				if res := resources(c.Gofit); len(res) > 0 {
					ct["resources"] = res
				}
				g := c.Gofit
				// valueFrom: null replaces a value the container took
				// from elsewhere (a resourceFieldRef, a ConfigMap): the API
				// server refuses an env var with both.
				if mode == "env" {
					keys := make([]string, 0, len(g.Env))
					for k := range g.Env {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					var env []map[string]any
					for _, k := range keys {
						env = append(env, map[string]any{"name": k, "value": g.Env[k], "valueFrom": nil})
					}
					ct["env"] = env
				} else {
					// The webhook leaves a user's GOMAXPROCS and GOMEMLIMIT
					// alone: remove them (a no-op where absent) so that it
					// plans both from the new limits.
					env := []map[string]any{{"name": "GOMAXPROCS", "$patch": "delete"}, {"name": "GOMEMLIMIT", "$patch": "delete"}}
					if g.GOGC != "" {
						env = append(env, map[string]any{"name": "GOGC", "value": g.GOGC, "valueFrom": nil})
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
				return nil, nil, fmt.Errorf("patch for %s: %w", safeName(w), err)
			}
			kind := strings.ToLower(w.Kind)
			file := fmt.Sprintf("%s.%s.%s.%s.yaml", w.Namespace, kind, w.Name, mode)
			if w.Cluster != "" {
				file = escapeLabel(w.Cluster) + "." + file
			}
			what := map[string]string{"env": "resources and Go env", "webhook": "resources; the gofit webhook injects the env"}[mode]
			head := fmt.Sprintf("# gofit fleet: %s (%s)\n# kubectl patch %s %s -n %s --type strategic --patch-file %s\n",
				safeName(w), what, kind, w.Name, w.Namespace, file)
			full := map[string]any{"apiVersion": api, "kind": w.Kind, "metadata": map[string]string{"name": w.Name, "namespace": w.Namespace}}
			for k, v := range body.(map[string]any) {
				full[k] = v
			}
			kb, err := yaml.Marshal(full)
			if err != nil {
				return nil, nil, fmt.Errorf("kustomize patch for %s: %w", safeName(w), err)
			}
			patches = append(patches, Patch{Workload: w, Mode: mode, File: file, Body: append([]byte(head), b...),
				Kustomize: append([]byte(fmt.Sprintf("# gofit fleet: %s (%s)\n", safeName(w), what)), kb...)})
		}
	}
	return patches, skipped, nil
}

// resources are a recommendation's requests and limits as a patch sets
// them: a figure left out (an HPA's resource, a CPU limit kept) is not
// touched, and a CPU limit of none is removed (null).
func resources(g Recommendation) map[string]any {
	req, lim := map[string]any{}, map[string]any{}
	if g.CPURequest.Valid() {
		req["cpu"] = qtyCPU(float64(g.CPURequest))
		if g.CPULimit.Valid() {
			lim["cpu"] = qtyCPU(float64(g.CPULimit))
		} else if !g.CPULimitKept {
			lim["cpu"] = nil
		}
	}
	if g.Memory.Valid() {
		req["memory"] = qtyMem(float64(g.Memory))
		lim["memory"] = qtyMem(float64(g.Memory))
	}
	res := map[string]any{}
	if len(req) > 0 {
		res["requests"] = req
	}
	if len(lim) > 0 {
		res["limits"] = lim
	}
	return res
}

// invalidNames says which of a workload's names is not a valid
// Kubernetes name (they come from Prometheus labels, which any scrape
// config can set, and end up in file names, YAML and a shell command);
// "" when all are valid.
func invalidNames(w Workload, cs []Container) string {
	check := func(what, v string, errs []string) string {
		if len(errs) > 0 {
			return fmt.Sprintf("%s %s is not a valid Kubernetes name (%s)", what, strconv.Quote(v), errs[0])
		}
		return ""
	}
	if why := check("namespace", w.Namespace, validation.IsDNS1123Label(w.Namespace)); why != "" {
		return why
	}
	if why := check(strings.ToLower(w.Kind)+" name", w.Name, validation.IsDNS1123Subdomain(w.Name)); why != "" {
		return why
	}
	for _, c := range cs {
		if why := check("container", c.Container, validation.IsDNS1123Label(c.Container)); why != "" {
			return why
		}
	}
	return ""
}

// escapeLabel makes a label value one plain file-name part: bytes outside
// [A-Za-z0-9_-] become %XX (so "." still separates the parts, and no
// value is a path or a line).
func escapeLabel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// safeName is a workload's name for a comment line or a message: each
// part escaped unless it is a valid name, so no label breaks a line.
func safeName(w Workload) string {
	part := func(s string) string {
		if len(validation.IsDNS1123Subdomain(s)) == 0 {
			return s
		}
		return escapeLabel(s)
	}
	s := part(w.Namespace) + "/" + part(w.Kind) + "/" + part(w.Name)
	if w.Cluster != "" {
		s = escapeLabel(w.Cluster) + ":" + s
	}
	return s
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

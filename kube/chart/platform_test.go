package chart

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The chart, point by point against what cert-manager's chart lets a
// platform team do (issue 55).

const experimentsOn = `{"webhook":{"experiments":{"enabled":true,"namespaces":["default"]}}}`

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// TestLinuxNodesOnly: the image is Linux only, and the agent tolerates
// every taint: by default every workload selects kubernetes.io/os: linux,
// so none lands on a Windows node. A value replaces it.
func TestLinuxNodesOnly(t *testing.T) {
	objs := template(t, experimentsOn)
	for _, w := range []struct{ kind, name string }{
		{"Deployment", "gofit-webhook"}, {"DaemonSet", "gofit-node"}, {"Deployment", "gofit-experiment-guard"},
	} {
		o := find(objs, w.kind, w.name)
		if o == nil {
			t.Fatalf("no %s %s", w.kind, w.name)
		}
		sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "spec", "nodeSelector")
		if sel["kubernetes.io/os"] != "linux" {
			t.Errorf("%s %s: nodeSelector %v, want kubernetes.io/os: linux", w.kind, w.name, sel)
		}
	}
	objs = template(t, `{"node":{"nodeSelector":{"pool":"go"}}}`)
	sel, _, _ := unstructured.NestedStringMap(find(objs, "DaemonSet", "gofit-node").Object, "spec", "template", "spec", "nodeSelector")
	if sel["pool"] != "go" {
		t.Errorf("node.nodeSelector {pool: go}: %v", sel)
	}
}

// TestNotesFollowFullname: NOTES.txt names the objects as the release
// named them (it once hard-coded gofit-webhook and gofit-node).
func TestNotesFollowFullname(t *testing.T) {
	out, err := run(t, "install", "gofit", chartDir(), "--dry-run=client", "--namespace", "platform",
		"--set", "fullnameOverride=acme", "--set", "webhook.certificates=cert-manager")
	if err != nil {
		t.Fatal(err)
	}
	_, notes, ok := strings.Cut(string(out), "NOTES:")
	if !ok {
		t.Fatalf("no NOTES in helm install --dry-run:\n%s", out)
	}
	for _, w := range []string{"deployment/acme-webhook", "get certificate acme-webhook", "exec deploy/acme-webhook", "daemonset/acme-node"} {
		if !strings.Contains(notes, w) {
			t.Errorf("NOTES do not say %q:\n%s", w, notes)
		}
	}
	if m := regexp.MustCompile(`gofit-(webhook|node)\b`).FindString(notes); m != "" {
		t.Errorf("NOTES name %s under fullnameOverride acme:\n%s", m, notes)
	}
}

// TestPDBs: the webhook's and the experiment guard's budgets take
// minAvailable or maxUnavailable (a number or a percentage), and refuse
// one that allows no eviction, naming the value.
func TestPDBs(t *testing.T) {
	spec := func(values, name string) map[string]any {
		t.Helper()
		o := find(template(t, values), "PodDisruptionBudget", name)
		if o == nil {
			t.Fatalf("%s: no PodDisruptionBudget %s", values, name)
		}
		s, _, _ := unstructured.NestedMap(o.Object, "spec")
		delete(s, "selector")
		return s
	}
	for _, c := range []struct {
		values, name, field string
		want                any
	}{
		{`{}`, "gofit-webhook", "minAvailable", float64(1)},
		{`{"webhook":{"pdb":{"maxUnavailable":1}}}`, "gofit-webhook", "maxUnavailable", float64(1)},
		{`{"webhook":{"pdb":{"maxUnavailable":"34%"}}}`, "gofit-webhook", "maxUnavailable", "34%"},
		{`{"webhook":{"pdb":{"minAvailable":"50%"}}}`, "gofit-webhook", "minAvailable", "50%"},
		{experimentsOn, "gofit-experiment-guard", "minAvailable", float64(1)},
		{`{"webhook":{"experiments":{"enabled":true,"namespaces":["default"]}},"experimentGuard":{"replicas":1,"pdb":{"maxUnavailable":1}}}`,
			"gofit-experiment-guard", "maxUnavailable", float64(1)},
	} {
		s := spec(c.values, c.name)
		if len(s) != 1 || s[c.field] != c.want {
			t.Errorf("%s: %s spec %v, want only %s: %v", c.values, c.name, s, c.field, c.want)
		}
	}
	if o := find(template(t, `{"webhook":{"experiments":{"enabled":true,"namespaces":["default"]}},"experimentGuard":{"pdb":{"enabled":false}}}`),
		"PodDisruptionBudget", "gofit-experiment-guard"); o != nil {
		t.Error("experimentGuard.pdb.enabled=false renders a budget")
	}
	for _, c := range []struct{ values, want string }{
		{`{"webhook":{"pdb":{"maxUnavailable":0}}}`, "webhook.pdb.maxUnavailable (0) must be above 0"},
		{`{"webhook":{"experiments":{"enabled":true,"namespaces":["default"]}},"experimentGuard":{"replicas":1}}`,
			"experimentGuard.pdb.minAvailable (1) must be below experimentGuard.replicas (1)"},
	} {
		f := t.TempDir() + "/v.json"
		writeFile(t, f, c.values)
		if _, err := run(t, "template", "gofit", chartDir(), "-f", f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.values, err, c.want)
		}
	}
}

// TestGuardScheduling: the experiment guard takes the scheduling values
// the webhook does.
func TestGuardScheduling(t *testing.T) {
	objs := template(t, `{"webhook":{"experiments":{"enabled":true,"namespaces":["default"]}},"experimentGuard":{
		"tolerations":[{"key":"dedicated","operator":"Equal","value":"platform","effect":"NoSchedule"}],
		"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["platform"]}]}]}}},
		"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway","labelSelector":{"matchLabels":{"app.kubernetes.io/name":"gofit-experiment-guard"}}}],
		"priorityClassName":"platform-critical","podAnnotations":{"team":"platform"}}}`)
	g := find(objs, "Deployment", "gofit-experiment-guard")
	if g == nil {
		t.Fatal("no guard")
	}
	spec, _, _ := unstructured.NestedMap(g.Object, "spec", "template", "spec")
	if spec["priorityClassName"] != "platform-critical" || spec["tolerations"] == nil || spec["affinity"] == nil || spec["topologySpreadConstraints"] == nil {
		t.Errorf("guard pod spec: %v", spec)
	}
	if a, _, _ := unstructured.NestedStringMap(g.Object, "spec", "template", "metadata", "annotations"); a["team"] != "platform" {
		t.Errorf("guard pod annotations %v", a)
	}
}

// TestCertManagerIssuer: with webhook.certManager.issuerRef naming an
// Issuer or a ClusterIssuer, the Certificate is issued by it and the
// chart renders no Issuer of its own; without, it makes its own CA.
func TestCertManagerIssuer(t *testing.T) {
	count := func(objs []*unstructured.Unstructured, kind string) int {
		n := 0
		for _, o := range objs {
			if o.GetKind() == kind {
				n++
			}
		}
		return n
	}
	own := template(t, `{"webhook":{"certificates":"cert-manager"}}`)
	if n := count(own, "Issuer"); n != 2 {
		t.Errorf("cert-manager without an issuerRef: %d Issuers, want the chart's 2", n)
	}
	for _, kind := range []string{"ClusterIssuer", "Issuer"} {
		objs := template(t, `{"webhook":{"certificates":"cert-manager","certManager":{"issuerRef":{"name":"corp-ca","kind":"`+kind+`"}}}}`)
		if n := count(objs, "Issuer"); n != 0 {
			t.Errorf("%s corp-ca: the chart still renders %d Issuers", kind, n)
		}
		if n := count(objs, "Certificate"); n != 1 {
			t.Errorf("%s corp-ca: %d Certificates, want the serving one", kind, n)
		}
		ref, _, _ := unstructured.NestedStringMap(find(objs, "Certificate", "gofit-webhook").Object, "spec", "issuerRef")
		if ref["name"] != "corp-ca" || ref["kind"] != kind || ref["group"] != "cert-manager.io" {
			t.Errorf("%s corp-ca: issuerRef %v", kind, ref)
		}
		mwc := find(objs, "MutatingWebhookConfiguration", "gofit-webhook")
		if mwc.GetAnnotations()["cert-manager.io/inject-ca-from"] != "gofit-system/gofit-webhook" {
			t.Errorf("%s corp-ca: inject-ca-from %v", kind, mwc.GetAnnotations())
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestArgoCDNotes: docs/install.md's ignoreDifferences for Argo CD names
// objects the chart renders (the default release), by the kind, group
// and name they have, so the block a user pastes matches something.
func TestArgoCDNotes(t *testing.T) {
	doc, err := os.ReadFile(root() + "/docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "### Argo CD")
	if !ok {
		t.Fatal("docs/install.md has no Argo CD section")
	}
	_, block, _ := strings.Cut(sec, "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	var app struct {
		Spec struct {
			IgnoreDifferences []struct {
				Group, Kind, Name string
				JSONPointers      []string `json:"jsonPointers"`
				JQPathExpressions []string `json:"jqPathExpressions"`
			} `json:"ignoreDifferences"`
			SyncPolicy struct {
				SyncOptions []string `json:"syncOptions"`
			} `json:"syncPolicy"`
		}
	}
	if err := yaml.Unmarshal([]byte(block), &app); err != nil {
		t.Fatalf("the Argo CD block: %v", err)
	}
	for _, certs := range []string{"self-managed", "cert-manager"} {
		objs := template(t, `{"webhook":{"certificates":"`+certs+`"}}`)
		kinds := map[string]bool{}
		for _, d := range app.Spec.IgnoreDifferences {
			kinds[d.Kind] = true
			found := false
			for _, o := range objs {
				gv := o.GroupVersionKind()
				found = found || o.GetKind() == d.Kind && gv.Group == d.Group && (d.Name == "" || o.GetName() == d.Name)
			}
			// cert-manager writes its Secret itself: the chart renders none.
			if !found && !(certs == "cert-manager" && d.Kind == "Secret") {
				t.Errorf("%s: ignoreDifferences %s/%s %q matches nothing the chart renders", certs, d.Group, d.Kind, d.Name)
			}
		}
		if !kinds["MutatingWebhookConfiguration"] || !kinds["Secret"] {
			t.Errorf("ignoreDifferences covers %v, want the webhook configuration's caBundle and the certificate Secret", kinds)
		}
		if c := find(objs, "Certificate", "gofit-webhook"); certs == "cert-manager" && c != nil {
			if s, _, _ := unstructured.NestedString(c.Object, "spec", "secretName"); s != "gofit-webhook-tls" {
				t.Errorf("cert-manager's Secret is %s, the docs ignore gofit-webhook-tls", s)
			}
		}
	}
	if !slices.Contains(app.Spec.SyncPolicy.SyncOptions, "RespectIgnoreDifferences=true") {
		t.Error("the Argo CD block does not set RespectIgnoreDifferences=true")
	}
}

// TestServiceMonitors: with monitoring.serviceMonitors the webhook's and
// the agent's monitors are ServiceMonitors in place of their PodMonitors
// (never both: each target would be scraped twice). Each selects a
// Service the chart renders in the namespace it watches, by a port that
// Service names, and relabels job to what the PodMonitor gave it
// (NAMESPACE/NAME), which the alerts and dashboards select by.
func TestServiceMonitors(t *testing.T) {
	objs := templateIn(t, "platform", `{"fullnameOverride":"acme","node":{"metricsPort":9470},"monitoring":{"enabled":true,"namespace":"monitoring","serviceMonitors":{"enabled":true}}}`)
	for _, name := range []string{"gofit-webhook", "gofit-node"} {
		if find(objs, "PodMonitor", name) != nil {
			t.Errorf("PodMonitor %s rendered beside its ServiceMonitor", name)
		}
		sm := find(objs, "ServiceMonitor", name)
		if sm == nil {
			t.Fatalf("no ServiceMonitor %s", name)
		}
		nss, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("%s: %d endpoints", name, len(eps))
		}
		ep := eps[0].(map[string]any)
		var svc *unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() != "Service" || !slices.Contains(nss, o.GetNamespace()) {
				continue
			}
			match := true
			for k, v := range sel {
				match = match && o.GetLabels()[k] == v
			}
			if match {
				if svc != nil {
					t.Errorf("%s selects both Service %s and %s", name, svc.GetName(), o.GetName())
				}
				svc = o
			}
		}
		if svc == nil {
			t.Fatalf("%s: no Service in %v labelled %v", name, nss, sel)
		}
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		named := false
		for _, p := range ports {
			named = named || p.(map[string]any)["name"] == ep["port"]
		}
		if !named {
			t.Errorf("%s: port %v is not a port of Service %s: %v", name, ep["port"], svc.GetName(), ports)
		}
		job := ""
		for _, r := range ep["relabelings"].([]any) {
			if m := r.(map[string]any); m["targetLabel"] == "job" {
				job, _ = m["replacement"].(string)
			}
		}
		if want := sm.GetNamespace() + "/" + name; job != want {
			t.Errorf("%s: job relabelled to %q, want %q (the PodMonitor's)", name, job, want)
		}
	}
	if svc := find(objs, "Service", "acme-node-metrics"); svc == nil {
		t.Error("no metrics Service for the agent, named after fullnameOverride")
	} else if p, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports"); p[0].(map[string]any)["port"] != float64(9470) {
		t.Errorf("agent metrics Service ports %v, want node.metricsPort 9470", p)
	}
	if find(objs, "PodMonitor", "gofit-services") == nil {
		t.Error("the services PodMonitor is gone: it is for your pods, and stays a PodMonitor")
	}
	if objs := template(t, `{"monitoring":{"enabled":true}}`); find(objs, "ServiceMonitor", "gofit-webhook") != nil || find(objs, "PodMonitor", "gofit-webhook") == nil {
		t.Error("by default the webhook's monitor is a PodMonitor")
	}
}

// TestHelmTestProbe: helm test's pod runs gofit webhook probe (tested in
// cmd/gofit against the real admission handler) at the webhook's own
// Service and port, with the CA from the Secret the webhook serves from,
// under any fullnameOverride and either kind of certificates; it is not
// selected by the webhook's Service or budget, and tests.enabled=false
// leaves it out.
func TestHelmTestProbe(t *testing.T) {
	for _, c := range []struct{ values, full string }{
		{`{}`, "gofit"},
		{`{"fullnameOverride":"acme","webhook":{"certificates":"cert-manager","namespace":"fit"}}`, "acme"},
	} {
		objs := template(t, c.values)
		pod := find(objs, "Pod", c.full+"-webhook-probe")
		if pod == nil {
			t.Fatalf("%s: no helm test pod", c.values)
		}
		if pod.GetAnnotations()["helm.sh/hook"] != "test" {
			t.Errorf("%s: the probe is not a helm test hook: %v", c.values, pod.GetAnnotations())
		}
		svc := find(objs, "Service", c.full+"-webhook")
		if svc == nil || svc.GetNamespace() != pod.GetNamespace() {
			t.Fatalf("%s: no webhook Service beside the probe", c.values)
		}
		cs, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
		want := []string{"webhook", "probe", "--url=https://" + svc.GetName() + "." + svc.GetNamespace() + ".svc:443/mutate", "--ca-file=/etc/gofit/webhook-ca/ca.crt"}
		if !slices.Equal(args, want) {
			t.Errorf("%s: probe args %q, want %q", c.values, args, want)
		}
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if ports[0].(map[string]any)["port"] != float64(443) {
			t.Errorf("%s: the webhook Service's port is %v, the probe calls 443", c.values, ports[0])
		}
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		for k, v := range sel {
			if pod.GetLabels()[k] == v && k == "app.kubernetes.io/name" {
				t.Errorf("%s: the webhook Service selects the probe pod", c.values)
			}
		}
		vols, _, _ := unstructured.NestedSlice(pod.Object, "spec", "volumes")
		secret, _, _ := unstructured.NestedString(vols[0].(map[string]any), "secret", "secretName")
		served := ""
		if cert := find(objs, "Certificate", c.full+"-webhook"); cert != nil {
			served, _, _ = unstructured.NestedString(cert.Object, "spec", "secretName")
		} else if s := find(objs, "Secret", c.full+"-webhook-tls"); s != nil {
			served = s.GetName()
		}
		if secret == "" || secret != served {
			t.Errorf("%s: the probe reads the CA from Secret %q, the webhook serves from %q", c.values, secret, served)
		}
	}
	if find(template(t, `{"tests":{"enabled":false}}`), "Pod", "gofit-webhook-probe") != nil {
		t.Error("tests.enabled=false renders the probe")
	}
	if find(template(t, `{"webhook":{"enabled":false}}`), "Pod", "gofit-webhook-probe") != nil {
		t.Error("the probe without the webhook")
	}
}

// TestHelmTestProbeLeftOutWhereRefused: with client authentication or the
// Cilium policy the webhook refuses the probe's pod (no certificate or
// token; not the API server), so helm test would always fail: the chart
// renders no probe there.
func TestHelmTestProbeLeftOutWhereRefused(t *testing.T) {
	for _, values := range []string{
		`{"webhook":{"clientAuth":{"tokenSecret":{"name":"tok"}}}}`,
		`{"webhook":{"clientAuth":{"caConfigMap":{"name":"ca"}}}}`,
		`{"webhook":{"ciliumNetworkPolicy":{"enabled":true}}}`,
	} {
		for _, o := range template(t, values) {
			if o.GetKind() == "Pod" && strings.HasSuffix(o.GetName(), "-webhook-probe") {
				t.Errorf("%s: helm test's probe %s rendered, which the webhook would refuse", values, o.GetName())
			}
		}
	}
}

package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/yaml"

	"github.com/gofit-dev/gofit/kube/kubetest"
	"github.com/gofit-dev/gofit/kube/monitoring/monitoringtest"
)

// root is the repository root.
func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func chartDir() string { return filepath.Join(root(), "charts", "gofit") }

// helm is the helm binary kube/hack/helm.sh builds (once, cached by
// version) or finds; GOFIT_HELM names another.
func helm(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("GOFIT_HELM"); p != "" {
		return p
	}
	return kubetest.Hack(t, "helm.sh", "helm")
}

// run runs helm with args and returns its stdout, or its error with stderr.
func run(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.Bytes(), nil
}

// template renders the chart with the values given as JSON, as a
// release in gofit-system.
func template(t testing.TB, values string) []*unstructured.Unstructured {
	t.Helper()
	return templateIn(t, "gofit-system", values)
}

// templateIn renders the chart as a release in namespace ns with the
// values files given as JSON, later ones over earlier ones (helm -f).
func templateIn(t testing.TB, ns string, values ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "gofit", chartDir(), "--namespace", ns}
	for i, v := range values {
		f := filepath.Join(t.TempDir(), fmt.Sprintf("values%d.json", i))
		if err := os.WriteFile(f, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	out, err := run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// deployLayout are the values that place the chart's objects as deploy/
// places them: the webhook in gofit-system and the agent in gofit-node,
// both namespaces the chart's, with their Pod Security labels (a release
// in another namespace, so that neither is the release's own).
const deployLayout = `{"namespaces":{"create":true},"webhook":{"namespace":"gofit-system"},"node":{"namespace":"gofit-node"}}`

func decode(t testing.TB, b []byte) []*unstructured.Unstructured {
	t.Helper()
	// kyaml, as kustomize (and kubectl apply -k) parse: one YAML reading
	// for both sides of the comparison.
	nodes, err := kio.FromBytes(b)
	if err != nil {
		t.Fatalf("decode the rendered objects: %v", err)
	}
	var objs []*unstructured.Unstructured
	for _, n := range nodes {
		j, err := n.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(j, &m); err != nil {
			t.Fatal(err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// kustomize builds a kustomization made of the given deploy/ directories.
// "BASE+COMPONENT+..." builds an overlay of deploy/BASE with the
// components deploy/COMPONENT, as docs/install.md tells an operator to
// write one (labelled as the base labels its own objects).
func kustomize(t testing.TB, dirs ...string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, d := range dirs {
		dir := filepath.Join(root(), "deploy", d)
		if parts := strings.Split(d, "+"); len(parts) > 1 {
			dir = t.TempDir()
			rel := func(p string) string {
				r, err := filepath.Rel(dir, filepath.Join(root(), "deploy", p))
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel(parts[0]) + "\ncomponents:\n"
			for _, c := range parts[1:] {
				k += "  - " + rel(c) + "\n"
			}
			k += "labels:\n  - pairs: {app.kubernetes.io/part-of: gofit}\n    includeSelectors: false\n"
			if strings.HasPrefix(parts[0], "webhook/") {
				k += "  - pairs: {app.kubernetes.io/name: gofit-webhook}\n    includeSelectors: false\n"
			}
			if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("kustomize build deploy/%s: %v", d, err)
		}
		for _, r := range m.Resources() {
			b, err := r.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, decode(t, b)...)
		}
	}
	return objs
}

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// helmLabels are what Helm charts add to every object and deploy/ does not.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// normal is o without Helm's labels and with the defaults the API server
// fills in either way (imagePullPolicy IfNotPresent for a tagged image).
func normal(t testing.TB, o *unstructured.Unstructured) string {
	t.Helper()
	o = o.DeepCopy()
	labels := o.GetLabels()
	for _, l := range helmLabels {
		delete(labels, l)
	}
	o.SetLabels(labels)
	if cs, ok, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers"); ok {
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok && m["imagePullPolicy"] == "IfNotPresent" {
				delete(m, "imagePullPolicy")
			}
		}
		unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")
	}
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParity: the chart's default render, placed as deploy/ places its
// objects (deployLayout), installs the objects deploy/
// installs (self-managed certificates and the node agent), and with
// certificates: cert-manager, those of deploy/webhook/cert-manager; each
// component of deploy/ (systemd, experiments, cilium, apiserver-cidr) is a
// value of the chart that renders what an overlay with it builds. The
// only differences are Helm's own labels. A change to one side that the
// other does not follow fails here.
func TestParity(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		deploy       []string
	}{
		{"default", `{}`, []string{"webhook/self-managed", "node"}},
		{"cert-manager", `{"webhook":{"certificates":"cert-manager"}}`, []string{"webhook/cert-manager", "node"}},
		// Each component of deploy/ has its value.
		{"systemd", `{"node":{"cgroupDriver":"systemd"}}`, []string{"webhook/self-managed", "node+node/systemd"}},
		{"experiments", `{"webhook":{"experiments":{"enabled":true,"namespaces":["default"]}}}`, []string{"webhook/self-managed+webhook/experiments", "node"}},
		{"cert-manager-experiments", `{"webhook":{"certificates":"cert-manager","experiments":{"enabled":true,"namespaces":["default"]}}}`,
			[]string{"webhook/cert-manager+webhook/experiments", "node"}},
		{"cilium", `{"webhook":{"ciliumNetworkPolicy":{"enabled":true}}}`, []string{"webhook/self-managed+webhook/cilium", "node"}},
		{"apiserver-cidr", `{"webhook":{"networkPolicy":{"ingressFrom":[{"ipBlock":{"cidr":"10.0.0.0/24"}},{"ipBlock":{"cidr":"10.0.16.0/20"}}]}}}`,
			[]string{"webhook/self-managed+webhook/apiserver-cidr", "node"}},
		// gofit rightsize: the chart's value renders deploy/rightsize (its
		// example namespace, default).
		{"rightsize", `{"rightsize":{"enabled":true,"namespaces":["default"]}}`, []string{"webhook/self-managed", "node", "rightsize"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]string{}
			for _, o := range kustomize(t, tc.deploy...) {
				want[key(o)] = normal(t, o)
			}
			// Both run the agent on the built-in defaults out of the box, in
			// the way each kind of user changes them: deploy/node ships an
			// empty QoS ConfigMap that a kustomize user owns and patches; the
			// chart reads none (node.qosConfig.name "") and takes one by
			// value. Compared with the chart reading that ConfigMap, deploy/
			// has the ConfigMap itself in addition.
			values := mergeJSON(t, tc.values, `{"node":{"qosConfig":{"name":"slo-controller-config"}}}`)
			delete(want, "ConfigMap gofit-node/slo-controller-config")
			compare(t, "deploy/", want, "the chart", rendered(t, values, nil))
		})
	}
}

// mergeJSON merges the JSON object b into a (b wins), recursively.
func mergeJSON(t *testing.T, a, b string) string {
	t.Helper()
	var ma, mb map[string]any
	if err := json.Unmarshal([]byte(a), &ma); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &mb); err != nil {
		t.Fatal(err)
	}
	var merge func(dst, src map[string]any)
	merge = func(dst, src map[string]any) {
		for k, v := range src {
			if sv, ok := v.(map[string]any); ok {
				if dv, ok := dst[k].(map[string]any); ok {
					merge(dv, sv)
					continue
				}
			}
			dst[k] = v
		}
	}
	merge(ma, mb)
	out, err := json.Marshal(ma)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestKubeVersion: the chart's kubeVersion admits no Kubernetes release
// whose API server lacks a kind it renders by default, so helm refuses an
// old cluster up front instead of failing halfway through the install:
// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (the QoS class
// policy) is GA since 1.30.
func TestKubeVersion(t *testing.T) {
	for v, ok := range map[string]bool{"1.29.15": false, "1.30.0": true, "1.37.2": true} {
		_, err := run(t, "template", "gofit", chartDir(), "--kube-version", v)
		if (err == nil) != ok {
			t.Errorf("Kubernetes %s: %v, want accepted %v", v, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "kubeVersion") {
			t.Errorf("Kubernetes %s refused, but not for kubeVersion: %v", v, err)
		}
	}
}

func TestLint(t *testing.T) {
	if out, err := run(t, "lint", "--strict", chartDir()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestSchema: values.schema.json refuses a bad value, naming the field.
func TestSchema(t *testing.T) {
	for _, tc := range []struct{ values, field string }{
		{`{"webhook":{"policy":{"memoryRatio":1.5}}}`, "/webhook/policy/memoryRatio"},
		{`{"webhook":{"policy":{"memoryRatio":"0.9"}}}`, "/webhook/policy/memoryRatio"},
		{`{"webhook":{"policy":{"cpuRequestMin":3}}}`, "/webhook/policy/cpuRequestMin"},
		{`{"webhook":{"policy":{"cpuRequestFactor":20}}}`, "/webhook/policy/cpuRequestFactor"},
		{`{"webhook":{"certificates":"certmanager"}}`, "/webhook/certificates"},
		{`{"webhook":{"failurePolicy":"ignore"}}`, "/webhook/failurePolicy"},
		{`{"webhook":{"replicas":0}}`, "/webhook/replicas"},
		{`{"webhook":{"namespace":"Gofit"}}`, "/webhook/namespace"},
		{`{"webhook":{"replica":2}}`, "replica"},
		{`{"image":{"tag":"latest"}}`, "/image/tag"},
		{`{"image":{"digest":"sha256:abc"}}`, "/image/digest"},
		{`{"image":{"pullPolicy":"Sometimes"}}`, "/image/pullPolicy"},
		{`{"node":{"cgroupDriver":"systemd.slice"}}`, "/node/cgroupDriver"},
		{`{"node":{"interval":"10"}}`, "/node/interval"},
		{`{"node":{"maxProtectedRatio":2}}`, "/node/maxProtectedRatio"},
		{`{"node":{"qosConfig":{"namespace":"Koordinator"}}}`, "/node/qosConfig/namespace"},
		{`{"monitoring":{"enabled":"yes"}}`, "/monitoring/enabled"},
		{`{"monitoring":{"podMonitors":{"enable":false}}}`, "enable"},
		{`{"monitoring":{"dashboards":{"namespace":"Grafana"}}}`, "/monitoring/dashboards/namespace"},
		{`{"webhook":{"networkPolicy":{"ingressFrom":[{"ipBlock":{}}]}}}`, "/webhook/networkPolicy/ingressFrom/0/ipBlock"},
		{`{"webhook":{"experiments":{"enabled":1}}}`, "/webhook/experiments/enabled"},
		{`{"webhook":{"experiments":{"namespaces":["Shop"]}}}`, "/webhook/experiments/namespaces/0"},
		{`{"experimentGuard":{"prometheus":{"caSecret":{"name":"Prometheus-CA"}}}}`, "/experimentGuard/prometheus/caSecret/name"},
		{`{"experimentGuard":{"prometheus":{"bearerTokenSecret":{"name":"reader","key":"../token"}}}}`, "/experimentGuard/prometheus/bearerTokenSecret/key"},
		{`{"experimentGuard":{"prometheus":{"caSecret":{"name":"ca","path":"/ca"}}}}`, "path"},
		// Experiments get per-namespace rights only: none named, none given.
		{`{"webhook":{"experiments":{"enabled":true}}}`, "webhook.experiments.enabled needs webhook.experiments.namespaces"},
		{`{"webhook":{"podLabels":{"app.kubernetes.io/name":"other"}}}`, "/webhook/podLabels"},
		{`{"node":{"podLabels":{"team":1}}}`, "/node/podLabels/team"},
		{`{"webhook":{"topologySpreadConstraints":[{"maxSkew":1}]}}`, "/webhook/topologySpreadConstraints/0"},
		{`{"commonLabels":{"team":1}}`, "/commonLabels/team"},
		{`{"rbac":{"create":"yes"}}`, "/rbac/create"},
		{`{"webhook":{"serviceAccount":{"nam":"x"}}}`, "nam"},
		{`{"node":{"serviceAccount":{"name":"Platform"}}}`, "/node/serviceAccount/name"},
		{`{"webhook":{"hostNetwork":"true"}}`, "/webhook/hostNetwork"},
		{`{"webhook":{"port":0}}`, "/webhook/port"},
		{`{"webhook":{"securityContext":"restricted"}}`, "/webhook/securityContext"},
		{`{"node":{"podSecurityContext":[]}}`, "/node/podSecurityContext"},
		{`{"webhook":{"networkPolicy":{"apiServerCIDRs":["10.0.0.1"]}}}`, "/webhook/networkPolicy/apiServerCIDRs/0"},
		// Not the schema's (two fields), the template's: a budget that
		// allows no eviction blocks every drain.
		{`{"webhook":{"replicas":1}}`, "webhook.pdb.minAvailable (1) must be below webhook.replicas (1)"},
		{`{"webhook":{"replicas":2,"pdb":{"minAvailable":2}}}`, "webhook.pdb.minAvailable (2) must be below webhook.replicas (2)"},
	} {
		f := filepath.Join(t.TempDir(), "values.json")
		os.WriteFile(f, []byte(tc.values), 0o644)
		_, err := run(t, "template", "gofit", chartDir(), "-f", f)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("values %s: error %v, want one naming %s", tc.values, err, tc.field)
		}
	}
}

// matrix is the values the chart is rendered with in TestDryRun.
var matrix = []struct{ name, values string }{
	{"default", `{}`},
	{"cert-manager-monitoring", `{"webhook":{"certificates":"cert-manager"},"monitoring":{"enabled":true,"labels":{"release":"prometheus"}}}`},
	{"monitoring-moved", `{"webhook":{"namespace":"fit","timeoutSeconds":5},"monitoring":{"enabled":true,"namespace":"monitoring","interval":"1m",
	  "podMonitors":{"services":false},"dashboards":{"namespace":"grafana"}}}`},
	{"monitoring-rules-only", `{"node":{"enabled":false},"monitoring":{"enabled":true,"podMonitors":{"enabled":false},"dashboards":{"enabled":false}}}`},
	{"webhook-tuned", `{"node":{"enabled":false},"webhook":{"namespace":"fit","replicas":3,"failurePolicy":"Fail",
	  "policy":{"memoryRatio":0.8,"ceil":true,"cpuRequestFactor":1.5,"cpuRequestMin":1,"goVersion":"go1.25"},
	  "objectSelector":{"matchLabels":{"gofit.dev/fit":"yes"}},"namespaceSelector":{"matchLabels":{"team":"a"}},
	  "priorityClassName":"system-cluster-critical","nodeSelector":{"kubernetes.io/os":"linux"},
	  "tolerations":[{"key":"dedicated","operator":"Equal","value":"infra","effect":"NoSchedule"}],
	  "pdb":{"enabled":false},"networkPolicy":{"enabled":false},"extraArgs":["--log-json"],"podLabels":{"team":"platform"},
	  "topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway",
	    "labelSelector":{"matchLabels":{"app.kubernetes.io/name":"gofit-webhook"}}}]},
	  "image":{"repository":"registry.example/gofit","digest":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
	  "imagePullSecrets":[{"name":"regcred"}]}`},
	{"node-systemd", `{"webhook":{"enabled":false},"node":{"cgroupDriver":"systemd","policy":"auto","metricsPort":9465,"podLabels":{"team":"platform"},
	  "qosConfig":{"create":true,"namespace":"koordinator-system"},"priorityClassName":"","maxUnavailable":1}}`},
	{"own-namespaces", `{"namespaces":{"create":true},"node":{"namespace":"gofit-node"},"image":{"tag":"v9.9.9"}}`},
	{"platform", platformValues},
	{"components", `{"webhook":{"replicas":1,"pdb":{"minAvailable":0},"experiments":{"enabled":true,"namespaces":["default"]},"ciliumNetworkPolicy":{"enabled":true},
	  "networkPolicy":{"ingressFrom":[{"ipBlock":{"cidr":"10.0.0.0/24"}},{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]}},
	  "experimentGuard":{"prometheus":{"url":"https://prometheus-operated.monitoring.svc:9090","caSecret":{"name":"prometheus-ca","key":"ca.crt"},"bearerTokenSecret":{"name":"prometheus-reader","key":"token"}}}}`},
	// Every name from fullnameOverride (issue 43): checkRender follows each
	// reference to an object of the render.
	{"renamed", `{"fullnameOverride":"acme","webhook":{"experiments":{"enabled":true,"namespaces":["default"]},"ciliumNetworkPolicy":{"enabled":true}},
	  "monitoring":{"enabled":true},"node":{"qosConfig":{"create":true}}}`},
	{"renamed-cert-manager", `{"nameOverride":"acme","webhook":{"certificates":"cert-manager"}}`},
	// Issue 55: an existing ClusterIssuer, budgets by maxUnavailable, the
	// guard scheduled like the webhook.
	{"cluster-issuer-budgets", `{"webhook":{"certificates":"cert-manager","certManager":{"issuerRef":{"name":"corp-ca","kind":"ClusterIssuer"}},
	  "pdb":{"maxUnavailable":"34%"},"experiments":{"enabled":true,"namespaces":["default"]}},
	  "experimentGuard":{"pdb":{"maxUnavailable":1},"priorityClassName":"system-cluster-critical","tolerations":[{"key":"dedicated","operator":"Exists"}],
	    "topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}]}}`},
	{"service-monitors", `{"monitoring":{"enabled":true,"namespace":"monitoring","serviceMonitors":{"enabled":true}}}`},
}

// platformValues bend the chart to a cluster whose platform team owns
// the ServiceAccounts, the RBAC and the UIDs: every option of
// docs/install.md's "Fitting your cluster", checked by checkRender.
const platformValues = `{"commonLabels":{"team":"platform","cost-center":"42"},"rbac":{"create":false},
  "webhook":{"serviceAccount":{"create":false,"name":"platform-webhook"},"hostNetwork":true,"port":9443,"clientAuth":{"caConfigMap":{"name":"apiserver-client-ca"}},
    "podSecurityContext":{"runAsNonRoot":true,"runAsUser":1000650000,"fsGroup":1000650000,"seccompProfile":{"type":"RuntimeDefault"}},
    "securityContext":{"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]},"runAsGroup":1000650000},
    "priorityClass":{"create":false},"priorityClassName":"system-cluster-critical",
    "networkPolicy":{"apiServerCIDRs":["10.0.0.0/24","fd00::/64"]}},
  "node":{"serviceAccount":{"create":false,"name":"platform-node"},"priorityClassName":"system-node-critical",
    "podSecurityContext":{"seccompProfile":{"type":"RuntimeDefault"}}}}`

// permissive is a CRD that takes any object of its kind: the dry run
// checks names, namespaces and references, not cert-manager's or the
// Prometheus Operator's own schemas.
func permissive(group, version, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	yes := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, Plural: plural, ListKind: kind + "List", Singular: strings.ToLower(kind)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: version, Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &yes}}}},
		},
	}
}

// TestDryRun renders the chart over the matrix and applies every object
// by server-side dry run to a real kube-apiserver (envtest): the API
// server's validation, defaulting and admission (Pod Security, priority
// classes) take each render.
func TestDryRun(t *testing.T) {
	cfg := kubetest.Start(t, &envtest.Environment{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{
			permissive("cert-manager.io", "v1", "Issuer", "issuers"),
			permissive("cert-manager.io", "v1", "Certificate", "certificates"),
			permissive("cilium.io", "v2", "CiliumNetworkPolicy", "ciliumnetworkpolicies"),
		},
		// The Prometheus Operator's own CRDs, as kube/monitoring's dry run
		// of deploy/monitoring uses: the monitoring objects meet its schemas.
		CRDInstallOptions: envtest.CRDInstallOptions{Paths: monitoringtest.OperatorCRDs(t), ErrorIfPathMissing: true},
	})
	cl, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A dry run creates nothing, so the namespaces the objects go into
	// must exist.
	for _, ns := range []string{"gofit-system", "gofit-node", "fit", "koordinator-system", "monitoring", "grafana"} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	applied := map[string]int{}
	for _, tc := range matrix {
		t.Run(tc.name, func(t *testing.T) {
			objs := template(t, tc.values)
			if len(objs) == 0 {
				t.Fatal("nothing rendered")
			}
			for _, o := range objs {
				applied[o.GetKind()]++
				if err := cl.Patch(ctx, o, client.Apply, client.DryRunAll, client.FieldOwner("gofit-chart-test"), client.ForceOwnership,
					client.FieldValidation("Strict")); err != nil {
					t.Errorf("%s: %v", key(o), err)
				}
			}
			checkRender(t, tc.name, objs)
		})
	}
	for _, k := range dryRunKinds {
		if applied[k] == 0 {
			t.Errorf("no %s was dry-run over the matrix", k)
		}
	}
	// The dry run can fail: a value the schema lets through (any string
	// for maxUnavailable) and the API server refuses.
	for _, o := range template(t, `{"webhook":{"enabled":false},"node":{"maxUnavailable":"lots"}}`) {
		err := cl.Patch(ctx, o, client.Apply, client.DryRunAll, client.FieldOwner("gofit-chart-test"), client.ForceOwnership)
		if (o.GetKind() == "DaemonSet") != (err != nil) {
			t.Errorf("maxUnavailable lots: %s: %v", key(o), err)
		}
	}
}

// dryRunKinds are the kinds TestDryRun must have applied at least once
// over the matrix.
var dryRunKinds = []string{"PodMonitor", "ServiceMonitor", "PrometheusRule", "ConfigMap", "Certificate", "Issuer", "DaemonSet", "Deployment",
	"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "CiliumNetworkPolicy", "ClusterRole", "NetworkPolicy", "PodDisruptionBudget"}

// checkRender checks that the values reached the objects they are for.
func checkRender(t *testing.T, name string, objs []*unstructured.Unstructured) {
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		kinds[key(o)] = o
	}
	args := func(k string) []string {
		o := kinds[k]
		if o == nil {
			t.Fatalf("no %s among %d objects", k, len(objs))
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		var out []string
		for _, a := range cs[0].(map[string]any)["args"].([]any) {
			out = append(out, a.(string))
		}
		return out
	}
	has := func(k string, want ...string) {
		got := args(k)
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s args %q lack %s", k, got, w)
			}
		}
	}
	switch name {
	case "renamed", "renamed-cert-manager":
		checkRenamed(t, objs, "acme")
	case "components":
		// The experiment guard comes with experiments, leader-elected,
		// with RBAC for what it uses.
		has("Deployment gofit-system/gofit-experiment-guard", "experiment", "guard", "--interval=5m",
			"--prometheus=https://prometheus-operated.monitoring.svc:9090", "--namespaces=default")
		for _, k := range []string{"Role default/gofit-experiment-guard", "RoleBinding default/gofit-experiment-guard", "Role gofit-system/gofit-experiment-guard-leader",
			"ServiceAccount gofit-system/gofit-experiment-guard", "ValidatingAdmissionPolicy /gofit-experiment-guard-leases"} {
			if kinds[k] == nil {
				t.Errorf("no %s", k)
			}
		}
		// Its Prometheus CA and token from Secrets, mounted read-only.
		checkGuardSecrets(t, kinds["Deployment gofit-system/gofit-experiment-guard"],
			[]string{"--bearer-token-file=/etc/gofit/prometheus-token/token", "--ca-file=/etc/gofit/prometheus-ca/ca.crt"},
			map[string]string{"prometheus-ca": "prometheus-ca/ca.crt", "prometheus-token": "prometheus-reader/token"})
	case "webhook-tuned":
		has("Deployment fit/gofit-webhook", "--memory-ratio=0.8", "--ceil", "--cpu-request-factor=1.5", "--cpu-request-min=1",
			"--go-version=go1.25", "--log-json", "--service-dns=gofit-webhook.fit.svc", "--self-managed-secret=fit/gofit-webhook-tls")
		if kinds["DaemonSet gofit-system/gofit-node"] != nil || kinds["PodDisruptionBudget fit/gofit-webhook"] != nil ||
			kinds["NetworkPolicy fit/gofit-webhook"] != nil {
			t.Error("a disabled part was rendered")
		}
		b, _ := json.Marshal(kinds["MutatingWebhookConfiguration /gofit-webhook"].Object)
		for _, w := range []string{`"failurePolicy":"Fail"`, `"gofit.dev/fit":"yes"`, `"team":"a"`, `"values":["fit","kube-system"]`} {
			if !strings.Contains(string(b), w) {
				t.Errorf("webhook configuration lacks %s: %s", w, b)
			}
		}
		dep := kinds["Deployment fit/gofit-webhook"]
		if l, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels"); l["team"] != "platform" || l["app.kubernetes.io/name"] != "gofit-webhook" {
			t.Errorf("webhook pod labels %v", l)
		}
		if tsc, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "topologySpreadConstraints"); len(tsc) != 1 {
			t.Errorf("webhook topologySpreadConstraints %v", tsc)
		}
		img, _, _ := unstructured.NestedSlice(kinds["Deployment fit/gofit-webhook"].Object, "spec", "template", "spec", "containers")
		if got := img[0].(map[string]any)["image"]; got != "registry.example/gofit@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
			t.Errorf("image %v", got)
		}
	case "node-systemd":
		if l, _, _ := unstructured.NestedStringMap(kinds["DaemonSet gofit-system/gofit-node"].Object, "spec", "template", "metadata", "labels"); l["team"] != "platform" || l["app.kubernetes.io/name"] != "gofit-node" {
			t.Errorf("agent pod labels %v", l)
		}
		has("DaemonSet gofit-system/gofit-node", "--cgroup-driver=systemd", "--policy=auto", "--metrics-addr=:9465",
			"--configmap-namespace=koordinator-system")
		if kinds["ConfigMap koordinator-system/slo-controller-config"] == nil || kinds["Role koordinator-system/gofit-node-config"] == nil {
			t.Error("the QoS ConfigMap or its Role is not in koordinator-system")
		}
		if kinds["Deployment gofit-system/gofit-webhook"] != nil {
			t.Error("the webhook was rendered")
		}
	case "default":
		// Namespaces are not the chart's: helm uninstall leaves them.
		for k := range kinds {
			if strings.HasPrefix(k, "Namespace ") {
				t.Errorf("the default render has %s", k)
			}
		}
		if kinds["DaemonSet gofit-system/gofit-node"] == nil || kinds["Deployment gofit-system/gofit-webhook"] == nil {
			t.Error("the webhook and the agent are not in the release's namespace")
		}
	case "own-namespaces":
		// The agent's own namespace, privileged; never the release's.
		ns := kinds["Namespace /gofit-node"]
		if ns == nil || ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "privileged" || kinds["Namespace /gofit-system"] != nil {
			t.Errorf("namespaces.create with node.namespace gofit-node: %v", ns)
		}
		img, _, _ := unstructured.NestedSlice(kinds["DaemonSet gofit-node/gofit-node"].Object, "spec", "template", "spec", "containers")
		if got := img[0].(map[string]any)["image"]; got != "ghcr.io/gofit-dev/gofit:v9.9.9" {
			t.Errorf("image %v", got)
		}
	case "monitoring-moved":
		// The webhook's monitor stays beside the Secret whose CA it
		// verifies the scrape with.
		want := []string{"PodMonitor fit/gofit-webhook", "PodMonitor monitoring/gofit-node", "PrometheusRule monitoring/gofit",
			"ConfigMap grafana/gofit-fleet-dashboard", "ConfigMap grafana/gofit-workload-dashboard",
			// The agent's scrape token, beside its monitor.
			"ServiceAccount monitoring/gofit-metrics-reader", "Secret monitoring/gofit-metrics-reader",
			"ClusterRole /gofit-metrics-reader", "ClusterRoleBinding /gofit-metrics-reader"}
		if got := monitoringKeys(objs); !slices.Equal(got, sorted(want)) {
			t.Errorf("monitoring objects %q, want %q", got, sorted(want))
		}
		for k, ns := range map[string]string{"PodMonitor fit/gofit-webhook": "fit", "PodMonitor monitoring/gofit-node": "gofit-system"} {
			if o := kinds[k]; o != nil {
				names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "namespaceSelector", "matchNames")
				eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "podMetricsEndpoints")
				if !slices.Equal(names, []string{ns}) || eps[0].(map[string]any)["interval"] != "1m" {
					t.Errorf("%s selects namespaces %q, endpoints %v; want [%s], interval 1m", k, names, eps, ns)
				}
			}
		}
		// The alert and the dashboard follow webhook.timeoutSeconds (the
		// latency alert fires at half of it).
		rule, _ := json.Marshal(kinds["PrometheusRule monitoring/gofit"].Object)
		dash, _ := json.Marshal(kinds["ConfigMap grafana/gofit-fleet-dashboard"].Object)
		for _, w := range []string{`\u003e 2.5"`, "timeout of 5s"} {
			if !strings.Contains(string(rule), w) {
				t.Errorf("timeoutSeconds 5: the PrometheusRule lacks %s", w)
			}
		}
		if !strings.Contains(string(dash), `vector(5)`) {
			t.Error("timeoutSeconds 5: the fleet dashboard lacks vector(5)")
		}
	case "platform":
		for k, o := range kinds {
			switch o.GetKind() {
			case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "PriorityClass":
				t.Errorf("rbac.create, serviceAccount.create and priorityClass.create false rendered %s", k)
			}
			if l := o.GetLabels(); l["team"] != "platform" || l["cost-center"] != "42" {
				t.Errorf("%s lacks commonLabels: %v", k, l)
			}
		}
		dep := kinds["Deployment gofit-system/gofit-webhook"]
		spec, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
		if spec["serviceAccountName"] != "platform-webhook" || spec["hostNetwork"] != true || spec["dnsPolicy"] != "ClusterFirstWithHostNet" ||
			spec["priorityClassName"] != "system-cluster-critical" {
			t.Errorf("webhook pod spec: serviceAccountName %v, hostNetwork %v, dnsPolicy %v, priorityClassName %v",
				spec["serviceAccountName"], spec["hostNetwork"], spec["dnsPolicy"], spec["priorityClassName"])
		}
		if psc, _ := spec["securityContext"].(map[string]any); psc["runAsUser"] != int64(1000650000) || psc["fsGroup"] != int64(1000650000) {
			t.Errorf("webhook pod securityContext %v", psc)
		}
		c := spec["containers"].([]any)[0].(map[string]any)
		if sc, _ := c["securityContext"].(map[string]any); sc["runAsGroup"] != int64(1000650000) || sc["readOnlyRootFilesystem"] != true {
			t.Errorf("webhook container securityContext %v", sc)
		}
		if p := c["ports"].([]any)[0].(map[string]any); p["containerPort"] != int64(9443) {
			t.Errorf("webhook port %v", p)
		}
		has("Deployment gofit-system/gofit-webhook", "--addr=$(HOST_IP):9443") // on the node's network: its address only
		np, _ := json.Marshal(kinds["NetworkPolicy gofit-system/gofit-webhook"].Object)
		for _, w := range []string{`"port":9443`, `"to":[{"ipBlock":{"cidr":"10.0.0.0/24"}},{"ipBlock":{"cidr":"fd00::/64"}}]`} {
			if !strings.Contains(string(np), w) {
				t.Errorf("NetworkPolicy lacks %s: %s", w, np)
			}
		}
		ds := kinds["DaemonSet gofit-system/gofit-node"]
		dspec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
		if dspec["serviceAccountName"] != "platform-node" || dspec["priorityClassName"] != "system-node-critical" || dspec["securityContext"] == nil {
			t.Errorf("agent pod spec: serviceAccountName %v, priorityClassName %v, securityContext %v",
				dspec["serviceAccountName"], dspec["priorityClassName"], dspec["securityContext"])
		}
	case "monitoring-rules-only":
		if got := monitoringKeys(objs); !slices.Equal(got, []string{"PrometheusRule gofit-system/gofit"}) {
			t.Errorf("monitoring objects %q, want only the PrometheusRule", got)
		}
	case "cert-manager-monitoring":
		if got := len(monitoringKeys(objs)); got != 10 {
			t.Errorf("%d monitoring objects, want deploy/monitoring's 10", got)
		}
		for _, k := range []string{"PodMonitor gofit-system/gofit-webhook", "PodMonitor gofit-system/gofit-node", "PodMonitor gofit-system/gofit-services",
			"PrometheusRule gofit-system/gofit", "ConfigMap gofit-system/gofit-fleet-dashboard", "Certificate gofit-system/gofit-webhook"} {
			if kinds[k] == nil {
				t.Errorf("no %s", k)
			} else if !strings.HasPrefix(k, "Certificate") && kinds[k].GetLabels()["release"] != "prometheus" {
				t.Errorf("%s lacks monitoring.labels", k)
			}
		}
	}
}

// monitoringKeys are the keys of objs's monitoring objects, sorted.
func monitoringKeys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/component"] == "monitoring" {
			out = append(out, key(o))
		}
	}
	return sorted(out)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestMonitoringParity: with monitoring.enabled the chart adds exactly
// deploy/monitoring's objects (PrometheusRule, PodMonitors, dashboard
// ConfigMaps), the same but for Helm's labels. Both come from
// kube/monitoring (deploy/monitoring and charts/gofit/files/monitoring);
// kube/monitoring's TestCheckedIn fails when either is stale, and this
// test when the chart's template changes them on the way.
func TestMonitoringParity(t *testing.T) {
	want := map[string]string{}
	for _, o := range kustomize(t, "monitoring") {
		want[key(o)] = normal(t, o)
	}
	if len(want) < 6 {
		t.Fatalf("deploy/monitoring: %d objects, want at least 6", len(want))
	}
	base := map[string]bool{}
	// Placed as deploy/ places the webhook and the agent, whose
	// namespaces the PodMonitors select.
	for _, o := range templateIn(t, "default", deployLayout, `{}`) {
		base[key(o)] = true
	}
	// The guard's PodMonitor: deploy/monitoring ships it for the
	// webhook's experiments component; the chart renders it where it
	// installs the guard, with experiments on.
	const guard = "PodMonitor gofit-system/gofit-experiment-guard"
	guardWant, ok := want[guard]
	if !ok {
		t.Errorf("deploy/monitoring has no %s", guard)
	}
	delete(want, guard)
	compare(t, "deploy/monitoring", want, "the chart's monitoring", rendered(t, `{"monitoring":{"enabled":true}}`, base))
	withGuard := rendered(t, `{"monitoring":{"enabled":true},"webhook":{"experiments":{"enabled":true,"namespaces":["default"]}}}`, nil)
	if got := withGuard[guard]; got != guardWant {
		t.Errorf("%s with experiments on:\n--- deploy/monitoring\n%s--- the chart\n%s", guard, guardWant, got)
	}
}

// rendered is the chart's objects with values, but for those skip holds
// (nil: none), in normal form by key. An object rendered twice or without
// one of Helm's labels fails the test.
func rendered(t *testing.T, values string, skip map[string]bool) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, o := range templateIn(t, "default", deployLayout, values) {
		k := key(o)
		// helm test's pods are not installed (deploy/ has none).
		if skip[k] || o.GetAnnotations()["helm.sh/hook"] == "test" {
			continue
		}
		if got[k] != "" {
			t.Errorf("the chart renders %s twice", k)
		}
		got[k] = normal(t, o)
		for _, l := range helmLabels {
			if o.GetLabels()[l] == "" {
				t.Errorf("%s has no %s label", k, l)
			}
		}
	}
	return got
}

// compare fails the test for each object one side installs and the other
// does not, and for each that differs between them.
func compare(t *testing.T, wantName string, want map[string]string, gotName string, got map[string]string) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s installs %s; %s does not", wantName, k, gotName)
		case g != w:
			t.Errorf("%s differs:\n--- %s\n%s--- %s\n%s", k, wantName, w, gotName, g)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s installs %s; %s does not", gotName, k, wantName)
		}
	}
}

// TestNoLatest: nothing shipped names an image :latest (the kubelet pulls
// it on every start, and it says nothing about what runs).
func TestNoLatest(t *testing.T) {
	for _, dir := range []string{"deploy", "charts"} {
		filepath.WalkDir(filepath.Join(root(), dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for n, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, ":latest") || strings.Contains(strings.ReplaceAll(line, " ", ""), "newTag:latest") {
					t.Errorf("%s:%d names latest: %s", p, n+1, strings.TrimSpace(line))
				}
			}
			return nil
		})
	}
	// What runs: every container image the chart renders over the matrix
	// and every deploy/ kustomization (with each component) builds names a
	// version or a digest: an untagged image is :latest too.
	renders := map[string][]*unstructured.Unstructured{}
	for _, tc := range matrix {
		renders["chart "+tc.name] = template(t, tc.values)
	}
	for _, d := range []string{"webhook/self-managed", "webhook/cert-manager", "node", "monitoring", "rightsize",
		"webhook/self-managed+webhook/experiments+webhook/cilium+webhook/apiserver-cidr", "node+node/systemd"} {
		renders["deploy/"+d] = kustomize(t, d)
	}
	n := 0
	for name, objs := range renders {
		for _, o := range objs {
			for _, f := range []string{"containers", "initContainers"} {
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", f)
				for _, c := range cs {
					n++
					img, _ := c.(map[string]any)["image"].(string)
					if !pinned(img) {
						t.Errorf("%s: %s runs %q, not a versioned image", name, key(o), img)
					}
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d containers checked", n)
	}
	for _, img := range []string{"ghcr.io/gofit-dev/gofit", "gofit", "gofit:latest", "localhost:5000/gofit", "r/gofit@sha256:abc"} {
		if pinned(img) {
			t.Errorf("pinned(%q) = true", img)
		}
	}
}

// pinned: img names a tag other than latest, or a sha256 digest.
func pinned(img string) bool {
	if i := strings.Index(img, "@sha256:"); i >= 0 {
		return len(img)-i-len("@sha256:") == 64
	}
	name := img[strings.LastIndex(img, "/")+1:]
	i := strings.LastIndex(name, ":")
	return i > 0 && i < len(name)-1 && name[i+1:] != "latest"
}

// TestExperimentsLeastPrivilege: experiments had a ClusterRole with get,
// create and update on every Lease (node heartbeats, leader elections)
// and list on every pod. Now: a Role and RoleBinding per namespace named
// (pods listed and watched for their metadata, Leases), no cluster-wide
// grant of either, a ValidatingAdmissionPolicy (and its binding) that
// keeps the webhook's Lease writes to gofit-experiment-*, the flag that
// keeps experiments to those namespaces, and sideEffects NoneOnDryRun.
// The guard too (issue 53): its Role per namespace, no ClusterRole, a
// policy over its account's Lease writes, and --namespaces.
func TestExperimentsLeastPrivilege(t *testing.T) {
	objs := template(t, `{"webhook":{"experiments":{"enabled":true,"namespaces":["shop","web"]}}}`)
	roles, guardRoles := map[string]bool{}, map[string]bool{}
	var vap, vapb, guardVAP, guardVAPB bool
	var args, guardArgs []any
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			if !strings.HasPrefix(o.GetName(), "gofit-webhook") && !strings.HasPrefix(o.GetName(), "gofit-experiment-guard") {
				continue // the agent's
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				if slices.Contains(res, "leases") || slices.Contains(res, "pods") {
					t.Errorf("ClusterRole %s grants %v cluster-wide", o.GetName(), res)
				}
			}
		case "Role":
			if o.GetName() == "gofit-experiment-guard" {
				// The guard's, per experiment namespace (issue 53).
				guardRoles[o.GetNamespace()] = true
				rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
				got := map[string][]string{}
				for _, r := range rules {
					res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
					verbs, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "verbs")
					for _, x := range res {
						got[x] = verbs
					}
				}
				if fmt.Sprint(got) != "map[events:[create] leases:[get list watch update] pods:[get list] pods/eviction:[create] replicasets:[get]]" {
					t.Errorf("guard Role in %s: %v", o.GetNamespace(), got)
				}
			}
			if o.GetName() != "gofit-webhook-experiments" {
				continue
			}
			roles[o.GetNamespace()] = true
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			got := map[string][]string{}
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				verbs, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "verbs")
				for _, x := range res {
					got[x] = verbs
				}
			}
			if fmt.Sprint(got) != "map[daemonsets:[get] deployments:[get] jobs:[get] leases:[get create update] pods:[list watch] replicasets:[get] statefulsets:[get]]" {
				t.Errorf("Role in %s: %v", o.GetNamespace(), got)
			}
		case "RoleBinding":
			if o.GetName() == "gofit-experiment-guard" && !guardRoles[o.GetNamespace()] {
				t.Errorf("guard RoleBinding in %s before its Role", o.GetNamespace())
			}
			if o.GetName() == "gofit-webhook-experiments" && !roles[o.GetNamespace()] {
				t.Errorf("RoleBinding in %s before its Role", o.GetNamespace())
			}
		case "ValidatingAdmissionPolicy":
			if o.GetName() == "gofit-experiment-guard-leases" {
				guardVAP = true
				mc, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
				if !strings.Contains(fmt.Sprint(mc), "system:serviceaccount:gofit-system:gofit-experiment-guard") {
					t.Errorf("guard lease policy matches %v, not the guard's account", mc)
				}
			}
			if o.GetName() == "gofit-webhook-leases" {
				vap = true
				v, _, _ := unstructured.NestedSlice(o.Object, "spec", "validations")
				if !strings.Contains(fmt.Sprint(v), `startsWith("gofit-experiment-")`) {
					t.Errorf("lease policy validations %v", v)
				}
			}
		case "ValidatingAdmissionPolicyBinding":
			vapb = vapb || o.GetName() == "gofit-webhook-leases"
			guardVAPB = guardVAPB || o.GetName() == "gofit-experiment-guard-leases"
		case "Deployment":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			switch o.GetName() {
			case "gofit-webhook":
				args, _, _ = unstructured.NestedSlice(cs[0].(map[string]any), "args")
			case "gofit-experiment-guard":
				guardArgs, _, _ = unstructured.NestedSlice(cs[0].(map[string]any), "args")
			}
		case "MutatingWebhookConfiguration":
			whs, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			if se := whs[0].(map[string]any)["sideEffects"]; se != "NoneOnDryRun" {
				t.Errorf("sideEffects %v, want NoneOnDryRun", se)
			}
		}
	}
	if fmt.Sprint(roles) != "map[shop:true web:true]" || !vap || !vapb {
		t.Errorf("roles in %v, lease policy %v, binding %v", roles, vap, vapb)
	}
	if !slices.Contains(args, any("--experiment-namespaces=shop,web")) {
		t.Errorf("args %v: no --experiment-namespaces=shop,web", args)
	}
	if fmt.Sprint(guardRoles) != "map[shop:true web:true]" || !guardVAP || !guardVAPB {
		t.Errorf("guard roles in %v, lease policy %v, binding %v", guardRoles, guardVAP, guardVAPB)
	}
	if !slices.Contains(guardArgs, any("--namespaces=shop,web")) {
		t.Errorf("guard args %v: no --namespaces=shop,web", guardArgs)
	}
}

// checkGuardSecrets checks that the guard's Deployment dep passes the
// flags (and no other --ca-file or --bearer-token-file), and mounts
// exactly the volumes named, each Secret SECRET/KEY with the key alone,
// read-only at /etc/gofit/VOLUME.
func checkGuardSecrets(t *testing.T, dep *unstructured.Unstructured, flags []string, volumes map[string]string) {
	t.Helper()
	if dep == nil {
		t.Fatal("no experiment guard Deployment")
	}
	spec, _, _ := unstructured.NestedMap(dep.Object, "spec", "template", "spec")
	c := spec["containers"].([]any)[0].(map[string]any)
	var got []string
	for _, a := range c["args"].([]any) {
		if s := a.(string); strings.HasPrefix(s, "--ca-file=") || strings.HasPrefix(s, "--bearer-token-file=") {
			got = append(got, s)
		}
	}
	if !slices.Equal(got, flags) {
		t.Errorf("guard file flags %q, want %q", got, flags)
	}
	vols := map[string]string{}
	vs, _ := spec["volumes"].([]any)
	for _, v := range vs {
		v := v.(map[string]any)
		name, _ := v["name"].(string)
		sec, _ := v["secret"].(map[string]any)
		items, _ := sec["items"].([]any)
		if sec == nil || len(items) != 1 || len(v) != 2 {
			t.Errorf("guard volume %v: want a Secret with one item", v)
			continue
		}
		it := items[0].(map[string]any)
		if it["path"] != it["key"] {
			t.Errorf("guard volume %s: item %v, want the key at its own name", name, it)
		}
		vols[name] = fmt.Sprintf("%v/%v", sec["secretName"], it["key"])
	}
	if fmt.Sprint(vols) != fmt.Sprint(volumes) {
		t.Errorf("guard volumes %v, want %v", vols, volumes)
	}
	mounts := map[string]string{}
	ms, _ := c["volumeMounts"].([]any)
	for _, m := range ms {
		m := m.(map[string]any)
		if m["readOnly"] != true {
			t.Errorf("guard mount %v is not read-only", m)
		}
		mounts[m["name"].(string)] = m["mountPath"].(string)
	}
	want := map[string]string{}
	for v := range volumes {
		want[v] = "/etc/gofit/" + v
	}
	if fmt.Sprint(mounts) != fmt.Sprint(want) {
		t.Errorf("guard mounts %v, want %v", mounts, want)
	}
}

// TestExperimentGuardSecrets: the guard's --ca-file and
// --bearer-token-file could name only files already in its image; the
// CA and the token now come from Secrets (experimentGuard.prometheus.
// caSecret, bearerTokenSecret), each mounted read-only with its key
// alone, and the flag names the mounted file. A file and a Secret for
// the same flag are refused.
func TestExperimentGuardSecrets(t *testing.T) {
	const on = `"webhook":{"experiments":{"enabled":true,"namespaces":["shop"]}}`
	for _, tc := range []struct {
		name, guard string
		flags       []string
		volumes     map[string]string
	}{
		{"none", `{}`, nil, map[string]string{}},
		{"files", `{"caFile":"/etc/ssl/prom.pem","bearerTokenFile":"/var/run/secrets/kubernetes.io/serviceaccount/token"}`,
			[]string{"--bearer-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token", "--ca-file=/etc/ssl/prom.pem"}, map[string]string{}},
		{"secrets", `{"caSecret":{"name":"prom-tls","key":"ca.pem"},"bearerTokenSecret":{"name":"prom-reader"}}`,
			[]string{"--bearer-token-file=/etc/gofit/prometheus-token/token", "--ca-file=/etc/gofit/prometheus-ca/ca.pem"},
			map[string]string{"prometheus-ca": "prom-tls/ca.pem", "prometheus-token": "prom-reader/token"}},
		{"ca secret and token file", `{"caSecret":{"name":"prom-tls"},"bearerTokenFile":"/var/run/secrets/kubernetes.io/serviceaccount/token"}`,
			[]string{"--bearer-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token", "--ca-file=/etc/gofit/prometheus-ca/ca.crt"},
			map[string]string{"prometheus-ca": "prom-tls/ca.crt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := template(t, `{`+on+`,"experimentGuard":{"prometheus":`+mergeJSON(t, `{"url":"https://prometheus.monitoring.svc:9090"}`, tc.guard)+`}}`)
			var dep *unstructured.Unstructured
			for _, o := range objs {
				if key(o) == "Deployment gofit-system/gofit-experiment-guard" {
					dep = o
				}
			}
			checkGuardSecrets(t, dep, tc.flags, tc.volumes)
		})
	}
	for _, v := range []string{`{"caFile":"/ca.pem","caSecret":{"name":"prom-tls"}}`, `{"bearerTokenFile":"/token","bearerTokenSecret":{"name":"prom-reader"}}`} {
		f := filepath.Join(t.TempDir(), "values.json")
		if err := os.WriteFile(f, []byte(`{`+on+`,"experimentGuard":{"prometheus":`+v+`}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, "template", "gofit", chartDir(), "-n", "gofit-system", "-f", f)
		if err == nil || !strings.Contains(err.Error(), "set one of experimentGuard.prometheus.") {
			t.Errorf("%s: error %v, want one naming both values", v, err)
		}
	}
	// A token over http:// (issue 53): refused at render, unless
	// insecureHTTP says so, which passes --prometheus-insecure-http.
	for _, v := range []string{`{"bearerTokenFile":"/token"}`, `{"bearerTokenSecret":{"name":"prom-reader"}}`, `{"headers":{"Authorization":"Basic eDp5"}}`} {
		f := filepath.Join(t.TempDir(), "values.json")
		if err := os.WriteFile(f, []byte(`{`+on+`,"experimentGuard":{"prometheus":`+v+`}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, "template", "gofit", chartDir(), "-n", "gofit-system", "-f", f)
		if err == nil || !strings.Contains(err.Error(), "experimentGuard.prometheus.insecureHTTP") {
			t.Errorf("%s over http://: error %v, want one naming experimentGuard.prometheus.insecureHTTP", v, err)
		}
	}
	for _, o := range template(t, `{`+on+`,"experimentGuard":{"prometheus":{"bearerTokenFile":"/token","insecureHTTP":true}}}`) {
		if key(o) != "Deployment gofit-system/gofit-experiment-guard" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args"); !slices.Contains(args, "--prometheus-insecure-http") {
			t.Errorf("insecureHTTP: guard args %q lack --prometheus-insecure-http", args)
		}
	}
}

// TestBoundedScrapes: the PodMonitors had no sampleLimit or labelLimit
// (a target that grew a label with a pod's UID in it filled the TSDB),
// and scraped the webhook with insecureSkipVerify. Each monitor, in the
// chart (moved to other namespaces too) and in deploy/monitoring, now has
// both limits, none skips verification, and the webhook's verifies
// against the CA in its Secret by the Service name, from the webhook's
// namespace (the operator reads the Secret from the monitor's).
func TestBoundedScrapes(t *testing.T) {
	renders := map[string][]*unstructured.Unstructured{
		"deploy/monitoring": kustomize(t, "monitoring"),
		"chart":             template(t, `{"monitoring":{"enabled":true}}`),
		"chart moved":       template(t, `{"webhook":{"namespace":"fit"},"monitoring":{"enabled":true,"namespace":"monitoring"}}`),
	}
	for name, objs := range renders {
		webhookNS := "gofit-system"
		if name == "chart moved" {
			webhookNS = "fit"
		}
		n := 0
		for _, o := range objs {
			if o.GetKind() != "PodMonitor" {
				continue
			}
			n++
			for _, f := range []string{"sampleLimit", "labelLimit"} {
				v, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", f)
				var n float64
				if _, err := fmt.Sscan(fmt.Sprint(v), &n); err != nil || n <= 0 {
					t.Errorf("%s: PodMonitor %s has %s %v, want a positive limit", name, o.GetName(), f, v)
				}
			}
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "podMetricsEndpoints")
			for _, ep := range eps {
				tc, _, _ := unstructured.NestedMap(ep.(map[string]any), "tlsConfig")
				// The agent's certificate is made at start, so nothing can
				// pin it (as the kubelet's, which kube-prometheus-stack
				// scrapes unverified): its scrape must then carry a token
				// the agent reviews. Any other skip is a defect.
				_, token, _ := unstructured.NestedMap(ep.(map[string]any), "authorization", "credentials")
				if tc["insecureSkipVerify"] == true && (o.GetName() != "gofit-node" || !token) {
					t.Errorf("%s: PodMonitor %s skips TLS verification", name, o.GetName())
				}
				if o.GetName() != "gofit-webhook" {
					continue
				}
				secret, _, _ := unstructured.NestedString(tc, "ca", "secret", "name")
				key, _, _ := unstructured.NestedString(tc, "ca", "secret", "key")
				if secret != "gofit-webhook-tls" || key != "ca.crt" || tc["serverName"] != "gofit-webhook."+webhookNS+".svc" || o.GetNamespace() != webhookNS {
					t.Errorf("%s: the webhook's monitor in %s: tlsConfig %v", name, o.GetNamespace(), tc)
				}
			}
		}
		// The webhook's, the agent's and gofit-services; deploy/monitoring
		// also the experiment guard's (the chart's comes with experiments).
		want := 3
		if name == "deploy/monitoring" {
			want = 4
		}
		if n != want {
			t.Errorf("%s: %d PodMonitors, want %d", name, n, want)
		}
	}
}

// TestNetworkPolicies: the agent's metrics port had no NetworkPolicy; the
// webhook's could name the control plane only through ingressFrom. The
// agent now has one (its metrics port in, only from metricsFrom when
// given; the API server's ports out), and controlPlaneCIDRs admits the
// control plane to the webhook.
func TestNetworkPolicies(t *testing.T) {
	for _, tc := range []struct{ values, name, want string }{
		{`{}`, "gofit-node", `[map[ports:[map[port:9464 protocol:TCP]]]]`},
		{`{"node":{"metricsPort":9465,"networkPolicy":{"metricsFrom":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]}}}`, "gofit-node",
			`[map[from:[map[namespaceSelector:map[matchLabels:map[kubernetes.io/metadata.name:monitoring]]]] ports:[map[port:9465 protocol:TCP]]]]`},
		{`{"webhook":{"networkPolicy":{"controlPlaneCIDRs":["10.0.0.0/24"],"ingressFrom":[{"ipBlock":{"cidr":"10.0.16.0/20"}}]}}}`, "gofit-webhook",
			`[map[from:[map[ipBlock:map[cidr:10.0.0.0/24]] map[ipBlock:map[cidr:10.0.16.0/20]]] ports:[map[port:8443 protocol:TCP]]]]`},
	} {
		found := false
		for _, o := range template(t, tc.values) {
			if o.GetKind() != "NetworkPolicy" || o.GetName() != tc.name {
				continue
			}
			found = true
			in, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
			if got := fmt.Sprint(in); got != tc.want {
				t.Errorf("%s: NetworkPolicy %s ingress %s, want %s", tc.values, tc.name, got, tc.want)
			}
			if tc.name == "gofit-node" {
				eg, _, _ := unstructured.NestedSlice(o.Object, "spec", "egress")
				if fmt.Sprint(eg) != `[map[ports:[map[port:443 protocol:TCP] map[port:6443 protocol:TCP]]]]` {
					t.Errorf("agent egress %v", eg)
				}
			}
		}
		if !found {
			t.Errorf("%s: no NetworkPolicy %s", tc.values, tc.name)
		}
	}
}

// checkRenamed checks a render with the names starting with prefix: every
// object of the chart's own (the monitoring objects keep theirs: alerts and
// dashboards select by their job names) is named prefix-..., and every
// name one object gives another (flags, roleRefs, subjects, Secrets,
// Services, resourceNames, the webhook's service and cert-manager's CA
// injection) names an object of the render, or a fixed name of gofit's
// code (its Leases).
func checkRenamed(t *testing.T, objs []*unstructured.Unstructured, prefix string) {
	names := map[string]bool{} // "Kind name"
	for _, o := range objs {
		names[o.GetKind()+" "+o.GetName()] = true
		switch o.GetKind() {
		case "PodMonitor", "PrometheusRule", "Namespace":
			continue
		case "ConfigMap":
			if strings.HasSuffix(o.GetName(), "-dashboard") || o.GetName() == "slo-controller-config" {
				continue
			}
		}
		if !strings.HasPrefix(o.GetName(), prefix+"-") {
			t.Errorf("%s: not named %s-...", key(o), prefix)
		}
	}
	ref := func(from *unstructured.Unstructured, kind, name string) {
		t.Helper()
		if !names[kind+" "+name] {
			t.Errorf("%s names %s %q, which the render has not got", key(from), kind, name)
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "RoleBinding", "ClusterRoleBinding":
			kind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
			name, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
			ref(o, kind, name)
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				ref(o, "ServiceAccount", s.(map[string]any)["name"].(string))
			}
		case "ValidatingAdmissionPolicyBinding":
			name, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			ref(o, "ValidatingAdmissionPolicy", name)
		case "MutatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				svc, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name")
				ref(o, "Service", svc)
			}
			if from := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; from != "" {
				_, name, _ := strings.Cut(from, "/")
				ref(o, "Certificate", name)
			}
		case "Certificate":
			secret, _, _ := unstructured.NestedString(o.Object, "spec", "secretName")
			names["Secret "+secret] = true // cert-manager writes it
			issuer, _, _ := unstructured.NestedString(o.Object, "spec", "issuerRef", "name")
			ref(o, "Issuer", issuer)
			dns, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
			for _, d := range dns {
				svc, _, _ := strings.Cut(d, ".")
				ref(o, "Service", svc)
			}
		case "Issuer":
			if secret, ok, _ := unstructured.NestedString(o.Object, "spec", "ca", "secretName"); ok {
				names["Secret "+secret] = true
			}
		}
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
			spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			if sa, ok := spec["serviceAccountName"].(string); ok {
				ref(o, "ServiceAccount", sa)
			}
			if pc, ok := spec["priorityClassName"].(string); ok && strings.HasPrefix(pc, prefix+"-") {
				ref(o, "PriorityClass", pc)
			}
			vols, _, _ := unstructured.NestedSlice(spec, "volumes")
			for _, v := range vols {
				if sec, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok {
					ref(o, "Secret", sec)
				}
			}
			cs, _, _ := unstructured.NestedSlice(spec, "containers")
			for _, a := range cs[0].(map[string]any)["args"].([]any) {
				flag, val, _ := strings.Cut(a.(string), "=")
				switch flag {
				case "--webhook-config":
					ref(o, "MutatingWebhookConfiguration", val)
				case "--self-managed-secret":
					_, sec, _ := strings.Cut(val, "/")
					ref(o, "Secret", sec)
				case "--service-dns":
					svc, _, _ := strings.Cut(val, ".")
					ref(o, "Service", svc)
				case "--daemonset":
					ref(o, "DaemonSet", val)
				}
			}
		case "Role", "ClusterRole":
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				r := r.(map[string]any)
				rn, _ := r["resourceNames"].([]any)
				res, _ := r["resources"].([]any)
				for _, n := range rn {
					kind := map[string]string{"secrets": "Secret", "daemonsets": "DaemonSet", "mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
						"leases": "Lease", "namespaces": "Namespace", "configmaps": "ConfigMap"}[res[0].(string)]
					switch {
					case kind == "Lease" || kind == "Namespace" || kind == "ConfigMap" && n == "slo-controller-config":
						// gofit's code names its Leases; namespaces are the
						// release's.
					case kind == "":
						t.Errorf("%s: resourceNames %v of %v: a kind this check does not know", key(o), rn, res)
					default:
						ref(o, kind, n.(string))
					}
				}
			}
		case "PodMonitor":
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "podMetricsEndpoints")
			for _, e := range eps {
				if sec, ok, _ := unstructured.NestedString(e.(map[string]any), "tlsConfig", "ca", "secret", "name"); ok {
					ref(o, "Secret", sec)
				}
				if sn, ok, _ := unstructured.NestedString(e.(map[string]any), "tlsConfig", "serverName"); ok {
					svc, _, _ := strings.Cut(sn, ".")
					ref(o, "Service", svc)
				}
			}
		}
	}
}

// TestSecretsByName: no Role of the chart reads Secrets but by name. A
// namespace's Secrets hold Helm's releases and the guard's Prometheus
// token; the webhook keeps one of them (issue 51, item 4).
func TestSecretsByName(t *testing.T) {
	for _, values := range []string{`{}`, `{"webhook":{"certificates":"cert-manager"}}`,
		`{"webhook":{"experiments":{"enabled":true,"namespaces":["shop"]}}}`} {
		n := 0
		for _, o := range template(t, values) {
			if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				names, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resourceNames")
				if slices.Contains(res, "secrets") || slices.Contains(res, "*") {
					n++
					if len(names) == 0 {
						t.Errorf("%s: %s %s grants Secrets %v without resourceNames", values, o.GetKind(), o.GetName(), r)
					}
				}
			}
		}
		if values == `{}` && n == 0 {
			t.Errorf("%s: no rule on Secrets at all; the self-managed rotator needs its own", values)
		}
	}
}

// TestNameOverrideErrors: a name the chart cannot build on is refused with
// the value's name, before anything is rendered.
func TestNameOverrideErrors(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{`{"fullnameOverride":"Acme_1"}`, "fullnameOverride"},
		{`{"nameOverride":"` + strings.Repeat("a", 39) + `"}`, "nameOverride"},
		{`{"fullnameOverride":"-acme"}`, "fullnameOverride"},
	} {
		f := filepath.Join(t.TempDir(), "values.json")
		if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, "template", "gofit", chartDir(), "-n", "gofit-system", "-f", f)
		if err == nil {
			t.Errorf("%s: rendered, want an error", tc.values)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not name %s", tc.values, err, tc.want)
		}
	}
}

// TestWebhookHostNetwork (issue 51, item 7): the CiliumNetworkPolicy
// admitted port 8443 whatever webhook.port said, and with hostNetwork
// the webhook listened on every address of the node, where no
// NetworkPolicy applies, to anyone. Now the Cilium policy follows
// webhook.port; on the node's network the webhook binds to the node's
// address, and the chart refuses to render without client
// authentication.
func TestWebhookHostNetwork(t *testing.T) {
	webhook := func(objs []*unstructured.Unstructured) (args []string, env map[string]string, vols []string, cnpPorts []string) {
		env = map[string]string{}
		for _, o := range objs {
			switch {
			case o.GetKind() == "Deployment" && o.GetName() == "gofit-webhook":
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				c := cs[0].(map[string]any)
				args, _, _ = unstructured.NestedStringSlice(c, "args")
				es, _, _ := unstructured.NestedSlice(c, "env")
				for _, e := range es {
					e := e.(map[string]any)
					env[e["name"].(string)] = fmt.Sprint(e["value"], e["valueFrom"])
				}
				vs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
				for _, v := range vs {
					vols = append(vols, v.(map[string]any)["name"].(string))
				}
			case o.GetKind() == "CiliumNetworkPolicy":
				in, _, _ := unstructured.NestedSlice(o.Object, "spec", "ingress")
				for _, r := range in {
					tps, _, _ := unstructured.NestedSlice(r.(map[string]any), "toPorts")
					for _, tp := range tps {
						ps, _, _ := unstructured.NestedSlice(tp.(map[string]any), "ports")
						for _, p := range ps {
							cnpPorts = append(cnpPorts, p.(map[string]any)["port"].(string))
						}
					}
				}
			}
		}
		return
	}
	_, _, _, ports := webhook(template(t, `{"webhook":{"port":9443,"ciliumNetworkPolicy":{"enabled":true}}}`))
	if fmt.Sprint(ports) != "[9443]" {
		t.Errorf("Cilium policy ports %v with webhook.port 9443, want [9443]", ports)
	}

	args, env, vols, _ := webhook(template(t, `{"webhook":{"hostNetwork":true,"clientAuth":{"caConfigMap":{"name":"apiserver-client-ca"}}}}`))
	if !slices.Contains(args, "--addr=$(HOST_IP):8443") || !strings.Contains(env["HOST_IP"], "status.hostIP") {
		t.Errorf("hostNetwork: args %v, HOST_IP %q: want the node's address only", args, env["HOST_IP"])
	}
	if !slices.Contains(args, "--client-ca-file=/etc/gofit/client-ca/ca.crt") || !slices.Contains(vols, "client-ca") {
		t.Errorf("clientAuth.caConfigMap: args %v, volumes %v", args, vols)
	}
	args, _, vols, _ = webhook(template(t, `{"webhook":{"clientAuth":{"tokenSecret":{"name":"apiserver-token","key":"t"}}}}`))
	if !slices.Contains(args, "--client-token-file=/etc/gofit/client-token/t") || !slices.Contains(vols, "client-token") || !slices.Contains(args, "--addr=:8443") {
		t.Errorf("clientAuth.tokenSecret: args %v, volumes %v", args, vols)
	}

	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(`{"webhook":{"hostNetwork":true}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "template", "gofit", chartDir(), "-n", "gofit-system", "-f", f); err == nil || !strings.Contains(string(out)+err.Error(), "webhook.clientAuth") {
		t.Errorf("hostNetwork without clientAuth: %v, want a refusal naming webhook.clientAuth", err)
	}
}

// TestRightsizeValues: rightsize needs its namespaces (no cluster-wide
// grant), refuses a name that is not a namespace's and a token sent in
// the clear as the guard does, and passes the kill switch and the
// Prometheus settings to the controller.
func TestRightsizeValues(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{`{"rightsize":{"enabled":true}}`, "rightsize.namespaces"},
		{`{"rightsize":{"enabled":true,"namespaces":["Shop"]}}`, "/rightsize/namespaces/0"},
		{`{"rightsize":{"enabled":true,"namespaces":["shop"],"prometheus":{"bearerTokenFile":"/t"}}}`, "rightsize.prometheus.insecureHTTP"},
		{`{"rightsize":{"enabled":true,"namespaces":["shop"],"prometheus":{"url":"https://p","caFile":"/ca","caSecret":{"name":"ca"}}}}`, "rightsize.prometheus.caFile"},
	} {
		f := filepath.Join(t.TempDir(), "values.json")
		if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, "template", "gofit", chartDir(), "-n", "gofit-system", "-f", f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %s", tc.values, err, tc.want)
		}
	}
	objs := template(t, `{"rightsize":{"enabled":true,"namespaces":["shop","web"],"paused":true,
	  "prometheus":{"url":"https://prometheus:9090","bearerTokenSecret":{"name":"reader"},"match":["cluster=prod"]}}}`)
	roles := map[string]bool{}
	var args []string
	var mounts []any
	for _, o := range objs {
		switch key(o) {
		case "Role shop/gofit-rightsize", "Role web/gofit-rightsize", "RoleBinding shop/gofit-rightsize", "RoleBinding web/gofit-rightsize":
			roles[key(o)] = true
		case "Deployment gofit-system/gofit-rightsize":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			c := cs[0].(map[string]any)
			for _, a := range c["args"].([]any) {
				args = append(args, a.(string))
			}
			mounts, _ = c["volumeMounts"].([]any)
		}
		if o.GetKind() == "ClusterRole" && strings.Contains(o.GetName(), "rightsize") {
			t.Errorf("%s: rightsize is never granted cluster-wide", key(o))
		}
	}
	if len(roles) != 4 {
		t.Errorf("Roles and RoleBindings %v: want one of each in shop and web", roles)
	}
	for _, want := range []string{"rightsize", "--paused", "--namespaces=shop,web", "--prometheus=https://prometheus:9090",
		"--bearer-token-file=/etc/gofit/prometheus-token/token", "--match=cluster=prod"} {
		if !slices.Contains(args, want) {
			t.Errorf("rightsize's args %q: no %s", args, want)
		}
	}
	if len(mounts) != 1 {
		t.Errorf("rightsize's volumeMounts %v: want the token's alone", mounts)
	}
}

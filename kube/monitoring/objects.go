package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Namespace is where the objects live. The webhook's and the agent's
// monitors name their namespaces in namespaceSelector, so a kustomization
// that moves these objects elsewhere (namespace: monitoring) still finds
// them.
const Namespace = "gofit-system"

// OptInLabel is the pod label with which a service opts in to the
// gofit-services PodMonitor; its container port must be named
// OptInPort and serve /metrics.
const (
	OptInLabel = "gofit.dev/metrics"
	OptInPort  = "metrics"
)

// Relabel is one relabelling step, written for a PodMonitor (camelCase)
// and for a plain Prometheus scrape config (snake_case) from one source.
type Relabel struct {
	SourceLabels []string
	Separator    string
	Regex        string
	TargetLabel  string
	Replacement  string
	Action       string
}

// targetLabels give every target the workload it belongs to (its
// Deployment, StatefulSet, DaemonSet or Job, else the bare pod's name)
// and its node: the workload dashboard's variables and the agent's alerts
// use them. The Prometheus Operator adds namespace, pod and container.
var targetLabels = []Relabel{
	{SourceLabels: []string{"__meta_kubernetes_pod_controller_kind", "__meta_kubernetes_pod_controller_name"}, Separator: ";", Regex: "ReplicaSet;(.+)-[a-z0-9]+", TargetLabel: "workload", Replacement: "$1", Action: "replace"},
	{SourceLabels: []string{"__meta_kubernetes_pod_controller_kind", "__meta_kubernetes_pod_controller_name"}, Separator: ";", Regex: "(StatefulSet|DaemonSet|Job|ReplicationController);(.+)", TargetLabel: "workload", Replacement: "$2", Action: "replace"},
	{SourceLabels: []string{"__meta_kubernetes_pod_controller_kind", "__meta_kubernetes_pod_name"}, Separator: ";", Regex: ";(.+)", TargetLabel: "workload", Replacement: "$1", Action: "replace"},
	{SourceLabels: []string{"__meta_kubernetes_pod_node_name"}, Separator: ";", Regex: "(.+)", TargetLabel: "node", Replacement: "$1", Action: "replace"},
}

func (r Relabel) operator() map[string]any {
	return map[string]any{"sourceLabels": r.SourceLabels, "separator": r.Separator, "regex": r.Regex, "targetLabel": r.TargetLabel, "replacement": r.Replacement, "action": r.Action}
}

func (r Relabel) plain() map[string]any {
	return map[string]any{"source_labels": r.SourceLabels, "separator": r.Separator, "regex": r.Regex, "target_label": r.TargetLabel, "replacement": r.Replacement, "action": r.Action}
}

// scrapeTarget is one PodMonitor: which pods, which port, how, and how
// much of a scrape Prometheus keeps (a target over its limits fails the
// scrape, visibly, instead of flooding the TSDB with series).
type scrapeTarget struct {
	name        string
	namespaces  []string // nil: any
	match       map[string]string
	port        string
	scheme      string
	sampleLimit int
	labelLimit  int
	// token: the target serves --metrics-secure (TLS with a certificate
	// it made at start, and a bearer token the API server vouches for):
	// scrape with MetricsReader's token.
	token bool
}

// MetricsReader is the ServiceAccount whose token scrapes the node
// agent's --metrics-secure port: its Secret (the token) sits beside the
// PodMonitors, and a ClusterRole lets it get /metrics and nothing else.
const MetricsReader = "gofit-metrics-reader"

// The webhook's serving certificate: its Secret (the self-managed
// rotator's and cert-manager's both hold the CA as ca.crt) and the
// Service name it is for.
const (
	WebhookTLSSecret = "gofit-webhook-tls"
	webhookCAKey     = "ca.crt"
	WebhookDNS       = "gofit-webhook.gofit-system.svc"
)

var scrapeTargets = []scrapeTarget{
	// The webhook serves /metrics on its HTTPS port with a certificate for
	// its Service name: the scrape of a pod IP verifies it against the CA
	// in its Secret, by that name.
	{name: "gofit-webhook", namespaces: []string{"gofit-system"}, match: map[string]string{"app.kubernetes.io/name": "gofit-webhook"}, port: "https", scheme: "https",
		sampleLimit: 2000, labelLimit: 20},
	// The agent's series grow with the pods on its node.
	// It serves --metrics-secure: TLS, and /metrics only to a token the
	// API server accepts and lets get it.
	{name: "gofit-node", namespaces: []string{"gofit-node"}, match: map[string]string{"app.kubernetes.io/name": "gofit-node"}, port: "metrics", scheme: "https",
		sampleLimit: 20000, labelLimit: 20, token: true},
	// The experiment guard (deploy/webhook/experiments): its looks'
	// timestamp is what GofitExperimentGuardLooksStale reads.
	{name: "gofit-experiment-guard", namespaces: []string{"gofit-system"}, match: map[string]string{"app.kubernetes.io/name": "gofit-experiment-guard"}, port: "metrics", scheme: "http",
		sampleLimit: 2000, labelLimit: 20},
	// Services that serve gofit's metrics opt in (docs/monitoring.md).
	{name: "gofit-services", match: map[string]string{OptInLabel: "true"}, port: OptInPort, scheme: "http",
		sampleLimit: 5000, labelLimit: 30},
}

func podMonitor(t scrapeTarget) map[string]any {
	ep := map[string]any{"port": t.port, "path": "/metrics", "scheme": t.scheme, "interval": "30s"}
	switch {
	case t.token:
		// A certificate made at start pins nothing: the token is what
		// authenticates, and TLS keeps it off the wire.
		ep["tlsConfig"] = map[string]any{"insecureSkipVerify": true}
		ep["authorization"] = map[string]any{"type": "Bearer", "credentials": map[string]any{"name": MetricsReader, "key": "token"}}
	case t.scheme == "https":
		ep["tlsConfig"] = map[string]any{
			"ca":         map[string]any{"secret": map[string]any{"name": WebhookTLSSecret, "key": webhookCAKey}},
			"serverName": WebhookDNS,
		}
	}
	var rl []map[string]any
	for _, r := range targetLabels {
		rl = append(rl, r.operator())
	}
	ep["relabelings"] = rl
	nsSel := map[string]any{"any": true}
	if t.namespaces != nil {
		nsSel = map[string]any{"matchNames": t.namespaces}
	}
	return map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
		"metadata": meta(t.name, nil),
		"spec": map[string]any{
			"selector":            map[string]any{"matchLabels": t.match},
			"namespaceSelector":   nsSel,
			"podMetricsEndpoints": []any{ep},
			"sampleLimit":         t.sampleLimit,
			"labelLimit":          t.labelLimit,
		},
	}
}

// metricsReader is MetricsReader: a ServiceAccount beside the
// PodMonitors, its long-lived token Secret (which the Prometheus Operator
// reads from the monitor's namespace), and a ClusterRole that lets it get
// /metrics, bound.
func metricsReader() []any {
	m := func(kind string) map[string]any {
		o := map[string]any{"apiVersion": "v1", "kind": kind, "metadata": meta(MetricsReader, nil)}
		if kind == "ClusterRole" || kind == "ClusterRoleBinding" {
			o["apiVersion"] = "rbac.authorization.k8s.io/v1"
			delete(o["metadata"].(map[string]any), "namespace")
		}
		return o
	}
	sa, secret, role, binding := m("ServiceAccount"), m("Secret"), m("ClusterRole"), m("ClusterRoleBinding")
	secret["type"] = "kubernetes.io/service-account-token"
	secret["metadata"].(map[string]any)["annotations"] = map[string]string{"kubernetes.io/service-account.name": MetricsReader}
	role["rules"] = []any{map[string]any{"nonResourceURLs": []string{"/metrics"}, "verbs": []string{"get"}}}
	binding["roleRef"] = map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MetricsReader}
	binding["subjects"] = []any{map[string]any{"kind": "ServiceAccount", "name": MetricsReader, "namespace": Namespace}}
	return []any{sa, secret, role, binding}
}

// scrapeConfig is t as a plain Prometheus scrape config with Kubernetes
// service discovery, the same relabelling as the operator's.
func scrapeConfig(t scrapeTarget) map[string]any {
	sd := map[string]any{"role": "pod"}
	if t.namespaces != nil {
		sd["namespaces"] = map[string]any{"names": t.namespaces}
	}
	var rl []map[string]any
	for _, k := range slices.Sorted(maps.Keys(t.match)) {
		rl = append(rl, Relabel{SourceLabels: []string{"__meta_kubernetes_pod_label_" + labelName(k)}, Regex: t.match[k], Action: "keep"}.plainKeep())
	}
	rl = append(rl,
		Relabel{SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: t.port, Action: "keep"}.plainKeep(),
		Relabel{SourceLabels: []string{"__meta_kubernetes_namespace"}, Regex: "(.*)", TargetLabel: "namespace", Replacement: "$1", Action: "replace", Separator: ";"}.plain(),
		Relabel{SourceLabels: []string{"__meta_kubernetes_pod_name"}, Regex: "(.*)", TargetLabel: "pod", Replacement: "$1", Action: "replace", Separator: ";"}.plain(),
		Relabel{SourceLabels: []string{"__meta_kubernetes_pod_container_name"}, Regex: "(.*)", TargetLabel: "container", Replacement: "$1", Action: "replace", Separator: ";"}.plain(),
	)
	for _, r := range targetLabels {
		rl = append(rl, r.plain())
	}
	c := map[string]any{"job_name": t.name, "scheme": t.scheme, "metrics_path": "/metrics", "kubernetes_sd_configs": []any{sd}, "relabel_configs": rl,
		"sample_limit": t.sampleLimit, "label_limit": t.labelLimit}
	switch {
	case t.token:
		// Prometheus's own ServiceAccount token: its ClusterRole needs get
		// on /metrics (kube-prometheus's has it).
		c["tls_config"] = map[string]any{"insecure_skip_verify": true}
		c["authorization"] = map[string]any{"credentials_file": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
	case t.scheme == "https":
		// The CA of the webhook's Secret, mounted where the Prometheus
		// Operator mounts spec.secrets (docs/monitoring.md).
		c["tls_config"] = map[string]any{"ca_file": "/etc/prometheus/secrets/" + WebhookTLSSecret + "/" + webhookCAKey, "server_name": WebhookDNS}
	}
	return c
}

func (r Relabel) plainKeep() map[string]any {
	return map[string]any{"source_labels": r.SourceLabels, "regex": r.Regex, "action": r.Action}
}

// labelName is a pod label as Kubernetes service discovery names it.
func labelName(k string) string {
	b := []byte(k)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

func meta(name string, labels map[string]string) map[string]any {
	l := map[string]string{"app.kubernetes.io/part-of": "gofit", "app.kubernetes.io/component": "monitoring"}
	for k, v := range labels {
		l[k] = v
	}
	return map[string]any{"name": name, "namespace": Namespace, "labels": l}
}

// ChartTimeoutSentinel stands for the webhook's timeoutSeconds in the
// chart's copy (ChartFiles): a number no other rule or panel has.
const ChartTimeoutSentinel = 997

// The chart's copy carries these where its values go: the exporters'
// selectors (monitoring.selectors), the cluster label
// (monitoring.clusterLabel) and the rounding of a CPU limit into
// GOMAXPROCS (floor, or ceil with webhook.policy.ceil). Each is text no
// rule or panel has otherwise; templates/monitoring.yaml writes the
// values over them (selectors also JSON-escaped, inside the dashboards)
// and fails if one is left.
const (
	chartCAdvisorSentinel  = `chart_sentinel_cadvisor="selector"`
	chartKubeStateSentinel = `chart_sentinel_kube_state_metrics="selector"`
	chartAPIServerSentinel = `chart_sentinel_apiserver="selector"`
	chartClusterSentinel   = "chart_sentinel_cluster"
	chartRoundingSentinel  = "chart_sentinel_rounding"
)

const header = "# Generated by `go run ./kube/monitoring/gen` from kube/monitoring; do not edit.\n"

// objectSet is every Prometheus Operator and Grafana object
// deploy/monitoring installs, built once for both of its users: the
// kustomization (Files) and the Helm chart (ChartFiles).
type objectSet struct {
	groups     []Group
	rule       map[string]any
	monitors   []any
	readers    []any // MetricsReader's account, token and right
	scrapes    []any
	dashboards []any             // the ConfigMaps
	json       map[string][]byte // dashboards/UID.json
}

func objects(p Params) (*objectSet, error) {
	groups, err := Groups(p)
	if err != nil {
		return nil, err
	}
	s := &objectSet{groups: groups, json: map[string][]byte{}}
	s.rule = map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
		"metadata": meta("gofit", nil), "spec": map[string]any{"groups": groups},
	}
	for _, t := range scrapeTargets {
		s.monitors = append(s.monitors, podMonitor(t))
		s.scrapes = append(s.scrapes, scrapeConfig(t))
	}
	s.readers = metricsReader()
	for _, d := range Dashboards(p) {
		j, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
		}
		j = append(j, '\n')
		s.json[path.Join("dashboards", d.UID+".json")] = j
		m := meta(d.UID+"-dashboard", map[string]string{"grafana_dashboard": "1"})
		m["annotations"] = map[string]string{"grafana_folder": "gofit"}
		s.dashboards = append(s.dashboards, map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap", "metadata": m,
			"data": map[string]string{d.UID + ".json": string(j)},
		})
	}
	return s, nil
}

// encode writes docs as one YAML stream under the generated-file header.
func encode(name string, docs ...any) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header)
	for i, d := range docs {
		if i > 0 {
			b.WriteString("---\n")
		}
		e := yaml.NewEncoder(&b)
		e.SetIndent(2)
		if err := e.Encode(d); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := e.Close(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return b.Bytes(), nil
}

// Files returns deploy/monitoring's files, by path relative to it.
func Files(p Params) (map[string][]byte, error) {
	s, err := objects(p)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	put := func(name string, docs ...any) error {
		b, err := encode(name, docs...)
		out[name] = b
		return err
	}
	if err := put("rules.yaml", map[string]any{"groups": s.groups}); err != nil {
		return nil, err
	}
	if err := put("prometheusrule.yaml", s.rule); err != nil {
		return nil, err
	}
	if err := put("podmonitors.yaml", s.monitors...); err != nil {
		return nil, err
	}
	if err := put("metrics-reader.yaml", s.readers...); err != nil {
		return nil, err
	}
	if err := put("scrape-configs.yaml", map[string]any{"scrape_configs": s.scrapes}); err != nil {
		return nil, err
	}
	for name, j := range s.json {
		out[name] = j
	}
	if err := put("dashboards.yaml", s.dashboards...); err != nil {
		return nil, err
	}
	if err := put("kustomization.yaml", map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
		"resources": []string{"prometheusrule.yaml", "podmonitors.yaml", "metrics-reader.yaml", "dashboards.yaml"},
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// ChartFiles returns the chart's copy of the same objects
// (charts/gofit/files/monitoring), one object a file named KIND-NAME.yaml,
// so templates/monitoring.yaml can switch each kind on or off and set the
// release's namespaces and labels without parsing a YAML stream. A Helm
// chart cannot read files outside its directory, hence a copy; the
// generator writes both and TestCheckedIn fails when either is stale.
//
// The webhook's timeoutSeconds is a value of the chart, and an alert
// (GofitWebhookLatencyNearTimeout) and a dashboard panel follow it: the
// copy is written with ChartTimeoutSentinel for p.WebhookTimeoutSeconds,
// and params.json tells the template what to write over it (the
// sentinel and p.WebhookLatencyShare); the template fails if a sentinel
// is left.
func ChartFiles(p Params) (map[string][]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	cp := p
	cp.WebhookTimeoutSeconds = ChartTimeoutSentinel
	cp.CAdvisorSelector, cp.KubeStateSelector, cp.APIServerSelector = chartCAdvisorSentinel, chartKubeStateSentinel, chartAPIServerSentinel
	cp.ClusterLabel, cp.chartSentinels = chartClusterSentinel, true
	s, err := objects(cp)
	if err != nil {
		return nil, err
	}
	params, err := json.MarshalIndent(map[string]any{
		"webhookTimeoutSentinel": num(ChartTimeoutSentinel),
		"webhookLatencySentinel": num(p.WebhookLatencyShare * ChartTimeoutSentinel),
		"webhookLatencyShare":    p.WebhookLatencyShare,
		"cadvisorSentinel":       chartCAdvisorSentinel,
		"kubeStateSentinel":      chartKubeStateSentinel,
		"apiserverSentinel":      chartAPIServerSentinel,
		"clusterSentinel":        chartClusterSentinel,
		"roundingSentinel":       chartRoundingSentinel,
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{"params.json": append(params, '\n')}
	all := append(append([]any{s.rule}, s.monitors...), s.dashboards...)
	for _, o := range all {
		m := o.(map[string]any)
		name := strings.ToLower(m["kind"].(string)) + "-" + m["metadata"].(map[string]any)["name"].(string) + ".yaml"
		b, err := encode(name, o)
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

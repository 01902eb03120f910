package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/kube/agent"
)

// TestQoSConfigChecked: the chart rendered any qosConfig into the QoS
// ConfigMap, and an agent that restarts on one that does not parse or
// check writes nothing (issue 37). The chart now refuses such a config,
// naming the value and the field, and what it renders the agent takes.
func TestQoSConfigChecked(t *testing.T) {
	qos := func(field, v string) string {
		b, _ := json.Marshal(map[string]any{"node": map[string]any{"qosConfig": map[string]any{"create": true, field: v}}})
		return string(b)
	}
	const rq, mq = "resourceQOSConfig", "memoryQOS"
	for _, tc := range []struct{ values, want string }{
		{qos(rq, `{"clusterStrategy": {`), "node.qosConfig.resourceQOSConfig: resource-qos-config is not a JSON object: unexpected end of JSON input"},
		{qos(rq, `[]`), "node.qosConfig.resourceQOSConfig: resource-qos-config is not a JSON object"},
		{qos(rq, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"minLimitPercent":150}}}}`),
			"node.qosConfig.resourceQOSConfig: clusterStrategy.lsClass.memoryQOS.minLimitPercent: 150 is outside 0..100"},
		{qos(rq, `{"clusterStrategy":{"beClass":{"memoryQOS":{"throttlingPercent":"50"}}}}`),
			"clusterStrategy.beClass.memoryQOS.throttlingPercent: 50 is not a number"},
		{qos(rq, `{"clusterStrategy":{"lsrClass":{"memoryQOS":{"lowLimitPercent":50.5}}}}`),
			"clusterStrategy.lsrClass.memoryQOS.lowLimitPercent: 50.5 is not a whole number"},
		{qos(rq, `{"clusterStrategy":{"lsClass":{"memoryQOS":{"enable":"yes"}}}}`), "clusterStrategy.lsClass.memoryQOS.enable: yes is not true or false"},
		{qos(rq, `{"nodeStrategies":[{"lsClass":{}}]}`), "node.qosConfig.resourceQOSConfig: nodeStrategies[0].nodeSelector: missing"},
		{qos(rq, `{"nodeStrategies":[{"nodeSelector":{},"beClass":{"memoryQOS":{"wmarkMinAdj":-30}}}]}`),
			"nodeStrategies[0].beClass.memoryQOS.wmarkMinAdj: -30 is outside -25..50"},
		{qos(mq, `{"disabledNamespaces": ["kube system"]}`), `node.qosConfig.memoryQOS: disabledNamespaces[0]: "kube system" is not a namespace name`},
		{qos(mq, `{"enabledNamespaces": "prod"}`), "node.qosConfig.memoryQOS: enabledNamespaces: not a list of namespace names"},
		{qos(mq, `nope`), "node.qosConfig.memoryQOS: memory-qos is not a JSON object"},
	} {
		f := filepath.Join(t.TempDir(), "values.json")
		if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := run(t, "template", "gofit", chartDir(), "-f", f)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %s: error %v, want one with %q", tc.values, err, tc.want)
		}
	}

	// Not created: the chart renders no ConfigMap and checks nothing.
	template(t, `{"node":{"qosConfig":{"create":false,"memoryQOS":"nope"}}}`)

	// What it renders (its defaults, and a config with node strategies
	// and an empty key), the agent takes.
	for _, values := range []string{
		`{"node":{"qosConfig":{"create":true}}}`,
		`{"node":{"qosConfig":{"create":true,"memoryQOS":"","resourceQOSConfig":` +
			`"{\"clusterStrategy\":{\"beClass\":{\"memoryQOS\":{\"enable\":false}}},\"nodeStrategies\":[{\"name\":\"big\",\"nodeSelector\":{\"matchLabels\":{\"pool\":\"big\"}},\"lsClass\":{\"memoryQOS\":{\"enable\":true,\"minLimitPercent\":20,\"wmarkScalePermill\":1000,\"priority\":12,\"oomKillGroup\":1}}}],\"cpuQOS\":{}}"}}}`,
	} {
		found := false
		for _, o := range template(t, values) {
			if o.GetKind() != "ConfigMap" || o.GetName() != "slo-controller-config" {
				continue
			}
			found = true
			var cm corev1.ConfigMap
			b, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &cm); err != nil {
				t.Fatal(err)
			}
			if _, _, err := agent.FromConfigMap(&cm); err != nil {
				t.Errorf("values %s: the chart renders a ConfigMap the agent refuses: %v", values, err)
			}
		}
		if !found {
			t.Errorf("values %s: no QoS ConfigMap rendered", values)
		}
	}
}

package agent

import (
	"strings"
	"testing"
)

func TestParseKubeletConfig(t *testing.T) {
	for _, tc := range []struct {
		name, cfg, version string
		active             bool
		reason             string
	}{
		{"1.36 tiered", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  MemoryQoS: true\nmemoryReservationPolicy: TieredReservation\n", "v1.36.1", true, "TieredReservation"},
		{"1.36 gate only throttles", "kind: KubeletConfiguration\nfeatureGates: {MemoryQoS: true}\n", "v1.36.1", true, "0.9"},
		{"1.36 gate off", "kind: KubeletConfiguration\nmemoryReservationPolicy: TieredReservation\n", "v1.36.1", false, "gate is off"},
		{"1.36 default", "kind: KubeletConfiguration\n", "v1.36.3", false, "gate is off"},
		{"1.37 default", "kind: KubeletConfiguration\n", "v1.37.0", true, "None"},
		{"1.37 factor", "kind: KubeletConfiguration\nmemoryThrottlingFactor: 0.8\n", "v1.37.0", true, "0.8"},
		{"1.37 gate off", "kind: KubeletConfiguration\nfeatureGates: {MemoryQoS: false}\nmemoryThrottlingFactor: 0.8\n", "v1.37.0", true, "memory.high max"},
		{"unknown version", "kind: KubeletConfiguration\nfeatureGates: {MemoryQoS: true}\nmemoryThrottlingFactor: 0\n", "", true, "None"},
	} {
		got, err := ParseKubeletConfig("config.yaml", []byte(tc.cfg), tc.version)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Active != tc.active || !strings.Contains(got.Reason, tc.reason) || !strings.Contains(got.Reason, "config.yaml") {
			t.Errorf("%s: %+v, want active %v and a reason with %q", tc.name, got, tc.active, tc.reason)
		}
	}
	for _, bad := range []string{"kind: Pod\n", "memoryThrottlingFactor: 3\n", "featureGates: [1]\n", "memoryReservationPolicy: Hard\n"} {
		if _, err := ParseKubeletConfig("config.yaml", []byte(bad), "v1.36.0"); err == nil || !strings.Contains(err.Error(), "config.yaml") {
			t.Errorf("%q: error %v, want one naming the file", bad, err)
		}
	}
}

package promclient

import "testing"

func TestWorkload(t *testing.T) {
	known := func(kind, name string) (string, string, bool) {
		switch kind + "/" + name {
		case "ReplicaSet/web-5d8f7c":
			return "Rollout", "web", true
		case "Job/nightly-29100":
			return "CronJob", "nightly", true
		case "ReplicaSet/api-7bb9x":
			return "<none>", "<none>", true // a bare ReplicaSet, as kube-state-metrics says it
		}
		return "", "", false
	}
	for _, c := range []struct {
		kind, name string
		up         func(string, string) (string, string, bool)
		want       string
	}{
		{"ReplicaSet", "web-5d8f7c", nil, "Deployment/web"},
		{"ReplicaSet", "web-api-77bb9", nil, "Deployment/web-api"},
		{"ReplicaSet", "my-rs", nil, "ReplicaSet/my-rs"},
		{"ReplicaSet", "cache-primary", nil, "ReplicaSet/cache-primary"},
		{"StatefulSet", "db", nil, "StatefulSet/db"},
		// What kube-state-metrics knows of the controller's owner wins.
		{"ReplicaSet", "web-5d8f7c", known, "Rollout/web"},
		{"Job", "nightly-29100", known, "CronJob/nightly"},
		{"Job", "once", known, "Job/once"},
		// No kube_replicaset_owner series for it: the name still says
		// which Deployment.
		{"ReplicaSet", "shop-6c9d4", known, "Deployment/shop"},
		// A bare ReplicaSet (its owner series says none) stays itself,
		// whatever its name.
		{"ReplicaSet", "api-7bb9x", known, "ReplicaSet/api-7bb9x"},
	} {
		k, n, ok := Workload(c.kind, c.name, c.up)
		if got := k + "/" + n; !ok || got != c.want {
			t.Errorf("Workload(%s, %s) = %s (ok %v), want %s", c.kind, c.name, got, ok, c.want)
		}
	}
	for _, kind := range []string{"", "<none>"} {
		if k, n, ok := Workload(kind, kind, nil); ok {
			t.Errorf("Workload(%q) = %s/%s, want no controller (ok false)", kind, k, n)
		}
	}
}

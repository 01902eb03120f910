package fleet

import "testing"

// TestOwnersWorkload: a container's workload is its pod's controller's
// owner where kube-state-metrics says (a bare ReplicaSet, owner "<none>",
// is itself); a ReplicaSet with no kube_replicaset_owner series (a
// kube-state-metrics that leaves the metric out) is its Deployment by
// name, as the experiments read it, not a workload of its own.
func TestOwnersWorkload(t *testing.T) {
	o := owners{
		pod: map[key][2]string{
			{"", "shop", "web-5d8f7c-x2x9k", ""}: {"ReplicaSet", "web-5d8f7c"},
			{"", "shop", "web-6c9d4-abcde", ""}:  {"ReplicaSet", "web-6c9d4"},
			{"", "shop", "roll-7bb9x-q", ""}:     {"ReplicaSet", "roll-7bb9x"},
			{"", "shop", "nightly-29100-z", ""}:  {"Job", "nightly-29100"},
			{"", "shop", "db-0", ""}:             {"StatefulSet", "db"},
			{"", "shop", "bare-7bb9x-q", ""}:     {"ReplicaSet", "bare-7bb9x"},
		},
		rs: map[key][2]string{
			{"", "shop", "web-5d8f7c", ""}: {"Deployment", "web"},
			{"", "shop", "roll-7bb9x", ""}: {"Rollout", "roll"},
			{"", "shop", "bare-7bb9x", ""}: {"<none>", "<none>"},
		},
		job: map[key][2]string{{"", "shop", "nightly-29100", ""}: {"CronJob", "nightly"}},
	}
	for pod, want := range map[string]string{
		"web-5d8f7c-x2x9k": "Deployment/web",
		"web-6c9d4-abcde":  "Deployment/web", // no series for its ReplicaSet
		"bare-7bb9x-q":     "ReplicaSet/bare-7bb9x",
		"roll-7bb9x-q":     "Rollout/roll",
		"nightly-29100-z":  "CronJob/nightly",
		"db-0":             "StatefulSet/db",
		"bare":             "Pod/bare",
	} {
		w := o.workload(key{"", "shop", pod, "app"})
		if got := w.Kind + "/" + w.Name; got != want || w.Namespace != "shop" {
			t.Errorf("workload of %s = %s in %q, want %s in shop", pod, got, w.Namespace, want)
		}
	}
}

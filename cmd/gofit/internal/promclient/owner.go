package promclient

import "strings"

// Workload is the workload that runs a pod whose controller is kind/name,
// as kube-state-metrics's kube_pod_owner names it (owner_kind,
// owner_name), for every reader that groups pods by workload (the fleet,
// the experiments and their guard):
//   - up, where given, says what kube-state-metrics knows of the
//     controller's own owner (kube_replicaset_owner: a ReplicaSet's
//     Deployment or Rollout; kube_job_owner: a Job's CronJob): known with
//     an owner, that owner is the workload; known with none ("<none>"),
//     the controller is;
//   - else (up not given, or its series absent: a pod gone with its
//     ReplicaSet, or a kube-state-metrics that leaves the metric out) a
//     ReplicaSet named NAME-HASH, HASH a pod-template-hash, is
//     Deployment NAME, as a Deployment names its ReplicaSets;
//   - else the controller is the workload.
//
// kind is "" or "<none>" for a pod without a controller: ok is false.
func Workload(kind, name string, up func(kind, name string) (upKind, upName string, known bool)) (wkind, wname string, ok bool) {
	if kind == "" || kind == "<none>" {
		return "", "", false
	}
	if up != nil {
		if k, n, known := up(kind, name); known {
			if k == "" || k == "<none>" {
				return kind, name, true
			}
			return k, n, true
		}
	}
	if kind == "ReplicaSet" {
		// HASH is of Kubernetes' safe alphabet (no vowels, no 0, 1 or
		// 3), 4 to 10 characters.
		if i := strings.LastIndexByte(name, '-'); i > 0 && len(name)-i-1 >= 4 && len(name)-i-1 <= 10 &&
			strings.Trim(name[i+1:], "bcdfghjklmnpqrstvwxz2456789") == "" {
			return "Deployment", name[:i], true
		}
	}
	return kind, name, true
}

package promclient

import "strings"

// Workload is the workload that runs a pod whose controller is kind/name,
// as kube-state-metrics's kube_pod_owner names it (owner_kind,
// owner_name), for every reader that groups pods by workload (the fleet,
// the experiments and their guard):
//   - up, where given, knows the controller's own controller
//     (kube_replicaset_owner: a ReplicaSet's Deployment or Rollout;
//     kube_job_owner: a Job's CronJob), and its answer wins;
//   - else a ReplicaSet named NAME-HASH, HASH a pod-template-hash, is
//     Deployment NAME: a Deployment names its ReplicaSets so, and the
//     series of a ReplicaSet deleted since (past its revision history
//     limit) are gone with it;
//   - else the controller is the workload.
//
// kind is "" or "<none>" for a pod without a controller: ok is false.
func Workload(kind, name string, up func(kind, name string) (upKind, upName string, ok bool)) (wkind, wname string, ok bool) {
	if kind == "" || kind == "<none>" {
		return "", "", false
	}
	if up != nil {
		if k, n, ok := up(kind, name); ok && k != "" && k != "<none>" {
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

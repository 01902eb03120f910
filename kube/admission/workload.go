package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An experiment is what a user meant by it: its name within one
// workload of one namespace. Two Deployments may each run an experiment
// called gmp; each has its own arms, counts, guard and report.

// AnnotationWorkload on an experiment's Lease names its workload
// (Workload's form).
const AnnotationWorkload = "gofit.dev/experiment-workload"

// Workload names the workload a pod belongs to, from what is known at
// admission: "Deployment/web" for a ReplicaSet's pod whose
// pod-template-hash ends the ReplicaSet's name (a rollout's ReplicaSets
// are one workload), "Rollout/web" for an Argo Rollout's
// (rollouts-pod-template-hash), "Kind/name" of any other controller, ""
// for a pod without one.
func Workload(m *metav1.ObjectMeta) string {
	c := metav1.GetControllerOfNoCopy(m)
	if c == nil {
		return ""
	}
	if c.Kind == "ReplicaSet" && c.APIVersion == "apps/v1" {
		// A Deployment's ReplicaSet, or an Argo Rollout's (its own hash
		// label): the revisions of one rollout are one workload.
		for _, l := range [...]struct{ label, kind string }{{"pod-template-hash", "Deployment"}, {"rollouts-pod-template-hash", "Rollout"}} {
			if h := m.Labels[l.label]; h != "" {
				if name, ok := strings.CutSuffix(c.Name, "-"+h); ok && name != "" {
					return l.kind + "/" + name
				}
			}
		}
	}
	return c.Kind + "/" + c.Name
}

// DescribeWorkload is Workload's value for people: "pods without a
// controller" for "".
func DescribeWorkload(w string) string {
	if w == "" {
		return "pods without a controller"
	}
	return w
}

// ExperimentLease is the name of the Lease that holds experiment name's
// assignments and guard status in workload w: gofit-experiment-NAME-HASH,
// HASH the first 8 hex digits of w's SHA-256, so that the name stays a
// valid one (at most 17+63+9 characters) for any workload.
func ExperimentLease(name, w string) string {
	h := sha256.Sum256([]byte(w))
	return "gofit-experiment-" + name + "-" + hex.EncodeToString(h[:4])
}

// GuardLeaderLease is the experiment guard's leader election Lease. It
// is outside the gofit-experiment- prefix that the Lease policy lets the
// webhook write, so no forged review, and no experiment's Lease, can
// take or reset the guard's lead.
const GuardLeaderLease = "gofit-guard-leader"

// ExperimentLeaseLong is the Lease name for experiment name in workload w
// when ExperimentLease's name is taken by another workload's Lease (two
// workloads whose hashes share their first 32 bits, or a Lease someone
// else made): the first 16 hex digits of the hash, at most 17+63+17
// characters.
func ExperimentLeaseLong(name, w string) string {
	h := sha256.Sum256([]byte(w))
	return "gofit-experiment-" + name + "-" + hex.EncodeToString(h[:8])
}

// LegacyExperimentLease is the Lease name of webhooks before experiments
// were per workload (one experiment of a name per namespace). Such a
// Lease is still used for the workload it names, so an upgrade in the
// middle of an experiment keeps its guard status and its start.
func LegacyExperimentLease(name string) string { return "gofit-experiment-" + name }

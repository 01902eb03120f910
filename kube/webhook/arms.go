package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gofit-dev/gofit/kube/admission"
)

// ArmAssigner gives pods their experiment arms, with the API server as the
// only truth, so that any number of webhook replicas, restarted at any
// moment, agree:
//
//   - the live pods of the experiment in the namespace (listed by label,
//     terminating ones left out) say how many each arm has;
//   - a Lease per experiment holds the assignments made but not yet
//     stored as pods (admission runs before the pod is written), each with
//     a ticket the pod carries in AnnotationArmTicket, so a pod is counted
//     once whether it is still on its way or already stored;
//   - every assignment is written to the Lease with its resourceVersion
//     (optimistic concurrency): of two replicas choosing at once, one
//     conflicts, re-reads both and chooses again.
//
// The Lease is read before the pods are listed: an assignment leaves the
// Lease only after some replica saw its pod stored, so it is never missed
// by both.
//
// The Lease goes with the experiment: it names as its owners the
// controllers (ReplicaSets, StatefulSets, Jobs, ...) of the pods it gave
// arms, so the garbage collector deletes it once the last of them is gone.
// A rollout adds the new ReplicaSet; the Deployment's old ones stay owners
// while it keeps them in its history. Pods without a controller (bare pods)
// give it no owner: such an experiment's Lease stays until it is deleted
// by hand. Losing the Lease loses only assignments on their way (the live
// pods are the counts), and an assignment whose Lease the collector deletes
// between its read and its update writes it anew (the API server creates
// a Lease on update).
type ArmAssigner struct {
	Client kubernetes.Interface
	// PendingTTL drops an assignment whose pod never appeared (a later
	// admission step refused it). 0 means 30 s.
	PendingTTL time.Duration
	// Attempts bounds the conflict retries; 0 means 20.
	Attempts int
	now      func() time.Time
}

// leaseName is the Lease of an experiment (a DNS label, so well within
// a Lease name's 253 characters).
func leaseName(experiment string) string { return "gofit-experiment-" + experiment }

// annotationPending on the Lease holds the pending assignments as JSON.
const annotationPending = "gofit.dev/pending-arms"

type pending struct {
	Ticket string    `json:"ticket"`
	Arm    string    `json:"arm"`
	At     time.Time `json:"at"`
}

// Assign implements admission.ArmAssigner.
func (a *ArmAssigner) Assign(ctx context.Context, pod *corev1.Pod, e *admission.Experiment) (admission.Assignment, error) {
	ns := pod.Namespace
	if ns == "" {
		return admission.Assignment{}, errors.New("the pod has no namespace")
	}
	owner := leaseOwner(pod)
	attempts := a.Attempts
	if attempts <= 0 {
		attempts = 20
	}
	var err error
	for i := range attempts {
		var as admission.Assignment
		as, err = a.try(ctx, ns, owner, e)
		if err == nil {
			return as, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return admission.Assignment{}, err
		}
		// Back off a random few ms, growing, so that replicas that
		// collided do not collide again in step.
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(5*(i+1))))
		select {
		case <-ctx.Done():
			return admission.Assignment{}, fmt.Errorf("experiment %s: %w", e.Name, ctx.Err())
		case <-time.After(time.Duration(n.Int64()+1) * time.Millisecond):
		}
	}
	return admission.Assignment{}, fmt.Errorf("experiment %s: lease %s/%s: still conflicting after %d attempts: %w", e.Name, ns, leaseName(e.Name), attempts, err)
}

// leaseOwner is the owner reference the Lease takes from a pod: its
// controller's, without controller or blockOwnerDeletion (the Lease has
// several owners, and blocking a ReplicaSet's deletion would need the
// right to update its finalizers). Nil for a pod without a controller.
func leaseOwner(pod *corev1.Pod) *metav1.OwnerReference {
	c := metav1.GetControllerOfNoCopy(pod)
	if c == nil || c.UID == "" {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, UID: c.UID}
}

// withOwner adds owner to refs unless a reference to its UID is there.
func withOwner(refs []metav1.OwnerReference, owner *metav1.OwnerReference) []metav1.OwnerReference {
	if owner == nil {
		return refs
	}
	for _, r := range refs {
		if r.UID == owner.UID {
			return refs
		}
	}
	return append(refs, *owner)
}

func (a *ArmAssigner) try(ctx context.Context, ns string, owner *metav1.OwnerReference, e *admission.Experiment) (admission.Assignment, error) {
	now := time.Now
	if a.now != nil {
		now = a.now
	}
	ttl := a.PendingTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	leases := a.Client.CoordinationV1().Leases(ns)
	name := leaseName(e.Name)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return admission.Assignment{}, fmt.Errorf("lease %s/%s: %w", ns, name, err)
	}
	if create {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{admission.LabelExperiment: e.Name, "app.kubernetes.io/managed-by": "gofit"}}}
	}
	var pend []pending
	if s := lease.Annotations[annotationPending]; s != "" {
		if err := json.Unmarshal([]byte(s), &pend); err != nil {
			pend = nil // a hand-edited value: start again from the live pods
		}
	}
	pods, err := a.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{admission.LabelExperiment: e.Name}).String(),
	})
	if err != nil {
		return admission.Assignment{}, fmt.Errorf("list pods of experiment %s in %s: %w", e.Name, ns, err)
	}
	counts := map[string]int{}
	stored := map[string]bool{}
	for _, p := range pods.Items {
		stored[p.Annotations[admission.AnnotationArmTicket]] = true
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		counts[p.Labels[admission.LabelArm]]++
	}
	kept := pend[:0]
	for _, p := range pend {
		if stored[p.Ticket] || now().Sub(p.At) > ttl {
			continue
		}
		kept = append(kept, p)
		counts[p.Arm]++
	}
	ticket, err := newTicket()
	if err != nil {
		return admission.Assignment{}, err
	}
	// Only the arms still open: the guard stops a harmful arm on the
	// Lease, and maxDuration counts from the Lease's creation (the first
	// assignment).
	open := e.OpenArms(lease.Annotations, lease.CreationTimestamp.Time, now())
	as := admission.Assignment{Arm: admission.LeastFilled(open, counts), Ticket: ticket}
	kept = append(kept, pending{Ticket: ticket, Arm: as.Arm, At: now().UTC()})
	b, err := json.Marshal(kept)
	if err != nil {
		return admission.Assignment{}, err
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[annotationPending] = string(b)
	lease.OwnerReferences = withOwner(lease.OwnerReferences, owner)
	if create {
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	} else {
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{}) // conflicts unless lease is current
	}
	if err != nil {
		return admission.Assignment{}, err
	}
	return as, nil
}

func newTicket() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("arm ticket: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// NewArmAssigner reaches the API server through kubeconfig ("" means
// $KUBECONFIG, ~/.kube/config or in-cluster). The webhook's account needs
// to list pods and to get, create and update leases in the namespaces
// that run experiments (deploy/webhook/experiments).
func NewArmAssigner(kubeconfig string) (*ArmAssigner, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("experiments need API access: %w", err)
	}
	// An assignment costs three requests (get, list, update) and more on a
	// conflict; client-go's default of 5 a second would make a
	// ReplicaSet's burst of 20 pods outlast the API server's webhook
	// timeout, and those pods would start unfitted.
	rc.QPS, rc.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("experiments need API access: %w", err)
	}
	return &ArmAssigner{Client: cs}, nil
}

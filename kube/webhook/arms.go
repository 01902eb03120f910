package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gofit-dev/gofit/kube/admission"
)

// ArmAssigner gives pods their experiment arms, with the API server as the
// only truth, so that any number of webhook replicas, restarted at any
// moment, agree:
//
//   - the live pods of the experiment's workload in the namespace say how
//     many each arm has. They are read as metadata only (no spec, no env)
//     from a cache per namespace (an informer on PartialObjectMetadata,
//     selected by the experiment label, without Succeeded or Failed pods),
//     never listed per admission;
//   - a Lease per experiment holds the assignments made but not yet
//     stored as pods (admission runs before the pod is written), each with
//     a ticket the pod carries in AnnotationArmTicket, so a pod is counted
//     once whether it is still on its way or already stored;
//   - every assignment is written to the Lease with its resourceVersion
//     (optimistic concurrency): of two replicas choosing at once, one
//     conflicts, re-reads the Lease and chooses again. Within a replica,
//     one assignment per experiment runs at a time.
//
// An assignment leaves the Lease once this replica's cache has seen its
// pod and it is older than settle: another replica's cache, a moment
// behind, still counts it through the Lease.
//
// An experiment is its name within one workload (the pods' Deployment,
// StatefulSet, ... as known at admission: the controller reference, and
// for a ReplicaSet its pod-template-hash; admission.Workload) of one
// namespace: each workload that runs an experiment of a name has its own
// Lease (admission.ExperimentLease), arms counted over its own pods, and
// its own guard status. A Lease of an older webhook (one per name and
// namespace) is still used for the workload it names.
//
// The Lease goes with the experiment: it names as its owners the
// controllers (ReplicaSets, StatefulSets, Jobs, ...) of the pods it gave
// arms, so the garbage collector deletes it once the last of them is gone.
// Pods without a controller (bare pods) give it no owner: such an
// experiment's Lease stays until it is deleted by hand. Losing the Lease
// loses only assignments on their way, and an assignment whose Lease the
// collector deletes between its read and its update writes it anew.
type ArmAssigner struct {
	Client kubernetes.Interface // Leases
	// Metadata reads the experiments' pods as metadata only.
	Metadata metadata.Interface
	// Namespaces are where experiments may run (the webhook's account
	// has its Role there); empty means any namespace.
	Namespaces []string
	// PendingTTL drops an assignment whose pod never appeared (a later
	// admission step refused it). 0 means 30 s.
	PendingTTL time.Duration
	// Attempts bounds the conflict retries; 0 means 20.
	Attempts int
	// GuardStale is how long an experiment's arms are given out without
	// a judgement from the guard (admission.GuardSilent); past it, new
	// pods get the control alone. 0: arms need no guard.
	GuardStale time.Duration
	now        func() time.Time
	// pick breaks ties between the least filled arms (LeastFilled);
	// nil: math/rand/v2's IntN.
	pick func(n int) int

	// trustReviews skips verifyOwner: for tests of everything else,
	// whose pods name owners that need not exist.
	trustReviews bool

	mu       sync.Mutex
	verified map[types.UID]time.Time // owners the API server has shown, and when
	caches   map[string]*podCache    // by namespace
	locks    map[string]*keyLock     // by namespace/experiment
	stop     chan struct{}
}

// settle is how long an assignment stays in the Lease after its pod was
// seen stored, for the caches of other replicas to catch up.
const settle = 5 * time.Second

// annotationPending on the Lease: the pending assignments as JSON (the
// workload it belongs to is in admission.AnnotationWorkload).
const annotationPending = "gofit.dev/pending-arms"

type pending struct {
	Ticket string    `json:"ticket"`
	Arm    string    `json:"arm"`
	At     time.Time `json:"at"`
	Seen   time.Time `json:"seen,omitzero"` // when its pod was first seen stored
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Assign implements admission.ArmAssigner.
func (a *ArmAssigner) Assign(ctx context.Context, pod *corev1.Pod, e *admission.Experiment) (admission.Assignment, error) {
	ns := pod.Namespace
	if ns == "" {
		return admission.Assignment{}, errors.New("the pod has no namespace")
	}
	if len(a.Namespaces) > 0 && !slices.Contains(a.Namespaces, ns) {
		return admission.Assignment{}, fmt.Errorf("experiments are not enabled in namespace %s (the webhook runs them in %s)", ns, strings.Join(a.Namespaces, ", "))
	}
	// Nothing is written, and no cache started, for a review whose owner
	// the API server does not hold: /mutate may be reached by a forged
	// review, not only by the API server.
	if err := a.verifyOwner(ctx, pod); err != nil {
		return admission.Assignment{}, err
	}
	pc, err := a.cache(ctx, ns)
	if err != nil {
		return admission.Assignment{}, err
	}
	wl := admission.Workload(&pod.ObjectMeta)
	unlock, err := a.lock(ctx, ns+"/"+e.Name+"/"+wl)
	if err != nil {
		return admission.Assignment{}, fmt.Errorf("experiment %s of %s: waiting for the assignment before: %w", e.Name, admission.DescribeWorkload(wl), err)
	}
	defer unlock()
	owner := leaseOwner(pod)
	attempts := a.Attempts
	if attempts <= 0 {
		attempts = 20
	}
	for i := range attempts {
		var as admission.Assignment
		as, err = a.try(ctx, ns, owner, wl, pc, e)
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
	return admission.Assignment{}, fmt.Errorf("experiment %s: lease %s/%s: still conflicting after %d attempts: %w", e.Name, ns, admission.ExperimentLease(e.Name, wl), attempts, err)
}

// keyLock is one experiment's turn: a channel of one, so that waiting for
// it ends with the admission's deadline.
type keyLock struct {
	ch    chan struct{}
	users int
}

func (a *ArmAssigner) lock(ctx context.Context, key string) (func(), error) {
	a.mu.Lock()
	if a.locks == nil {
		a.locks = map[string]*keyLock{}
	}
	l := a.locks[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		a.locks[key] = l
	}
	l.users++
	a.mu.Unlock()
	done := func() {
		a.mu.Lock()
		if l.users--; l.users == 0 {
			delete(a.locks, key)
		}
		a.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// podCache is the metadata of a namespace's experiment pods.
type podCache struct {
	inf     cache.SharedIndexInformer
	mu      sync.Mutex
	lastErr error
}

// byExperiment indexes pods by their experiment label.
const byExperiment = "experiment"

// Warm starts the pod cache of every namespace in Namespaces, so that
// the first admission there does not spend its arm deadline on the
// cache's first list: under a slow API server (the e2e node's emulated
// CPUs) that list alone took longer than the deadline. It returns at
// once; each cache syncs in the background until ctx ends.
func (a *ArmAssigner) Warm(ctx context.Context) {
	for _, ns := range a.Namespaces {
		go func() { _, _ = a.cache(ctx, ns) }()
	}
}

// cache returns the namespace's pod cache, started on first use and
// synced within ctx.
func (a *ArmAssigner) cache(ctx context.Context, ns string) (*podCache, error) {
	if a.Metadata == nil {
		return nil, errors.New("no metadata client to read the experiment's pods with")
	}
	a.mu.Lock()
	if a.caches == nil {
		a.caches = map[string]*podCache{}
		a.stop = make(chan struct{})
	}
	pc := a.caches[ns]
	if pc == nil {
		f := metadatainformer.NewFilteredSharedInformerFactory(a.Metadata, 0, ns, func(o *metav1.ListOptions) {
			o.LabelSelector = admission.LabelExperiment
			// A finished pod leaves the cache (its watch event is a
			// delete): metadata alone carries no phase.
			o.FieldSelector = "status.phase!=Succeeded,status.phase!=Failed"
		})
		inf := f.ForResource(podsResource).Informer()
		pc = &podCache{inf: inf}
		_ = inf.SetTransform(slimPod)
		_ = inf.AddIndexers(cache.Indexers{byExperiment: func(obj any) ([]string, error) {
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
				return []string{m.Labels[admission.LabelExperiment]}, nil
			}
			return nil, nil
		}})
		_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			pc.mu.Lock()
			pc.lastErr = err
			pc.mu.Unlock()
		})
		a.caches[ns] = pc
		go inf.Run(a.stop)
	}
	a.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), pc.inf.HasSynced) {
		pc.mu.Lock()
		err := pc.lastErr
		pc.mu.Unlock()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("the pods of namespace %s are not cached yet: %w", ns, err)
	}
	return pc, nil
}

// slimPod keeps of a pod's metadata only what assignment reads: the
// cache's memory is then a few hundred bytes a pod.
func slimPod(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	keep := func(src map[string]string, keys ...string) map[string]string {
		var out map[string]string
		for _, k := range keys {
			if v, ok := src[k]; ok {
				if out == nil {
					out = map[string]string{}
				}
				out[k] = v
			}
		}
		return out
	}
	return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp, OwnerReferences: m.OwnerReferences,
		Labels:      keep(m.Labels, admission.LabelExperiment, admission.LabelArm, "pod-template-hash", "rollouts-pod-template-hash"),
		Annotations: keep(m.Annotations, admission.AnnotationArmTicket),
	}}, nil
}

// Close stops the pod caches.
func (a *ArmAssigner) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stop != nil {
		close(a.stop)
		a.stop, a.caches = nil, nil
	}
}

// ErrUnverifiedOwner is the error for a review whose pod's owner the API
// server does not hold (or holds under another UID), or cannot be
// checked: no arm, no Lease write, no cache started.
var ErrUnverifiedOwner = errors.New("the pod's owner is not one the API server holds")

// ownerResources are the controllers whose existence verifyOwner checks:
// those that create pods in Kubernetes itself (an Argo Rollout's pods
// are its ReplicaSets').
var ownerResources = map[schema.GroupVersionKind]schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Kind: "ReplicaSet"}:  {Group: "apps", Version: "v1", Resource: "replicasets"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}: {Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"}:   {Group: "apps", Version: "v1", Resource: "daemonsets"},
	{Group: "batch", Version: "v1", Kind: "Job"}:        {Group: "batch", Version: "v1", Resource: "jobs"},
}

// verifyOwner checks, before anything is written or cached, that the
// controller the review's pod names exists in the pod's namespace with
// that UID, by a GET of its metadata from the API server (remembered by
// UID for verifiedTTL, so a workload's pods admitted together cost one). A GET rather than an
// informer: a ReplicaSet's first pods are admitted moments after it is
// stored, before an informer would hold it, and an informer over every
// ReplicaSet of a namespace costs memory and list rights. A pod without
// a controller has nothing to check: it may run an experiment only in a
// namespace --experiment-namespaces lists, the administrator's opt-in.
func (a *ArmAssigner) verifyOwner(ctx context.Context, pod *corev1.Pod) error {
	if a.trustReviews {
		return nil
	}
	c := metav1.GetControllerOfNoCopy(pod)
	if c == nil {
		if slices.Contains(a.Namespaces, pod.Namespace) {
			return nil
		}
		return fmt.Errorf("%w: a pod without a controller may run an experiment only in a namespace --experiment-namespaces lists", ErrUnverifiedOwner)
	}
	gv, err := schema.ParseGroupVersion(c.APIVersion)
	if err != nil {
		return fmt.Errorf("%w: owner apiVersion %q: %v", ErrUnverifiedOwner, c.APIVersion, err)
	}
	gvr, ok := ownerResources[gv.WithKind(c.Kind)]
	if !ok {
		return fmt.Errorf("%w: its controller %s %s is not a kind the webhook checks (ReplicaSet, StatefulSet, DaemonSet, Job)", ErrUnverifiedOwner, c.Kind, c.Name)
	}
	now := time.Now
	if a.now != nil {
		now = a.now
	}
	a.mu.Lock()
	seen, known := a.verified[c.UID]
	a.mu.Unlock()
	if known && now().Sub(seen) < verifiedTTL {
		return nil
	}
	if a.Metadata == nil {
		return errors.New("no metadata client to check the pod's owner with")
	}
	m, err := a.Metadata.Resource(gvr).Namespace(pod.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s %s/%s does not exist", ErrUnverifiedOwner, c.Kind, pod.Namespace, c.Name)
	case err != nil:
		return fmt.Errorf("the pod's owner %s %s/%s: %w", c.Kind, pod.Namespace, c.Name, err)
	case m.UID != c.UID:
		return fmt.Errorf("%w: %s %s/%s has UID %s, the pod names %s", ErrUnverifiedOwner, c.Kind, pod.Namespace, c.Name, m.UID, c.UID)
	}
	if err := a.notFlaggerPrimary(ctx, pod.Namespace, c.Kind, m); err != nil {
		return err
	}
	a.mu.Lock()
	if a.verified == nil || len(a.verified) >= 10000 {
		a.verified = map[types.UID]time.Time{} // bounded: forget, and check again
	}
	a.verified[c.UID] = now()
	a.mu.Unlock()
	return nil
}

// ErrFlaggerPrimary is the error for a pod of the Deployment Flagger
// makes from a Canary's target (NAME-primary, controlled by the Canary):
// Flagger copies the target's pod template into it at each promotion,
// experiment annotation included, and an experiment there would run on
// the stable side, which no canary analysis watches. Its pods get the
// normal fit; the experiment runs on the target's pods.
var ErrFlaggerPrimary = errors.New("the pod is of Flagger's primary Deployment: experiments run on the canary's target, not on the copy Flagger promotes")

var deploymentsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// notFlaggerPrimary refuses the pod's verified owner when it is, or
// belongs to, Flagger's primary: a Deployment (above a ReplicaSet) or a
// DaemonSet named NAME-primary and controlled by a flagger.app Canary.
// Owners of other names cost no request. kind is the owner's, from the
// pod's reference (metadata reads say PartialObjectMetadata).
func (a *ArmAssigner) notFlaggerPrimary(ctx context.Context, ns, kind string, owner *metav1.PartialObjectMetadata) error {
	canary := func(kind, name string, m *metav1.PartialObjectMetadata) error {
		if c := metav1.GetControllerOfNoCopy(m); c != nil && c.Kind == "Canary" && strings.HasPrefix(c.APIVersion, "flagger.app/") {
			return fmt.Errorf("%w (%s %s/%s, Canary %s)", ErrFlaggerPrimary, kind, ns, name, c.Name)
		}
		return nil
	}
	switch kind {
	case "DaemonSet":
		if strings.HasSuffix(owner.Name, "-primary") {
			return canary("DaemonSet", owner.Name, owner)
		}
	case "ReplicaSet":
		d := metav1.GetControllerOfNoCopy(owner)
		if d == nil || d.Kind != "Deployment" || !strings.HasSuffix(d.Name, "-primary") {
			return nil
		}
		m, err := a.Metadata.Resource(deploymentsResource).Namespace(ns).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("whether Deployment %s/%s is Flagger's primary: %w", ns, d.Name, err)
		}
		return canary("Deployment", d.Name, m)
	}
	return nil
}

// verifiedTTL is how long an owner the API server has shown is taken as
// existing: a workload's pods admitted together cost one GET, and an
// owner deleted since (whose UID a forged review may still name) is
// refused again within this long.
const verifiedTTL = 2 * time.Minute

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

// ErrLeaseTaken is the error when both names an experiment's Lease may
// have in a workload hold another workload's Lease.
var ErrLeaseTaken = errors.New("the experiment's Lease is another workload's")

func (a *ArmAssigner) try(ctx context.Context, ns string, owner *metav1.OwnerReference, wl string, pc *podCache, e *admission.Experiment) (admission.Assignment, error) {
	now := time.Now
	if a.now != nil {
		now = a.now
	}
	ttl := a.PendingTTL
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	leases := a.Client.CoordinationV1().Leases(ns)
	// A Lease found by name is this workload's only if it says so: the
	// name carries 32 bits of the workload's hash, and another
	// workload's Lease (a collision) or one someone else made would
	// otherwise merge two workloads' arms and guard status, and be
	// rewritten as this one's. On a mismatch the name is derived again
	// with 64 bits; a mismatch there too is refused.
	var name string
	var lease *coordinationv1.Lease
	var err error
	for _, n := range []string{admission.ExperimentLease(e.Name, wl), admission.ExperimentLeaseLong(e.Name, wl)} {
		name = n
		lease, err = leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil || lease.Annotations[admission.AnnotationWorkload] == wl {
			break
		}
		err = fmt.Errorf("%w: it names workload %q, not %q", ErrLeaseTaken, lease.Annotations[admission.AnnotationWorkload], admission.DescribeWorkload(wl))
	}
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return admission.Assignment{}, fmt.Errorf("lease %s/%s: %w", ns, name, err)
	}
	if create {
		// An older webhook's Lease for this workload: keep using it, its
		// guard status and its start (maxDuration) with it. One from
		// before Leases named their workload is this workload's when no
		// other workload has live pods of the experiment (the rule of
		// that time: the experiment was the first asker's).
		legacy := admission.LegacyExperimentLease(e.Name)
		old, err := leases.Get(ctx, legacy, metav1.GetOptions{})
		switch {
		case err != nil && !apierrors.IsNotFound(err):
			return admission.Assignment{}, fmt.Errorf("lease %s/%s: %w", ns, legacy, err)
		case err != nil:
		default:
			owner, named := old.Annotations[admission.AnnotationWorkload]
			if named && owner == wl || !named && onlyWorkload(pc, e.Name, wl) {
				lease, create = old, false
			}
		}
	}
	if create {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels:      map[string]string{admission.LabelExperiment: e.Name, "app.kubernetes.io/managed-by": "gofit"},
			Annotations: map[string]string{admission.AnnotationWorkload: wl}}}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	// A spec the Lease has not run is a new experiment under an old name
	// (admission.RunFor): it starts now, with no arm stopped and nothing
	// pending, whatever the old run left.
	run, fresh := admission.RunFor(&lease.ObjectMeta, e, now())
	if fresh {
		delete(lease.Annotations, admission.AnnotationGuard)
		delete(lease.Annotations, annotationPending)
	}
	lease.Annotations[admission.AnnotationRun] = run.String()
	var pend []pending
	if s := lease.Annotations[annotationPending]; s != "" {
		if err := json.Unmarshal([]byte(s), &pend); err != nil {
			pend = nil // a hand-edited value: start again from the live pods
		}
	}
	// The cache is read after the Lease: an assignment leaves the Lease
	// only after its pod was seen stored, so it is never missed by both.
	objs, err := pc.inf.GetIndexer().ByIndex(byExperiment, e.Name)
	if err != nil {
		return admission.Assignment{}, fmt.Errorf("pods of experiment %s in %s: %w", e.Name, ns, err)
	}
	counts := map[string]int{} // arm -> live pods of this workload
	stored := map[string]bool{}
	for _, o := range objs {
		p, ok := o.(*metav1.PartialObjectMetadata)
		if !ok || p.DeletionTimestamp != nil || admission.Workload(&p.ObjectMeta) != wl {
			continue
		}
		stored[p.Annotations[admission.AnnotationArmTicket]] = true
		counts[p.Labels[admission.LabelArm]]++
	}
	kept := pend[:0]
	for _, p := range pend {
		if now().Sub(p.At) > ttl || !p.Seen.IsZero() && now().Sub(p.Seen) > settle {
			continue
		}
		if stored[p.Ticket] && p.Seen.IsZero() {
			p.Seen = now().UTC()
		}
		kept = append(kept, p)
	}
	for _, p := range kept {
		if !stored[p.Ticket] && p.Seen.IsZero() {
			counts[p.Arm]++ // on its way: not in the cache yet
		}
	}
	ticket, err := newTicket()
	if err != nil {
		return admission.Assignment{}, err
	}
	// Only the arms still open: the guard stops a harmful arm on the
	// Lease, and maxDuration counts from the run's start (its first
	// assignment).
	open := e.OpenArms(lease.Annotations, run.Start, now())
	// Fail closed: with no judgement from the guard for too long, nobody
	// would stop a harmful arm.
	note, silent := e.GuardSilent(lease.Annotations, run.Start, now(), a.GuardStale)
	if silent {
		open = []string{e.Control}
	}
	pick := a.pick
	if pick == nil {
		pick = mrand.IntN
	}
	as := admission.Assignment{Arm: admission.LeastFilled(open, counts, pick), Ticket: ticket, Note: note}
	kept = append(kept, pending{Ticket: ticket, Arm: as.Arm, At: now().UTC()})
	b, err := json.Marshal(kept)
	if err != nil {
		return admission.Assignment{}, err
	}
	lease.Annotations[annotationPending] = string(b)
	lease.Annotations[admission.AnnotationWorkload] = wl
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

// onlyWorkload reports whether no live pod of experiment name in the
// cache belongs to a workload other than wl.
func onlyWorkload(pc *podCache, name, wl string) bool {
	objs, err := pc.inf.GetIndexer().ByIndex(byExperiment, name)
	if err != nil {
		return false
	}
	for _, o := range objs {
		if p, ok := o.(*metav1.PartialObjectMetadata); ok && p.DeletionTimestamp == nil && admission.Workload(&p.ObjectMeta) != wl {
			return false
		}
	}
	return true
}

func newTicket() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("arm ticket: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// NewArmAssigner reaches the API server through kubeconfig ("" means
// $KUBECONFIG, ~/.kube/config or in-cluster), for experiments in
// namespaces (none: any). The webhook's account needs, in each of them,
// to list and watch pods and to get, create and update leases
// (deploy/webhook/experiments, the chart's webhook.experiments.namespaces).
func NewArmAssigner(kubeconfig string, namespaces []string) (*ArmAssigner, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("experiments need API access: %w", err)
	}
	// An assignment costs two requests (get and update the Lease) and
	// more on a conflict; client-go's default of 5 a second would make a
	// ReplicaSet's burst of 20 pods outlast the API server's webhook
	// timeout, and those pods would start unfitted.
	rc.QPS, rc.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("experiments need API access: %w", err)
	}
	md, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("experiments need API access: %w", err)
	}
	return &ArmAssigner{Client: cs, Metadata: md, Namespaces: namespaces}, nil
}

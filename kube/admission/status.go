package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationGuard on an experiment's Lease is what the guard (gofit
// experiment guard) decided: the arms it stopped and whether the
// experiment ran out its maxDuration. The arm assigner reads it through
// OpenArms, so that a stopped arm gets no new pods; the guard is its only
// writer. JSON, see GuardStatus.
const AnnotationGuard = "gofit.dev/guard"

// GuardStatus is the value of AnnotationGuard.
type GuardStatus struct {
	// Stopped arms, by name: new pods no longer get them.
	Stopped map[string]ArmStop `json:"stopped,omitempty"`
	// Expired is when the guard first saw the experiment past its
	// maxDuration (the assigner needs no guard for that: see OpenArms).
	Expired *time.Time `json:"expired,omitempty"`
	// Looked is when the guard last judged the experiment on its data
	// (a look Prometheus failed or had no series for does not count):
	// the webhook gives new pods the control alone once it is older than
	// its bound (GuardSilent).
	Looked *time.Time `json:"looked,omitempty"`
}

// ArmStop is why and when an arm was stopped.
type ArmStop struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// ParseGuardStatus reads AnnotationGuard from a Lease's annotations; no
// annotation is the zero status.
func ParseGuardStatus(annotations map[string]string) (GuardStatus, error) {
	var s GuardStatus
	v, ok := annotations[AnnotationGuard]
	if !ok || v == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return GuardStatus{}, fmt.Errorf("annotation %s: %w", AnnotationGuard, err)
	}
	return s, nil
}

// String is the annotation's value.
func (s GuardStatus) String() string {
	b, _ := json.Marshal(s) // of plain fields: cannot fail
	return string(b)
}

// OpenArms are the arms a new pod may get: every arm but those the guard
// stopped, and only the control once the experiment has run for its
// maxDuration since started (when its first arm was assigned). A status
// that cannot be read leaves every arm open: the guard, not a hand edit,
// stops arms. The control is always open.
func (e *Experiment) OpenArms(guard map[string]string, started, now time.Time) []string {
	if d := e.Deadline(); d > 0 && !started.IsZero() && now.Sub(started) >= d {
		return []string{e.Control}
	}
	s, err := ParseGuardStatus(guard)
	if err != nil {
		return e.ArmNames()
	}
	return slices.DeleteFunc(e.ArmNames(), func(a string) bool {
		_, stopped := s.Stopped[a]
		return stopped && a != e.Control
	})
}

// AnnotationArmNote on a pod says why it got the control whatever the
// spread of arms (the guard has not judged the experiment for too long).
const AnnotationArmNote = "gofit.dev/arm-note"

// GuardSilent reports whether the guard has judged the experiment on its
// Lease (annotations guard) within bound of now, counting from the run's
// start (zero: a run starting now); bound 0 never is. Without a recent
// judgement nobody would stop a harmful arm: the experiment fails closed
// and note says so, for the pod's annotation. An unreadable status is
// silence too.
func (e *Experiment) GuardSilent(guard map[string]string, started, now time.Time, bound time.Duration) (note string, silent bool) {
	if bound <= 0 {
		return "", false
	}
	since := started
	if since.IsZero() {
		since = now
	}
	s, err := ParseGuardStatus(guard)
	if err == nil && s.Looked != nil && s.Looked.After(since) {
		since = *s.Looked
	}
	if now.Sub(since) <= bound {
		return "", false
	}
	what := "has not judged this experiment since its run started at " + since.UTC().Format(time.RFC3339)
	if err == nil && s.Looked != nil && !s.Looked.Before(since) {
		what = "last judged this experiment at " + since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("the experiment guard %s, more than %v ago: new pods get the control %s until it judges again", what, bound, e.Control), true
}

// Deadline is the experiment's maxDuration, 0 without one.
func (e *Experiment) Deadline() time.Duration {
	d, _ := time.ParseDuration(e.MaxDuration) // checked by ParseExperiment
	return d
}

// AnnotationRun on an experiment's Lease is its run: the digests of the
// experiment specs it has run, the current first, and when the current
// run started. The arm assigner writes it; see RunFor. JSON, see Run.
const AnnotationRun = "gofit.dev/run"

// maxRuns bounds the digests a Lease keeps.
const maxRuns = 8

// Run is the value of AnnotationRun.
type Run struct {
	// Specs are the Digests of the specs run on the Lease, newest first.
	Specs []string `json:"specs"`
	// Start is when the current run's first arm was assigned: its
	// maxDuration and the guard's looks count from it.
	Start time.Time `json:"start"`
}

// Digest names the experiment's spec as parsed (so a re-indented
// annotation is the same spec): 16 hex digits of its SHA-256.
func (e *Experiment) Digest() string {
	b, _ := json.Marshal(e) // of plain fields: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ParseRun reads AnnotationRun; no annotation, or one that cannot be
// read, is the zero Run.
func ParseRun(annotations map[string]string) Run {
	var r Run
	if v := annotations[AnnotationRun]; v != "" {
		if json.Unmarshal([]byte(v), &r) != nil {
			return Run{}
		}
	}
	return r
}

// String is the annotation's value.
func (r Run) String() string {
	b, _ := json.Marshal(r) // of plain fields: cannot fail
	return string(b)
}

// RunStart is when the Lease's current run started: its AnnotationRun,
// else (a Lease of an older webhook) its creation.
func RunStart(lease *metav1.ObjectMeta) time.Time {
	if r := ParseRun(lease.Annotations); !r.Start.IsZero() {
		return r.Start
	}
	return lease.CreationTimestamp.Time
}

// RunFor is the rule that keeps a new experiment under an old name from
// inheriting an old run: a spec the Lease has not run before starts a new
// run (started now, no arm stopped, nothing pending: fresh is true),
// while the current spec or an earlier run's (a pod of the old
// ReplicaSet during a rollout) stays in the current run. A Lease that
// records no run (an older webhook's) is taken as this spec's, started
// at its creation.
func RunFor(lease *metav1.ObjectMeta, e *Experiment, now time.Time) (r Run, fresh bool) {
	d := e.Digest()
	r = ParseRun(lease.Annotations)
	switch {
	case len(r.Specs) == 0:
		start := lease.CreationTimestamp.Time
		if start.IsZero() {
			start = now
		}
		return Run{Specs: []string{d}, Start: start.UTC()}, false
	case slices.Contains(r.Specs, d):
		return r, false
	}
	specs := append([]string{d}, r.Specs...)
	return Run{Specs: specs[:min(len(specs), maxRuns)], Start: now.UTC()}, true
}

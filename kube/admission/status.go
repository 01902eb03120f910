package admission

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
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

// Deadline is the experiment's maxDuration, 0 without one.
func (e *Experiment) Deadline() time.Duration {
	d, _ := time.ParseDuration(e.MaxDuration) // checked by ParseExperiment
	return d
}

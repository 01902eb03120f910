package admission

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestOpenArms(t *testing.T) {
	e, err := ParseExperiment(`{name: gc, control: base, maxDuration: 2h, arms: [{name: base, fit: gofit}, {name: low, env: {GOGC: "50"}}, {name: high, env: {GOGC: "200"}}]}`)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stopped := GuardStatus{Stopped: map[string]ArmStop{"low": {At: start, Reason: "restarts"}, "base": {At: start}}}
	for _, c := range []struct {
		name  string
		guard map[string]string
		now   time.Time
		want  []string
	}{
		{"no status", nil, start.Add(time.Hour), []string{"base", "low", "high"}},
		{"stopped arm; the control never", map[string]string{AnnotationGuard: stopped.String()}, start.Add(time.Hour), []string{"base", "high"}},
		{"past maxDuration", nil, start.Add(2 * time.Hour), []string{"base"}},
		{"unreadable status", map[string]string{AnnotationGuard: "{"}, start, []string{"base", "low", "high"}},
	} {
		if got := e.OpenArms(c.guard, start, c.now); !slices.Equal(got, c.want) {
			t.Errorf("%s: open arms %v, want %v", c.name, got, c.want)
		}
	}
	if _, err := ParseExperiment(`{name: gc, maxDuration: soon, arms: [{name: a, fit: gofit}, {name: b, fit: none}]}`); err == nil || !strings.Contains(err.Error(), "field maxDuration") {
		t.Errorf("maxDuration soon: %v", err)
	}
	if _, err := ParseGuardStatus(map[string]string{AnnotationGuard: "{"}); err == nil || !strings.Contains(err.Error(), AnnotationGuard) {
		t.Errorf("malformed status: %v", err)
	}
}

// TestRunFor: the run rule (issue 53). A Lease without a run (an older
// webhook's) is the spec's, from its creation; the current spec and an
// earlier one stay in the run; a new spec starts one now, keeping at most
// maxRuns digests; an unreadable annotation is no run.
func TestRunFor(t *testing.T) {
	created := time.Unix(1_700_000_000, 0).UTC()
	now := created.Add(3 * time.Hour)
	spec := func(gogc string) *Experiment {
		e, err := ParseExperiment("name: g\narms: [{name: a, fit: gofit}, {name: b, env: {GOGC: '" + gogc + "'}}]")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	meta := &metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created), Annotations: map[string]string{}}
	r, fresh := RunFor(meta, spec("50"), now)
	if fresh || !r.Start.Equal(created) || len(r.Specs) != 1 {
		t.Errorf("an older webhook's Lease: %+v fresh %v, want the spec's from its creation", r, fresh)
	}
	meta.Annotations[AnnotationRun] = r.String()
	if r, fresh := RunFor(meta, spec("50"), now); fresh || !r.Start.Equal(created) {
		t.Errorf("the current spec: %+v fresh %v", r, fresh)
	}
	for i := range maxRuns + 2 {
		r, fresh := RunFor(meta, spec(fmt.Sprint(100+i)), now)
		if !fresh || !r.Start.Equal(now) || r.Specs[0] != spec(fmt.Sprint(100+i)).Digest() || len(r.Specs) > maxRuns {
			t.Fatalf("new spec %d: %+v fresh %v", i, r, fresh)
		}
		meta.Annotations[AnnotationRun] = r.String()
	}
	if r, fresh := RunFor(meta, spec("105"), now.Add(time.Hour)); fresh || !r.Start.Equal(now) {
		t.Errorf("an earlier run's spec: %+v fresh %v, want the current run", r, fresh)
	}
	meta.Annotations[AnnotationRun] = "{"
	if r, fresh := RunFor(meta, spec("50"), now); fresh || !r.Start.Equal(created) {
		t.Errorf("an unreadable run: %+v fresh %v", r, fresh)
	}
}

// TestGuardSilent (issue 53, fail closed): arms are given out only while
// the guard keeps judging; counting from the run's start, so that a new
// run has the bound to be judged first.
func TestGuardSilent(t *testing.T) {
	e, err := ParseExperiment("name: g\narms: [{name: a, fit: gofit}, {name: b, fit: none}]")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	looked := func(at time.Time) map[string]string {
		return map[string]string{AnnotationGuard: GuardStatus{Looked: &at}.String()}
	}
	for _, tc := range []struct {
		name    string
		guard   map[string]string
		started time.Time
		now     time.Time
		bound   time.Duration
		silent  bool
		note    string
	}{
		{"a new run, within the bound", nil, start, start.Add(10 * time.Minute), 15 * time.Minute, false, ""},
		{"a new run never judged", nil, start, start.Add(16 * time.Minute), 15 * time.Minute, true, "has not judged this experiment since its run started at 2026-12-06T10:00:00Z"},
		{"a first assignment (no start yet)", nil, time.Time{}, start, 15 * time.Minute, false, ""},
		{"judged recently", looked(start.Add(time.Hour)), start, start.Add(70 * time.Minute), 15 * time.Minute, false, ""},
		{"judged long ago", looked(start.Add(time.Hour)), start, start.Add(80 * time.Minute), 15 * time.Minute, true, "last judged this experiment at 2026-12-06T11:00:00Z, more than 15m0s ago: new pods get the control a"},
		{"a look from before the run", looked(start.Add(-time.Hour)), start, start.Add(16 * time.Minute), 15 * time.Minute, true, "since its run started"},
		{"an unreadable status", map[string]string{AnnotationGuard: "{"}, start, start.Add(16 * time.Minute), 15 * time.Minute, true, "since its run started"},
		{"no bound: no guard needed", nil, start, start.Add(48 * time.Hour), 0, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			note, silent := e.GuardSilent(tc.guard, tc.started, tc.now, tc.bound)
			if silent != tc.silent || !strings.Contains(note, tc.note) {
				t.Errorf("GuardSilent = %v, %q; want %v, %q", silent, note, tc.silent, tc.note)
			}
		})
	}
}

package admission

import (
	"slices"
	"strings"
	"testing"
	"time"
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

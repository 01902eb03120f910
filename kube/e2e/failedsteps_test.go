package e2e

import (
	"strings"
	"testing"
)

// TestFailedSteps: a failed node run ends its output with the steps that
// failed and their last logged lines, not with the components' logs that
// a failure dumps (CI shows only the end of the output).
func TestFailedSteps(t *testing.T) {
	out := strings.Join([]string{
		"=== RUN   TestGuest",
		"    guest_test.go:100: phase defaults",
		"=== RUN   TestGuest/webhook",
		"    guest_test.go:200: webhook up",
		"--- PASS: TestGuest/webhook (12.00s)",
		"=== RUN   TestGuest/fleet",
		"    guest_fleet_test.go:1: one",
		"    guest_fleet_test.go:2: two",
		"some unprefixed line from a child",
		"    guest_fleet_test.go:3: fleet: no recommendation for payments/api",
		"--- FAIL: TestGuest/fleet (301.50s)",
		"=== RUN   TestGuest/uninstall",
		"    guest_test.go:9: gone",
		"--- PASS: TestGuest/uninstall (3.00s)",
		"--- FAIL: TestGuest (400.00s)",
	}, "\n")
	got := failedSteps(out, 2)
	want := "FAILED TestGuest/fleet after 301.50s; its last lines:\n" +
		"    guest_fleet_test.go:2: two\n" +
		"    guest_fleet_test.go:3: fleet: no recommendation for payments/api\n"
	if got != want {
		t.Errorf("failedSteps:\n%s\nwant:\n%s", got, want)
	}
	passed := strings.NewReplacer("--- FAIL: TestGuest/fleet", "--- PASS: TestGuest/fleet", "--- FAIL: TestGuest (", "--- PASS: TestGuest (").Replace(out)
	if s := failedSteps(passed, 2); s != "" {
		t.Errorf("no step failed, yet failedSteps said:\n%s", s)
	}
	// The guest's test timed out mid-step: no FAIL line, a panic.
	timedOut := strings.Join([]string{
		"=== RUN   TestGuest",
		"=== RUN   TestGuest/chart",
		"    guest_test.go:5: installing",
		"    guest_test.go:6: waiting for the rollout",
		"panic: test timed out after 75m0s",
		"\trunning tests:",
		"\t\tTestGuest/chart (30m0s)",
	}, "\n")
	if got, want := failedSteps(timedOut, 1), "UNFINISHED TestGuest/chart (panic: test timed out after 75m0s); its last lines:\n    guest_test.go:6: waiting for the rollout\n"; got != want {
		t.Errorf("timed out:\n%s\nwant:\n%s", got, want)
	}
	// TestGuest failed outside its steps.
	outside := strings.Join([]string{
		"=== RUN   TestGuest",
		"=== RUN   TestGuest/webhook",
		"--- PASS: TestGuest/webhook (1.00s)",
		"=== NAME  TestGuest",
		"    guest_test.go:60: node NotReady",
		"--- FAIL: TestGuest (90.00s)",
	}, "\n")
	if got, want := failedSteps(outside, 2), "FAILED TestGuest after 90.00s, in no step; its last lines:\n    guest_test.go:60: node NotReady\n"; got != want {
		t.Errorf("outside the steps:\n%s\nwant:\n%s", got, want)
	}
}

// TestStepsSoFar: a run stopped before its end (Ctrl-C, CI's guard) names
// each step that started, with the result TestGuest logged at its end,
// and the last lines of a failed step and of the one still running.
func TestStepsSoFar(t *testing.T) {
	out := strings.Join([]string{
		"=== RUN   TestGuest",
		"    guest_test.go:115: phase defaults",
		"=== RUN   TestGuest/webhook",
		"    guest_webhook_test.go:10: webhook up",
		"=== NAME  TestGuest",
		"    guest_test.go:174: webhook: ok in 111.7s",
		"=== RUN   TestGuest/experiment-guard",
		"    guest_guard_test.go:40: one",
		"    guest_guard_test.go:232: nogc stopped 180s after its first restart",
		"        guard's log:",
		"=== NAME  TestGuest",
		"    guest_test.go:174: experiment-guard: FAILED in 809.1s",
		"=== RUN   TestGuest/chart-upgrade",
		"    guest_upgrade_test.go:44: helm install (the previous chart)",
		"    guest_upgrade_test.go:114: helm upgrade (99s)",
	}, "\n")
	got := stepsSoFar(out, 1)
	want := "the guest's steps so far:\n" +
		"  webhook: ok in 111.7s\n" +
		"  experiment-guard: FAILED in 809.1s\n" +
		"      guest_guard_test.go:232: nogc stopped 180s after its first restart\n" +
		"  chart-upgrade: UNFINISHED\n" +
		"      guest_upgrade_test.go:114: helm upgrade (99s)\n"
	if got != want {
		t.Errorf("stepsSoFar:\n%s\nwant:\n%s", got, want)
	}
	if got := stepsSoFar("=== RUN   TestGuest\n", 1); got != "no step of the guest had started\n" {
		t.Errorf("no step: %q", got)
	}
}

package e2e

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFirstEnd: the guard step measures its stop from the arm's first
// end. On 2026-12-07 the guard stopped nogc while every container it had
// counted (cAdvisor's OOM kills) still waited for its first restart, its
// end only in its current state: the step saw no end, and its 3-minute
// check passed over in silence.
func TestFirstEnd(t *testing.T) {
	end := time.Date(2026, 12, 7, 10, 57, 15, 0, time.UTC)
	now := end.Add(5 * time.Minute)
	terminated := &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, FinishedAt: metav1.NewTime(end)}
	for _, tc := range []struct {
		name string
		cs   corev1.ContainerStatus
		at   time.Time
		ok   bool
	}{
		{"running, never ended", corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}, time.Time{}, false},
		{"ended, not yet restarted", corev1.ContainerStatus{State: corev1.ContainerState{Terminated: terminated}}, end, true},
		{"in its first back-off", corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: terminated}}, end, true},
		{"restarted once", corev1.ContainerStatus{RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: terminated}}, end, true},
		{"restarted twice: the first end is gone", corev1.ContainerStatus{RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: terminated}}, now, true},
	} {
		at, ok := firstEnd(tc.cs, now)
		if ok != tc.ok || !at.Equal(tc.at) {
			t.Errorf("%s: first end %v (%v), want %v (%v)", tc.name, at, ok, tc.at, tc.ok)
		}
	}
}

// TestFirstRestart: issue 57 bounds the guard's stop from the arm's first
// restart, the kubelet's next container of it.
func TestFirstRestart(t *testing.T) {
	start := time.Date(2026, 12, 7, 10, 57, 15, 0, time.UTC)
	end, restart, now := start.Add(20*time.Second), start.Add(95*time.Second), start.Add(5*time.Minute)
	first := &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, StartedAt: metav1.NewTime(start), FinishedAt: metav1.NewTime(end)}
	second := &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, StartedAt: metav1.NewTime(restart), FinishedAt: metav1.NewTime(restart.Add(20 * time.Second))}
	for _, tc := range []struct {
		name string
		cs   corev1.ContainerStatus
		at   time.Time
		ok   bool
	}{
		{"never ended", corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(start)}}}, time.Time{}, false},
		{"ended, not yet restarted", corev1.ContainerStatus{State: corev1.ContainerState{Terminated: first}}, time.Time{}, false},
		{"in its first back-off", corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: first}}, time.Time{}, false},
		{"restarted, running", corev1.ContainerStatus{RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(restart)}},
			LastTerminationState: corev1.ContainerState{Terminated: first}}, restart, true},
		{"restarted, ended again", corev1.ContainerStatus{RestartCount: 1, State: corev1.ContainerState{Terminated: second},
			LastTerminationState: corev1.ContainerState{Terminated: first}}, restart, true},
		{"restarted, backing off again", corev1.ContainerStatus{RestartCount: 1, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: second}}, restart, true},
		{"restarted twice: the first restart is gone", corev1.ContainerStatus{RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now)}},
			LastTerminationState: corev1.ContainerState{Terminated: second}}, now, true},
	} {
		at, ok := firstRestart(tc.cs, now)
		if ok != tc.ok || !at.Equal(tc.at) {
			t.Errorf("%s: first restart %v (%v), want %v (%v)", tc.name, at, ok, tc.at, tc.ok)
		}
	}
}

// Package monitoring generates gofit's Prometheus rules, Prometheus
// Operator objects and Grafana dashboards (deploy/monitoring) from one
// source, so the operator objects, the plain rule file and the dashboards
// cannot drift apart. Thresholds and `for:` windows are Params, as in the
// kube-prometheus mixins; `go run ./kube/monitoring/gen` writes the
// defaults, and a test fails when the checked-in files are stale.
package monitoring

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Params are the thresholds and windows of the alerts. Default returns the
// shipped values; tests shorten the `for:` windows with Fast.
type Params struct {
	// RunbookURL is docs/monitoring.md; each alert links to its section.
	RunbookURL string
	// Window is the rate window of alerts and recording rules ("5m").
	Window time.Duration

	ThrottledShare float64       // throttled share of CFS periods (0.25, as CPUThrottlingHigh)
	ThrottledFor   time.Duration // 15m

	GoMemoryShare float64       // Go memory / GOMEMLIMIT at which the heap is pinned (0.95)
	GCCPUShare    float64       // GC share of the busy CPU (0.25)
	HeapPinnedFor time.Duration // 10m

	GOMEMLIMITShare float64       // GOMEMLIMIT / memory limit at or above which it fires (1)
	GOMEMLIMITFor   time.Duration // 5m

	MemoryHighHitsPerSecond float64       // memory.high events per second above which it fires (0: any)
	MemoryHighFor           time.Duration // 15m
	MemoryStallShare        float64       // share of time some task stalls on memory (0.1)
	MemoryStallFor          time.Duration // 15m
	MajorFaultsPerSecond    float64       // 10
	MajorFaultsUsageShare   float64       // working set / limit (0.9)
	MajorFaultsFor          time.Duration // 10m

	OOMWindow  time.Duration // an OOM kill fires for this long (10m)
	WarningFor time.Duration // a plan warning in force this long (10m)

	WebhookErrorShare     float64       // errors+busy share of admissions (0.05)
	WebhookErrorFor       time.Duration // 10m
	WebhookTimeoutSeconds float64       // the MutatingWebhookConfiguration's timeoutSeconds (2)
	WebhookLatencyShare   float64       // p99 / timeout (0.5)
	WebhookLatencyFor     time.Duration // 10m
	CertExpiry            time.Duration // 7 days
	CertFor               time.Duration // 15m

	AgentMaxPassAge     time.Duration // no pass ended for this long (5m; passes run every 10s)
	AgentFor            time.Duration // 10m
	AgentUnprotectedFor time.Duration // 15m
}

// Default returns the thresholds that ship in deploy/monitoring.
func Default() Params {
	return Params{
		RunbookURL: "https://github.com/gofit-dev/gofit/blob/main/docs/monitoring.md",
		Window:     5 * time.Minute,

		ThrottledShare: 0.25, ThrottledFor: 15 * time.Minute,
		GoMemoryShare: 0.95, GCCPUShare: 0.25, HeapPinnedFor: 10 * time.Minute,
		GOMEMLIMITShare: 1, GOMEMLIMITFor: 5 * time.Minute,
		MemoryHighHitsPerSecond: 0, MemoryHighFor: 15 * time.Minute,
		MemoryStallShare: 0.1, MemoryStallFor: 15 * time.Minute,
		MajorFaultsPerSecond: 10, MajorFaultsUsageShare: 0.9, MajorFaultsFor: 10 * time.Minute,
		OOMWindow: 10 * time.Minute, WarningFor: 10 * time.Minute,
		WebhookErrorShare: 0.05, WebhookErrorFor: 10 * time.Minute,
		WebhookTimeoutSeconds: 2, WebhookLatencyShare: 0.5, WebhookLatencyFor: 10 * time.Minute,
		CertExpiry: 7 * 24 * time.Hour, CertFor: 15 * time.Minute,
		AgentMaxPassAge: 5 * time.Minute, AgentFor: 10 * time.Minute, AgentUnprotectedFor: 15 * time.Minute,
	}
}

// Fast returns p with every `for:` window set to d: what a test on a real
// Prometheus uses to see an alert fire within seconds. Thresholds and rate
// windows stay as they are.
func (p Params) Fast(d time.Duration) Params {
	for _, f := range []*time.Duration{&p.ThrottledFor, &p.HeapPinnedFor, &p.GOMEMLIMITFor, &p.MemoryHighFor, &p.MemoryStallFor,
		&p.MajorFaultsFor, &p.WarningFor, &p.WebhookErrorFor, &p.WebhookLatencyFor, &p.CertFor, &p.AgentFor, &p.AgentUnprotectedFor} {
		*f = d
	}
	return p
}

// Validate names the first parameter out of its range.
func (p Params) Validate() error {
	shares := map[string]float64{
		"ThrottledShare": p.ThrottledShare, "GoMemoryShare": p.GoMemoryShare, "GCCPUShare": p.GCCPUShare,
		"MemoryStallShare": p.MemoryStallShare, "MajorFaultsUsageShare": p.MajorFaultsUsageShare,
		"WebhookErrorShare": p.WebhookErrorShare, "WebhookLatencyShare": p.WebhookLatencyShare,
	}
	for _, k := range slices.Sorted(maps.Keys(shares)) {
		if v := shares[k]; !(v > 0 && v <= 1) {
			return fmt.Errorf("monitoring params: %s = %v, want a share in (0, 1]", k, v)
		}
	}
	if !(p.GOMEMLIMITShare > 0 && p.GOMEMLIMITShare <= 2) {
		return fmt.Errorf("monitoring params: GOMEMLIMITShare = %v, want (0, 2]", p.GOMEMLIMITShare)
	}
	if p.MemoryHighHitsPerSecond < 0 || p.MajorFaultsPerSecond < 0 || p.WebhookTimeoutSeconds <= 0 {
		return fmt.Errorf("monitoring params: MemoryHighHitsPerSecond %v, MajorFaultsPerSecond %v, WebhookTimeoutSeconds %v: want ≥ 0, ≥ 0, > 0",
			p.MemoryHighHitsPerSecond, p.MajorFaultsPerSecond, p.WebhookTimeoutSeconds)
	}
	if p.Window < time.Second || p.OOMWindow < time.Second || p.CertExpiry < time.Second || p.AgentMaxPassAge < time.Second {
		return fmt.Errorf("monitoring params: Window %v, OOMWindow %v, CertExpiry %v, AgentMaxPassAge %v: want at least 1s each",
			p.Window, p.OOMWindow, p.CertExpiry, p.AgentMaxPassAge)
	}
	if !strings.HasPrefix(p.RunbookURL, "http") {
		return fmt.Errorf("monitoring params: RunbookURL %q is not a URL", p.RunbookURL)
	}
	return nil
}

// promDuration writes d the way PromQL and rule files read it: "15m",
// "7d", "90s".
func promDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

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
	"regexp"
	"slices"
	"strings"
	"time"
)

// Params are the thresholds and windows of the alerts, and where the
// standard exporters' series come from. Default returns the shipped
// values; tests shorten the `for:` windows with Fast.
type Params struct {
	// Selectors of the exporters every cluster already runs, as PromQL
	// label matchers (kubernetes-mixin's cadvisorSelector and
	// kubeStateMetricsSelector): the one place the rules and dashboards
	// take them from. The defaults are kube-prometheus's jobs.
	CAdvisorSelector  string // job="kubelet", metrics_path="/metrics/cadvisor"
	KubeStateSelector string // job="kube-state-metrics"
	APIServerSelector string // job="apiserver"
	// WebhookJobSelector and AgentJobSelector pick gofit's own targets'
	// up series: the PodMonitors' job label is "NAMESPACE/NAME", a plain
	// scrape config's the job name.
	WebhookJobSelector string // job=~"(.+/)?gofit-webhook"
	AgentJobSelector   string // job=~"(.+/)?gofit-node"
	// WebhookName is the webhook's name in the
	// MutatingWebhookConfiguration, as the API server's admission metrics
	// label it.
	WebhookName string // pods.gofit.dev
	// ClusterLabel names the cluster in every aggregation and dashboard
	// variable (kubernetes-mixin's clusterLabel). Series without it
	// aggregate as one cluster.
	ClusterLabel string // cluster
	// CeilGOMAXPROCS follows the webhook's policy.ceil: gofit's plan then
	// rounds a fractional CPU limit up, and the GOMAXPROCS rules compare
	// against that plan (2 at 1.5 cores fits) rather than the limit.
	CeilGOMAXPROCS bool

	// chartSentinels: ChartFiles writes sentinels where the chart's
	// values go (selectors, cluster label, rounding).
	chartSentinels bool

	// GCCyclesPerSecond: GC cycles a second above which a heap at
	// GOMEMLIMIT counts as pinned where the process exports no GC CPU
	// time (client_golang's default collectors export cycles only).
	GCCyclesPerSecond float64 // 2
	// GOMEMLIMITUnsetFor: a Go container with a memory limit and no
	// GOMEMLIMIT for this long (info).
	GOMEMLIMITUnsetFor time.Duration // 1h
	// OOMRestarts restarts in OOMRestartWindow, the last one OOMKilled.
	OOMRestarts      float64       // 3
	OOMRestartWindow time.Duration // 1h
	// TargetDownFor: a gofit webhook or agent target down or absent.
	TargetDownFor time.Duration // 10m

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
	CertExpiry            time.Duration // 7 days (warning)
	CertExpiryCritical    time.Duration // 1 day (critical; under CertExpiry)
	CertFor               time.Duration // 15m

	AgentMaxPassAge     time.Duration // no pass ended for this long (5m; passes run every 10s)
	AgentFor            time.Duration // 10m
	AgentUnprotectedFor time.Duration // 15m
}

// Default returns the thresholds that ship in deploy/monitoring.
func Default() Params {
	return Params{
		CAdvisorSelector:   `job="kubelet", metrics_path="/metrics/cadvisor"`,
		KubeStateSelector:  `job="kube-state-metrics"`,
		APIServerSelector:  `job="apiserver"`,
		WebhookJobSelector: `job=~"(.+/)?gofit-webhook"`,
		AgentJobSelector:   `job=~"(.+/)?gofit-node"`,
		WebhookName:        "pods.gofit.dev",
		ClusterLabel:       "cluster",
		GCCyclesPerSecond:  2, GOMEMLIMITUnsetFor: time.Hour,
		OOMRestarts: 3, OOMRestartWindow: time.Hour, TargetDownFor: 10 * time.Minute,

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
		CertExpiry: 7 * 24 * time.Hour, CertExpiryCritical: 24 * time.Hour, CertFor: 15 * time.Minute,
		AgentMaxPassAge: 5 * time.Minute, AgentFor: 10 * time.Minute, AgentUnprotectedFor: 15 * time.Minute,
	}
}

// Fast returns p with every `for:` window set to d: what a test on a real
// Prometheus uses to see an alert fire within seconds. Thresholds and rate
// windows stay as they are.
func (p Params) Fast(d time.Duration) Params {
	for _, f := range []*time.Duration{&p.ThrottledFor, &p.HeapPinnedFor, &p.GOMEMLIMITFor, &p.MemoryHighFor, &p.MemoryStallFor,
		&p.MajorFaultsFor, &p.WarningFor, &p.WebhookErrorFor, &p.WebhookLatencyFor, &p.CertFor, &p.AgentFor, &p.AgentUnprotectedFor,
		&p.GOMEMLIMITUnsetFor, &p.TargetDownFor} {
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
	if p.CertExpiryCritical < time.Second || p.CertExpiryCritical >= p.CertExpiry {
		return fmt.Errorf("monitoring params: CertExpiryCritical %v: want at least 1s and under CertExpiry %v", p.CertExpiryCritical, p.CertExpiry)
	}
	if p.GCCyclesPerSecond <= 0 || p.OOMRestarts < 1 || p.OOMRestartWindow < time.Second {
		return fmt.Errorf("monitoring params: GCCyclesPerSecond %v, OOMRestarts %v, OOMRestartWindow %v: want > 0, ≥ 1, ≥ 1s",
			p.GCCyclesPerSecond, p.OOMRestarts, p.OOMRestartWindow)
	}
	if !labelNameRE.MatchString(p.ClusterLabel) {
		return fmt.Errorf("monitoring params: ClusterLabel %q is not a Prometheus label name", p.ClusterLabel)
	}
	if p.WebhookName == "" || strings.ContainsAny(p.WebhookName, `"\`) {
		return fmt.Errorf("monitoring params: WebhookName %q: want a webhook's name", p.WebhookName)
	}
	sels := map[string]string{"CAdvisorSelector": p.CAdvisorSelector, "KubeStateSelector": p.KubeStateSelector,
		"APIServerSelector": p.APIServerSelector, "WebhookJobSelector": p.WebhookJobSelector, "AgentJobSelector": p.AgentJobSelector}
	for _, k := range slices.Sorted(maps.Keys(sels)) {
		if err := checkSelector(sels[k]); err != nil {
			return fmt.Errorf("monitoring params: %s: %w", k, err)
		}
	}
	if !strings.HasPrefix(p.RunbookURL, "http") {
		return fmt.Errorf("monitoring params: RunbookURL %q is not a URL", p.RunbookURL)
	}
	return nil
}

var (
	labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	// matcherRE is one label matcher with a double-quoted value.
	matcherRE = regexp.MustCompile(`^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*$`)
)

// checkSelector accepts a comma-separated list of label matchers, as
// written between a metric's braces: `job="kubelet", metrics_path="/x"`.
// Empty selects every series.
func checkSelector(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	for _, m := range splitMatchers(s) {
		if !matcherRE.MatchString(m) {
			return fmt.Errorf("%q is not a label matcher (want name=\"value\", comma-separated)", strings.TrimSpace(m))
		}
	}
	return nil
}

// splitMatchers splits at the commas outside quoted values.
func splitMatchers(s string) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// roundingFunc is the PromQL function that turns a CPU limit into the
// GOMAXPROCS gofit plans: floor, or ceil with CeilGOMAXPROCS. The chart's
// copy carries chartRoundingSentinel instead.
func (p Params) roundingFunc() string {
	switch {
	case p.chartSentinels:
		return chartRoundingSentinel
	case p.CeilGOMAXPROCS:
		return "ceil"
	}
	return "floor"
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

package monitoring

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Group is one Prometheus rule group, in the shape both a rule file and a
// PrometheusRule's spec.groups take.
type Group struct {
	Name  string `json:"name" yaml:"name"`
	Rules []Rule `json:"rules" yaml:"rules"`
}

// Rule is a recording rule (Record set) or an alert (Alert set).
type Rule struct {
	Record      string            `json:"record,omitempty" yaml:"record,omitempty"`
	Alert       string            `json:"alert,omitempty" yaml:"alert,omitempty"`
	Expr        string            `json:"expr" yaml:"expr"`
	For         string            `json:"for,omitempty" yaml:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty" yaml:"annotations,omitempty"`
}

// Each alert is about one container, named by the labels the Prometheus
// Operator gives a PodMonitor's targets (kubernetes-mixin does the same).
const byContainer = "namespace, pod, container"

// Recording rule names, shared by the rules and the dashboards, in the
// kube-prometheus style level:metric:operations.
var (
	recCPU          = "namespace_pod_container:" + "gofit_cpu_usage_seconds" + ":rate5m"
	recThrottled    = "namespace_pod_container:" + "gofit_cpu_throttled_periods" + ":ratio_rate5m"
	recGC           = "namespace_pod_container:" + "gofit_go_gc_cpu" + ":ratio_rate5m"
	recPressure     = "namespace_pod_container:" + "gofit_pressure_stalled_seconds" + ":rate5m"
	recFitStatus    = "namespace_pod_container:" + "gofit_fit_status" + ":bool"
	recFitCount     = "namespace:" + "gofit_fit_status" + ":count"
	recWorkloadThr  = "namespace_workload:" + "gofit_cpu_throttled_periods" + ":ratio_rate5m"
	recWebhookRate  = "namespace:" + "gofit_webhook_admissions" + ":rate5m"
	recWebhookP99   = "namespace:" + "gofit_webhook_admission_duration_seconds" + ":p99_rate5m"
	recAgentPassP99 = "node:" + "gofit_node_reconcile_duration_seconds" + ":p99_rate5m"
)

// FitStatuses are the values of the status label of recFitStatus: a
// container is fitted when it is in none of the others.
var FitStatuses = []string{"fitted", "gomaxprocs_above_limit", "no_gomemlimit", "gomemlimit_at_limit", "warnings"}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Groups returns the recording rules and the alerts.
func Groups(p Params) ([]Group, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	g := newGofitRules(p)
	records := g.records()
	var alerts []Rule
	add := func(name, severity string, forD string, expr, summary, description string) {
		alerts = append(alerts, Rule{
			Alert: name, Expr: expr, For: forD,
			Labels: map[string]string{"severity": severity},
			Annotations: map[string]string{
				"summary":     summary,
				"description": description,
				"runbook_url": p.RunbookURL + "#" + strings.ToLower(name),
			},
		})
	}
	g.containerAlerts(add)
	g.webhookAlerts(add)
	g.agentAlerts(add)
	std := newStandard(p)
	std.addAlerts(add)
	return []Group{{Name: "gofit.rules", Rules: records}, {Name: "gofit.go.rules", Rules: std.records()}, {Name: "gofit.alerts", Rules: alerts}}, nil
}

// gofitRules are the rules over gofit's own metrics (the library's, the
// webhook's, the node agent's and the guard's), with what their
// expressions share.
type gofitRules struct {
	p Params
	w string // the rate window
	// Recording-rule names carry the shipped 5m window; a different
	// Window keeps the names so the dashboards need no change.
	cl        string // the cluster label
	bc        string // cluster, namespace, pod, container: what an alert is about
	keep      string // bc and the workload: what a recording rule keeps
	on        string // on (bc)
	inCluster string // clusterPhrase(cl)
	who       string // the container an alert's description names
}

func newGofitRules(p Params) gofitRules {
	g := gofitRules{p: p, w: promDuration(p.Window), cl: p.ClusterLabel}
	g.bc = g.cl + ", " + byContainer
	g.keep = g.cl + ", namespace, workload, pod, container"
	g.on = "on (" + g.bc + ")"
	g.inCluster = clusterPhrase(g.cl)
	g.who = "{{ $labels.namespace }}/{{ $labels.pod }} container {{ $labels.container }}" + g.inCluster
	return g
}

// rate and max aggregate a metric by what a recording rule keeps.
func (g gofitRules) rate(metric, sel string) string {
	return fmt.Sprintf("sum by (%s) (rate(%s%s[%s]))", g.keep, metric, sel, g.w)
}

func (g gofitRules) max(metric string) string { return fmt.Sprintf("max by (%s) (%s)", g.keep, metric) }

// arate and amax aggregate a metric by what an alert is about.
func (g gofitRules) arate(metric, sel string) string {
	return fmt.Sprintf("sum by (%s) (rate(%s%s[%s]))", g.bc, metric, sel, g.w)
}

func (g gofitRules) amax(metric string) string { return fmt.Sprintf("max by (%s) (%s)", g.bc, metric) }

// fitStatus is one status of recFitStatus: 1 for each series of expr.
func fitStatus(name, expr string) Rule {
	return Rule{Record: recFitStatus, Expr: fmt.Sprintf("(%s) * 0 + 1", expr), Labels: map[string]string{"status": name}}
}

// records are the recording rules over gofit's metrics.
func (g gofitRules) records() []Rule {
	w, cl, keep, on := g.w, g.cl, g.keep, g.on
	rate, max, status := g.rate, g.max, fitStatus
	return []Rule{
		{Record: recCPU, Expr: rate("gofit_cpu_usage_seconds_total", "")},
		{Record: recThrottled, Expr: rate("gofit_cpu_throttled_periods_total", "") + "\n/\n" + rate("gofit_cpu_periods_total", "")},
		{Record: recGC, Expr: rate("gofit_go_cpu_seconds_total", `{class="gc"}`) + "\n/\n" + rate("gofit_go_cpu_seconds_total", `{class=~"gc|scavenge|user"}`)},
		{Record: recPressure, Expr: fmt.Sprintf("sum by (%s, resource, kind) (rate(gofit_pressure_stalled_seconds_total[%s]))", keep, w)},
		// A comparison keeps only the labels it matches on: workload too.
		// Above the limit and above gofit's plan (ceil rounding plans 2 at
		// 1.5 cores), or a user's value the plan warns about.
		status("gomaxprocs_above_limit", fmt.Sprintf("%s\n> on (%s)\n%s\nand on (%s)\n(\n  %s > on (%s) %s\n  or on (%s)\n  %s\n  or on (%s)\n  (%s unless %s gofit_plan_gomaxprocs)\n)",
			max("gofit_gomaxprocs"), keep, max("clamp_min(gofit_cpu_limit_cores, 1)"), keep,
			max("gofit_gomaxprocs"), keep, max("gofit_plan_gomaxprocs"), keep, max(`gofit_plan_warning{warning="gomaxprocs_env_above_limit"}`),
			keep, max("gofit_gomaxprocs"), on)),
		status("no_gomemlimit", fmt.Sprintf("%s\nunless %s\ngofit_gomemlimit_bytes", max("gofit_memory_limit_bytes"), on)),
		status("gomemlimit_at_limit", fmt.Sprintf("%s\n>= on (%s)\n%s", max("gofit_gomemlimit_bytes"), keep, max("gofit_memory_limit_bytes"))),
		status("warnings", max("gofit_plan_warning")),
		status("fitted", fmt.Sprintf("%s\nunless %s\n%s{status!=\"fitted\"}", max("gofit_gomaxprocs"), on, recFitStatus)),
		{Record: recFitCount, Expr: fmt.Sprintf("count by (%s, namespace, status) (%s)", cl, recFitStatus)},
		{Record: recWorkloadThr, Expr: fmt.Sprintf("sum by (%s, namespace, workload) (rate(gofit_cpu_throttled_periods_total[%s]))\n/\nsum by (%s, namespace, workload) (rate(gofit_cpu_periods_total[%s]))", cl, w, cl, w)},
		{Record: recWebhookRate, Expr: fmt.Sprintf("sum by (%s, namespace, outcome, code) (rate(gofit_webhook_admissions_total[%s]))", cl, w)},
		{Record: recWebhookP99, Expr: fmt.Sprintf("histogram_quantile(0.99, sum by (%s, namespace, le) (rate(gofit_webhook_admission_duration_seconds_bucket[%s])))", cl, w)},
		{Record: recAgentPassP99, Expr: fmt.Sprintf("histogram_quantile(0.99, sum by (%s, node, le) (rate(gofit_node_reconcile_duration_seconds_bucket[%s])))", cl, w)},
	}
}

// containerAlerts are the alerts about a Go container's fit: CPU,
// memory, the kernel's reclaim and kills, and gofit's warnings.
func (g gofitRules) containerAlerts(add addFunc) {
	p, bc, on, who := g.p, g.bc, g.on, g.who
	arate, amax := g.arate, g.amax
	fd := promDuration

	// Above the limit and not what gofit's plan chose: with ceil rounding
	// the plan is 2 at 1.5 cores, and gofit's own pods stay silent. A
	// user's GOMAXPROCS is in the plan too, so the plan's warning
	// gomaxprocs_env_above_limit counts as above it.
	add("GofitGOMAXPROCSAboveCPULimit", "warning", fd(p.ThrottledFor),
		fmt.Sprintf("(\n  %s\n  /\n  %s\n) > %s\nand %s\n(\n  %s\n  >\n  %s\n)\nand %s\n(\n  %s\n  > %s\n  %s\n  or %s\n  %s\n  or %s\n  (%s unless %s gofit_plan_gomaxprocs)\n)",
			arate("gofit_cpu_throttled_periods_total", ""), arate("gofit_cpu_periods_total", ""), num(p.ThrottledShare), on,
			amax("gofit_gomaxprocs"), amax("clamp_min(gofit_cpu_limit_cores, 1)"), on,
			amax("gofit_gomaxprocs"), on, amax("gofit_plan_gomaxprocs"),
			on, amax(`gofit_plan_warning{warning="gomaxprocs_env_above_limit"}`),
			on, amax("gofit_gomaxprocs"), on),
		"A Go process is throttled because its GOMAXPROCS is above its CPU limit.",
		who+" was throttled in {{ $value | humanizePercentage }} of its CFS periods while its GOMAXPROCS is above its CPU limit and gofit's plan: its threads spend each period's quota early and wait out the rest. Fit GOMAXPROCS to the limit.")

	add("GofitGoHeapPinnedAtGOMEMLIMIT", "warning", fd(p.HeapPinnedFor),
		fmt.Sprintf("(\n  %s\n  /\n  %s\n) > %s\nand %s\n(\n  %s\n  /\n  %s\n) > %s",
			amax("gofit_go_memory_bytes"), amax("gofit_gomemlimit_bytes"), num(p.GoMemoryShare), on,
			arate("gofit_go_cpu_seconds_total", `{class="gc"}`), arate("gofit_go_cpu_seconds_total", `{class=~"gc|scavenge|user"}`), num(p.GCCPUShare)),
		"A Go heap is pinned at GOMEMLIMIT while the GC takes a large share of the CPU.",
		who+" holds {{ $value | humanizePercentage }} of its GOMEMLIMIT and its GC takes more than "+pct(p.GCCPUShare)+" of its busy CPU: the step before a GC death spiral. Give it more memory or find what holds the heap.")

	cmp := ">="
	add("GofitGOMEMLIMITAtMemoryLimit", "warning", fd(p.GOMEMLIMITFor),
		fmt.Sprintf("%s\n/\n%s\n%s %s", amax("gofit_gomemlimit_bytes"), amax("gofit_memory_limit_bytes"), cmp, num(p.GOMEMLIMITShare)),
		"GOMEMLIMIT is at or above the container's memory limit.",
		who+" has GOMEMLIMIT at {{ $value | humanizePercentage }} of its memory limit. Memory outside the Go heap (stacks, cgo, the binary's pages) has no room left, so the kernel OOM-kills the container before the GC works harder. Set GOMEMLIMIT below the limit, or let gofit plan it.")

	add("GofitMemoryHighReclaim", "warning", fd(p.MemoryHighFor),
		fmt.Sprintf("%s > %s", arate("gofit_memory_high_hits_total", ""), num(p.MemoryHighHitsPerSecond)),
		"A container keeps going over memory.high and is reclaimed and throttled.",
		who+" went over memory.high {{ $value | humanize }} times a second: the kernel reclaims its memory and slows its allocations.")

	add("GofitMemoryPressureStalls", "warning", fd(p.MemoryStallFor),
		fmt.Sprintf("%s > %s", arate("gofit_pressure_stalled_seconds_total", `{resource="memory", kind="some"}`), num(p.MemoryStallShare)),
		"A container stalls on memory.",
		who+" had a task waiting for memory {{ $value | humanizePercentage }} of the time (PSI some).")

	add("GofitMajorFaultsNearMemoryLimit", "warning", fd(p.MajorFaultsFor),
		fmt.Sprintf("%s > %s\nand %s\n(\n  %s\n  /\n  %s\n) > %s",
			arate("gofit_memory_major_faults_total", ""), num(p.MajorFaultsPerSecond), on,
			amax("gofit_memory_working_set_bytes"), amax("gofit_memory_limit_bytes"), num(p.MajorFaultsUsageShare)),
		"A container near its memory limit reads its pages back from disk.",
		who+" takes {{ $value | humanize }} major page faults a second with its working set above "+pct(p.MajorFaultsUsageShare)+" of its limit: the kernel evicts the binary's code pages and reads them again.")

	add("GofitOOMKills", "warning", "",
		fmt.Sprintf("sum by (%s) (increase(gofit_oom_kills_total[%s])) > 0", bc, fd(p.OOMWindow)),
		"The OOM killer killed a process in a container.",
		"The OOM killer killed {{ $value | humanize }} processes in "+who+" in the last "+fd(p.OOMWindow)+".")

	add("GofitPlanWarning", "info", fd(p.WarningFor),
		fmt.Sprintf("max by (%s, warning) (gofit_plan_warning) > 0", bc),
		"gofit's plan for a container carries a warning.",
		who+" runs with gofit warning {{ $labels.warning }} in force.")
}

// webhookAlerts are the alerts about the webhook: failed and slow
// admissions, and its serving certificate.
func (g gofitRules) webhookAlerts(add addFunc) {
	p, w, bc, inCluster := g.p, g.w, g.bc, g.inCluster
	arate, amax := g.arate, g.amax
	fd := promDuration

	add("GofitWebhookAdmissionErrors", "warning", fd(p.WebhookErrorFor),
		fmt.Sprintf("%s\n/\n%s\n> %s", arate("gofit_webhook_admissions_total", `{outcome=~"error|busy"}`), arate("gofit_webhook_admissions_total", ""), num(p.WebhookErrorShare)),
		"The gofit webhook fails admissions and lets pods in unfitted.",
		"The gofit webhook {{ $labels.namespace }}/{{ $labels.pod }}"+inCluster+" answered {{ $value | humanizePercentage }} of its admissions with an error or busy: with failurePolicy Ignore those pods start without a fit.")

	add("GofitWebhookLatencyNearTimeout", "warning", fd(p.WebhookLatencyFor),
		fmt.Sprintf("histogram_quantile(0.99, sum by (%s, le) (rate(gofit_webhook_admission_duration_seconds_bucket[%s])))\n> %s",
			bc, w, num(p.WebhookLatencyShare*p.WebhookTimeoutSeconds)),
		"The gofit webhook's p99 latency is near its timeoutSeconds.",
		"The gofit webhook {{ $labels.namespace }}/{{ $labels.pod }}"+inCluster+" answers 1% of admissions in more than {{ $value | humanizeDuration }}, near the API server's timeout of "+num(p.WebhookTimeoutSeconds)+"s; past it, pods start unfitted.")

	// Two tiers of one alert, as kubernetes-mixin's
	// KubeClientCertificateExpiration: a warning with days to act, then
	// critical when the webhook is hours from serving an expired
	// certificate (every admission then fails open).
	certLeft := fmt.Sprintf("(%s > 0) - time()", amax("gofit_webhook_certificate_expiry_timestamp_seconds"))
	add("GofitWebhookCertificateExpiring", "warning", fd(p.CertFor),
		fmt.Sprintf("%s < %s", certLeft, num(p.CertExpiry.Seconds())),
		"The gofit webhook's serving certificate expires soon.",
		"The certificate the gofit webhook {{ $labels.namespace }}/{{ $labels.pod }}"+inCluster+" serves expires in {{ $value | humanizeDuration }} and has not been renewed.")
	add("GofitWebhookCertificateExpiring", "critical", fd(p.CertFor),
		fmt.Sprintf("%s < %s", certLeft, num(p.CertExpiryCritical.Seconds())),
		"The gofit webhook's serving certificate is about to expire.",
		"The certificate the gofit webhook {{ $labels.namespace }}/{{ $labels.pod }}"+inCluster+" serves expires in {{ $value | humanizeDuration }} and has not been renewed: once it has, the API server cannot call the webhook and admits every pod unfitted.")
}

// agentAlerts are the alerts about the node agent, and the experiment
// guard's, which sits among them so that the rule file keeps its order.
func (g gofitRules) agentAlerts(add addFunc) {
	p, w, cl, bc, inCluster := g.p, g.w, g.cl, g.bc, g.inCluster
	fd := promDuration

	byAgent := bc + ", node"
	add("GofitNodeAgentPassesFailing", "warning", fd(p.AgentFor),
		fmt.Sprintf(`sum by (%s) (increase(gofit_node_skipped_reconciles_total{reason=~"bad_input|no_allocatable"}[%s])) > 0`, byAgent, w),
		"The gofit node agent's passes fail.",
		"The gofit node agent {{ $labels.namespace }}/{{ $labels.pod }} on {{ $labels.node }}"+inCluster+" skipped {{ $value | humanize }} passes for bad input or a missing allocatable memory in "+w+": it sets no memory QoS.")

	add("GofitNodeAgentConfigInvalid", "warning", fd(p.AgentFor),
		fmt.Sprintf("min by (%s, key) (gofit_node_config_valid) == 0", byAgent),
		"The gofit node agent refuses its QoS ConfigMap.",
		"The gofit node agent {{ $labels.namespace }}/{{ $labels.pod }} on {{ $labels.node }}"+inCluster+" refuses the {{ $labels.key }} key of its QoS ConfigMap, which does not parse or check: it keeps the last good configuration, or writes nothing where it has had none since it started. Its /healthz and log name the error.")

	add("GofitNodeAgentConfigUnreadable", "warning", fd(p.AgentFor),
		fmt.Sprintf("max by (%s) (gofit_node_config_unreadable) == 1", byAgent),
		"The gofit node agent cannot read its QoS ConfigMap.",
		"The gofit node agent {{ $labels.namespace }}/{{ $labels.pod }} on {{ $labels.node }} finds no QoS ConfigMap, or may not read it (404 or 403): it keeps the last good configuration, or writes nothing where it has had none since it started. Create the ConfigMap, grant the agent's Role on it, or run the agent with --no-configmap for the built-in defaults.")

	add("GofitNodeAgentPassesStalled", "warning", fd(p.AgentFor),
		fmt.Sprintf("time() - max by (%s) (gofit_node_last_reconcile_timestamp_seconds) > %s", byAgent, num(p.AgentMaxPassAge.Seconds())),
		"The gofit node agent's passes do not complete.",
		"The gofit node agent {{ $labels.namespace }}/{{ $labels.pod }} on {{ $labels.node }}"+inCluster+" ended no pass for {{ $value | humanizeDuration }}.")

	// The guard fails closed (it keeps evicting the arms it stopped), but
	// judges nothing new while it cannot read its data: three of its
	// shipped 5-minute looks missed.
	add("GofitExperimentGuardLooksStale", "warning", fd(p.AgentFor),
		// Over the replicas: one leads and looks, the followers keep
		// their start time (a per-pod rule fired for every follower).
		fmt.Sprintf("time() - max by (%s, namespace) (gofit_experiment_guard_last_look_success_timestamp_seconds) > 900", cl),
		"The gofit experiment guard has judged no experiment on its data for 15 minutes.",
		"The gofit experiment guard in {{ $labels.namespace }}"+inCluster+" last completed a look that judged every running experiment on its data {{ $value | humanizeDuration }} ago: Prometheus is down or slow, or has no series for an experiment, or no replica leads. Arms it stopped stay stopped and evicted; new harm goes unjudged.")

	add("GofitNodeAgentWriteErrors", "warning", fd(p.AgentFor),
		fmt.Sprintf("sum by (%s) (increase(gofit_node_cgroup_write_errors_total[%s])) > 0", byAgent, w),
		"The gofit node agent cannot write cgroup files.",
		"The gofit node agent {{ $labels.namespace }}/{{ $labels.pod }} on {{ $labels.node }}"+inCluster+" had {{ $value | humanize }} failed cgroup reads or writes in "+w+".")

	add("GofitNodeAgentPodsUnprotected", "warning", fd(p.AgentUnprotectedFor),
		fmt.Sprintf("max by (%s) (gofit_node_unprotected_pods) > 0", byAgent),
		"Pods on a node are left without the memory QoS the gofit node agent plans.",
		"The gofit node agent {{ $labels.namespace }}/{{ $labels.pod }} on {{ $labels.node }}"+inCluster+" leaves {{ $value | humanize }} pods without their planned memory QoS.")
}

// clusterPhrase names the cluster in a description where the alert's
// series carry the cluster label (kubernetes-mixin's "on cluster" idiom);
// a single-cluster Prometheus without the label reads as before.
func clusterPhrase(label string) string {
	return "{{ with $labels." + label + " }} in cluster {{ . }}{{ end }}"
}

func pct(v float64) string { return num(v*100) + "%" }

// Alerts lists the alert names, sorted.
func Alerts(p Params) ([]string, error) {
	gs, err := Groups(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range gs {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r.Alert)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

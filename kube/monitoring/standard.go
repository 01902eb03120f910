package monitoring

import (
	"fmt"
	"strings"
)

// The rules over the exporters every cluster already runs, for any Go
// container, fitted by gofit or not:
//   - client_golang ≥ 1.20's default collectors: go_sched_gomaxprocs_threads,
//     go_gc_gomemlimit_bytes, go_gc_gogc_percent, go_memstats_*,
//     go_gc_duration_seconds, go_info;
//   - the kubelet's cAdvisor: container_cpu_cfs_*, container_cpu_usage_*,
//     container_memory_working_set_bytes, container_oom_events_total;
//   - kube-state-metrics: kube_pod_container_resource_limits,
//     kube_pod_container_status_*, kube_pod_owner, kube_replicaset_owner.
//
// They join on the cluster label, namespace, pod and container: the labels
// the kubelet gives cAdvisor's series, kube-state-metrics its own (scraped
// with honor_labels) and a PodMonitor or ServiceMonitor every target. The
// workload comes from kube_pod_owner, never from a scrape-time label.

// Recording rule names of the standard series.
var (
	// gofit's own name for kubernetes-mixin's
	// namespace_workload_pod:kube_pod_owner:relabel: under
	// kube-prometheus-stack both would write the same series from two
	// groups (TestBesideKubernetesMixin).
	recOwner         = "namespace_workload_pod:" + "gofit_kube_pod_owner" + ":relabel"
	recCtrThrottled  = "namespace_pod_container:" + "container_cpu_cfs_throttled_periods" + ":ratio_rate5m"
	recCtrCPU        = "namespace_pod_container:" + "container_cpu_usage_seconds" + ":rate5m"
	recCtrWorkingSet = "namespace_pod_container:" + "container_memory_working_set_bytes" + ":max"
	recCPULimit      = "namespace_pod_container:" + "kube_pod_container_resource_limits_cpu_cores" + ":max"
	recMemLimit      = "namespace_pod_container:" + "kube_pod_container_resource_limits_memory_bytes" + ":max"
	recGoProcs       = "namespace_pod_container:" + "go_sched_gomaxprocs_threads" + ":max"
	recGoMemLimit    = "namespace_pod_container:" + "go_gc_gomemlimit_bytes" + ":max"
	recGoMemory      = "namespace_pod_container:" + "go_memstats_sys_minus_released_bytes" + ":max"
	recGoGCCycles    = "namespace_pod_container:" + "go_gc_cycles" + ":rate5m"
	recGoGCShare     = "namespace_pod_container:" + "go_gc_cpu_of_container_cpu" + ":ratio_rate5m"
	recGoFit         = "namespace_workload_pod_container:" + "go_fit_status" + ":bool"
	recGoFitCount    = "namespace:" + "go_fit_status" + ":count"
	recWlThrottled   = "namespace_workload:" + "container_cpu_cfs_throttled_periods" + ":ratio_rate5m"
	recWlGCCycles    = "namespace_workload:" + "go_gc_cycles" + ":rate5m"
)

// GoFitStatuses are the values of recGoFit's status label: each Go
// container is in exactly one.
var GoFitStatuses = []string{"fitted_by_gofit", "fitted_by_hand", "unfitted", "misfitted"}

// unsetGOMEMLIMIT: the runtime reports math.MaxInt64 when no GOMEMLIMIT
// is set; any value at or above this is "unset".
const unsetGOMEMLIMIT = "9e18"

type standardRules struct {
	p        Params
	w        string // rate window
	cl       string // cluster label
	by       string // cluster, namespace, pod, container
	on       string // on (by)
	cadv     string // cAdvisor selector, with the container's own cgroups only
	ksm      string
	thr      string // the GOMAXPROCS gofit would plan from a CPU limit
	gofit    string // containers that export gofit's metrics
	goCtr    string // containers that ran a Go process lately
	planAnno string // pods the webhook planned (where kube-state-metrics exports the annotation)
}

func newStandard(p Params) standardRules {
	s := standardRules{p: p, w: promDuration(p.Window), cl: p.ClusterLabel}
	s.by = s.cl + ", " + byContainer
	s.on = "on (" + s.by + ")"
	s.cadv = sel(p.CAdvisorSelector, `container!=""`, `container!="POD"`)
	s.ksm = p.KubeStateSelector
	// GOMAXPROCS n > limit x ⟺ n > floor(x) for whole n; floor is
	// spelled out so the chart can write ceil over it (roundingFunc).
	s.thr = "clamp_min(" + p.roundingFunc() + "(" + recCPULimit + "), 1)"
	s.gofit = fmt.Sprintf("group by (%s) (gofit_gomaxprocs)", s.by)
	s.goCtr = fmt.Sprintf("group by (%s) (max_over_time(go_info[%s]))", s.by, promDuration(p.OOMRestartWindow))
	s.planAnno = fmt.Sprintf(`group by (%s, namespace, pod) (kube_pod_annotations{%s})`, s.cl, sel(p.KubeStateSelector, `annotation_gofit_dev_plan!=""`))
	return s
}

// sel joins label matchers into the inside of a selector's braces.
func sel(matchers ...string) string {
	var out []string
	for _, m := range matchers {
		if strings.TrimSpace(m) != "" {
			out = append(out, strings.TrimSpace(m))
		}
	}
	return strings.Join(out, ", ")
}

func (s standardRules) records() []Rule {
	cl, by, w := s.cl, s.by, s.w
	owner := func(kind, workloadType string) Rule {
		return Rule{Record: recOwner, Labels: map[string]string{"workload_type": workloadType}, Expr: fmt.Sprintf(
			"max by (%s, namespace, workload, pod) (\n  label_replace(kube_pod_owner{%s}, \"workload\", \"$1\", \"owner_name\", \"(.*)\")\n)",
			cl, sel(s.ksm, `owner_kind="`+kind+`"`))}
	}
	fitted := fmt.Sprintf("(\n  %s\n  or %s\n  (group by (%s) (%s) and on (%s, namespace, pod) %s)\n)", s.gofit, s.on, by, recGoProcs, cl, s.planAnno)
	// Misfitted: GOMAXPROCS above what gofit would plan from the limit, or
	// GOMEMLIMIT at the limit; for a container that serves gofit's
	// metrics, gofit's own statuses say it (they compare with its plan).
	misfitted := fmt.Sprintf("(\n  (\n    %s > %s %s\n    or %s\n    ((%s < %s) / %s %s >= %s)\n  )\n  unless %s %s\n  or %s\n  group by (%s) (%s{status=~\"gomaxprocs_above_limit|gomemlimit_at_limit\"})\n)",
		recGoProcs, s.on, s.thr, s.on, recGoMemLimit, unsetGOMEMLIMIT, s.on, recMemLimit, num(s.p.GOMEMLIMITShare), s.on, s.gofit, s.on, s.by, recFitStatus)
	unset := fmt.Sprintf("(\n  (%s >= %s) and %s %s\n)", recGoMemLimit, unsetGOMEMLIMIT, s.on, recMemLimit)
	status := func(name, expr string) Rule {
		return Rule{Record: recGoFit, Labels: map[string]string{"status": name}, Expr: fmt.Sprintf(
			"(\n  group by (%s) (\n%s\n  )\n  * %s group_left (workload, workload_type)\n  (\n    %s\n    or %s\n    label_replace(label_replace(group by (%s) (%s), \"workload\", \"$1\", \"pod\", \"(.*)\"), \"workload_type\", \"pod\", \"\", \"\")\n  )\n)",
			by, indent(expr, "    "), "on ("+cl+", namespace, pod)", recOwner, "on ("+cl+", namespace, pod)", cl+", namespace, pod", recGoProcs)}
	}
	return []Rule{
		// The workload of each pod, computed as kubernetes-mixin's
		// namespace_workload_pod:kube_pod_owner:relabel is (a Deployment
		// through its ReplicaSet, a StatefulSet, a DaemonSet) but under
		// gofit's name: the rules work without the mixin and never write
		// its series.
		{Record: recOwner, Labels: map[string]string{"workload_type": "deployment"}, Expr: fmt.Sprintf(
			"max by (%s, namespace, workload, pod) (\n  label_replace(\n    label_replace(kube_pod_owner{%s}, \"replicaset\", \"$1\", \"owner_name\", \"(.*)\")\n    * on (%s, namespace, replicaset) group_left (owner_name)\n    topk by (%s, namespace, replicaset) (1, max by (%s, namespace, replicaset, owner_name) (kube_replicaset_owner{%s})),\n    \"workload\", \"$1\", \"owner_name\", \"(.*)\"\n  )\n)",
			cl, sel(s.ksm, `owner_kind="ReplicaSet"`), cl, cl, cl, sel(s.ksm, `owner_kind="Deployment"`))},
		owner("StatefulSet", "statefulset"),
		owner("DaemonSet", "daemonset"),

		{Record: recCtrThrottled, Expr: fmt.Sprintf("sum by (%s) (rate(container_cpu_cfs_throttled_periods_total{%s}[%s]))\n/\nsum by (%s) (rate(container_cpu_cfs_periods_total{%s}[%s]))", by, s.cadv, w, by, s.cadv, w)},
		{Record: recCtrCPU, Expr: fmt.Sprintf("sum by (%s) (rate(container_cpu_usage_seconds_total{%s}[%s]))", by, s.cadv, w)},
		{Record: recCtrWorkingSet, Expr: fmt.Sprintf("max by (%s) (container_memory_working_set_bytes{%s})", by, s.cadv)},
		{Record: recCPULimit, Expr: fmt.Sprintf("max by (%s) (kube_pod_container_resource_limits{%s})", by, sel(s.ksm, `resource="cpu"`))},
		{Record: recMemLimit, Expr: fmt.Sprintf("max by (%s) (kube_pod_container_resource_limits{%s})", by, sel(s.ksm, `resource="memory"`))},
		{Record: recGoProcs, Expr: fmt.Sprintf("max by (%s) (go_sched_gomaxprocs_threads)", by)},
		{Record: recGoMemLimit, Expr: fmt.Sprintf("max by (%s) (go_gc_gomemlimit_bytes)", by)},
		// What GOMEMLIMIT limits: the runtime's memory less what it gave
		// back to the OS.
		{Record: recGoMemory, Expr: fmt.Sprintf("max by (%s) (go_memstats_sys_bytes - go_memstats_heap_released_bytes)", by)},
		{Record: recGoGCCycles, Expr: fmt.Sprintf("sum by (%s) (rate(go_gc_duration_seconds_count[%s]))", by, w)},
		// GC CPU time where the process exports it (client_golang's
		// runtime/metrics opt-in), over the container's CPU.
		{Record: recGoGCShare, Expr: fmt.Sprintf("sum by (%s) (rate(go_cpu_classes_gc_total_cpu_seconds_total[%s]))\n/ %s\n%s", by, w, s.on, recCtrCPU)},

		// Fit status: one status per Go container, with its workload (a
		// bare pod is its own workload).
		status("misfitted", misfitted),
		status("fitted_by_gofit", fitted+"\nunless "+s.on+"\n"+misfitted),
		status("unfitted", unset+"\nunless "+s.on+"\n"+fitted+"\nunless "+s.on+"\n"+misfitted),
		status("fitted_by_hand", fmt.Sprintf("%s\nunless %s\n%s\nunless %s\n%s\nunless %s\n%s", recGoProcs, s.on, fitted, s.on, misfitted, s.on, unset)),
		{Record: recGoFitCount, Expr: fmt.Sprintf("count by (%s, namespace, status) (%s)", cl, recGoFit)},
		{Record: recWlThrottled, Expr: fmt.Sprintf("sum by (%s, namespace, workload) (\n  (sum by (%s) (rate(container_cpu_cfs_throttled_periods_total{%s}[%s])) and %s %s)\n  * on (%s, namespace, pod) group_left (workload) %s\n)\n/\nsum by (%s, namespace, workload) (\n  (sum by (%s) (rate(container_cpu_cfs_periods_total{%s}[%s])) and %s %s)\n  * on (%s, namespace, pod) group_left (workload) %s\n)",
			cl, by, s.cadv, w, s.on, recGoProcs, cl, recOwner, cl, by, s.cadv, w, s.on, recGoProcs, cl, recOwner)},
		{Record: recWlGCCycles, Expr: fmt.Sprintf("sum by (%s, namespace, workload) (\n  %s\n  * on (%s, namespace, pod) group_left (workload) %s\n)", cl, recGoGCCycles, cl, recOwner)},
	}
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

type addFunc func(name, severity, forD, expr, summary, description string)

func (s standardRules) addAlerts(add addFunc) {
	p, on, by, cl := s.p, s.on, s.by, s.cl
	fd := promDuration
	inCluster := clusterPhrase(cl)
	who := "{{ $labels.namespace }}/{{ $labels.pod }} container {{ $labels.container }}" + inCluster
	notGofit := "\nunless " + on + "\n" + s.gofit

	limitWord := "its CPU limit"
	add("GoGOMAXPROCSAboveCPULimit", "warning", fd(p.ThrottledFor),
		fmt.Sprintf("%s > %s\nand %s\n(%s > %s %s)%s", recCtrThrottled, num(p.ThrottledShare), on, recGoProcs, on, s.thr, notGofit),
		"A Go process is throttled because its GOMAXPROCS is above its CPU limit.",
		who+" was throttled in {{ $value | humanizePercentage }} of its CFS periods (cAdvisor) while its GOMAXPROCS (go_sched_gomaxprocs_threads) is above "+limitWord+" (kube-state-metrics): its threads spend each period's quota early and wait out the rest. Fit GOMAXPROCS to the limit.")

	add("GoGOMEMLIMITUnset", "info", fd(p.GOMEMLIMITUnsetFor),
		fmt.Sprintf("%s\nand %s\n(%s >= %s)%s", recMemLimit, on, recGoMemLimit, unsetGOMEMLIMIT, notGofit),
		"A Go process runs without GOMEMLIMIT under a memory limit.",
		who+" has a memory limit of {{ $value | humanize1024 }}B and no GOMEMLIMIT (go_gc_gomemlimit_bytes reports the int64 maximum): its GC does not know the limit, so the heap may grow to GOGC's target past it and the container is OOM-killed. Set GOMEMLIMIT below the limit, or let gofit plan it.")

	add("GoGOMEMLIMITAtMemoryLimit", "warning", fd(p.GOMEMLIMITFor),
		fmt.Sprintf("(%s < %s)\n/ %s\n%s\n>= %s%s", recGoMemLimit, unsetGOMEMLIMIT, on, recMemLimit, num(p.GOMEMLIMITShare), notGofit),
		"GOMEMLIMIT is at or above the container's memory limit.",
		who+" has GOMEMLIMIT at {{ $value | humanizePercentage }} of its memory limit. Memory outside the Go heap has no room left, so the kernel OOM-kills the container before the GC works harder. Set GOMEMLIMIT below the limit, or let gofit plan it.")

	add("GoHeapPinnedAtGOMEMLIMIT", "warning", fd(p.HeapPinnedFor),
		fmt.Sprintf("%s / %s (%s < %s) > %s\nand %s\n(\n  %s > %s\n  or %s\n  %s > %s\n)%s",
			recGoMemory, on, recGoMemLimit, unsetGOMEMLIMIT, num(p.GoMemoryShare), on,
			recGoGCCycles, num(p.GCCyclesPerSecond), on, recGoGCShare, num(p.GCCPUShare), notGofit),
		"A Go heap is pinned at GOMEMLIMIT while the GC runs back to back.",
		who+" holds {{ $value | humanizePercentage }} of its GOMEMLIMIT and its GC runs more than "+num(p.GCCyclesPerSecond)+" cycles a second (or takes more than "+pct(p.GCCPUShare)+" of the container's CPU): the step before a GC death spiral. Give it more memory or find what holds the heap.")

	oomKilled := fmt.Sprintf("max by (%s) (kube_pod_container_status_last_terminated_reason{%s}) == 1", by, sel(s.ksm, `reason="OOMKilled"`))
	restarts := func(d string) string {
		return fmt.Sprintf("sum by (%s) (increase(kube_pod_container_status_restarts_total{%s}[%s]))", by, s.ksm, d)
	}
	add("GoContainerOOMKilled", "warning", "",
		fmt.Sprintf("(\n  (%s > 0 and %s %s)\n  or %s\n  (sum by (%s) (increase(container_oom_events_total{%s}[%s])) > 0 unless %s %s)\n)\nand %s\n%s",
			restarts(fd(p.OOMWindow)), on, oomKilled, on, by, s.cadv, fd(p.OOMWindow), on, s.gofit, on, s.goCtr),
		"A Go container was OOM-killed.",
		"The OOM killer killed "+who+" in the last "+fd(p.OOMWindow)+" (kube-state-metrics' last terminated reason OOMKilled with a restart, or cAdvisor's container_oom_events_total): the Go runtime's own counters die with the process.")

	add("GoContainerOOMRestarts", "critical", "",
		fmt.Sprintf("%s >= %s\nand %s\n%s\nand %s\n%s", restarts(fd(p.OOMRestartWindow)), num(p.OOMRestarts), on, oomKilled, on, s.goCtr),
		"A Go container keeps restarting after OOM kills.",
		who+" restarted {{ $value | humanize }} times in "+fd(p.OOMRestartWindow)+", the last time OOMKilled: it cannot fit its limit. Raise the memory limit or fit GOMEMLIMIT.")

	api := sel(p.APIServerSelector, `name="`+p.WebhookName+`"`)
	add("GofitWebhookFailingOpen", "warning", fd(p.WebhookErrorFor),
		fmt.Sprintf("sum by (%s, name) (increase(apiserver_admission_webhook_fail_open_count{%s}[%s])) > 0", cl, api, s.w),
		"The API server admits pods without gofit's webhook.",
		"The API server"+inCluster+" failed open on the webhook {{ $labels.name }} {{ $value | humanize }} times in "+s.w+": it could not call it (down, timing out, a bad certificate) and, with failurePolicy Ignore, admitted those pods unfitted.")
	add("GofitWebhookRejections", "warning", fd(p.WebhookErrorFor),
		fmt.Sprintf("sum by (%s, name, operation, rejection_code) (increase(apiserver_admission_webhook_rejection_count{%s}[%s])) > 0", cl, api, s.w),
		"The API server rejects requests because of gofit's webhook.",
		"The API server"+inCluster+" rejected {{ $value | humanize }} {{ $labels.operation }} requests in "+s.w+" on the webhook {{ $labels.name }} (code {{ $labels.rejection_code }}): gofit's webhook never denies a pod, so a request it answered badly failed closed.")

	clusters := fmt.Sprintf("(group by (%s) (kube_node_info{%s}) or on () vector(1))", cl, s.ksm)
	target := func(component, jobSel, extra string) {
		name := map[string]string{"webhook": "GofitWebhook", "agent": "GofitNodeAgent"}[component]
		human := map[string]string{"webhook": "gofit webhook", "agent": "gofit node agent"}[component]
		add(name+"TargetDown", "warning", fd(p.TargetDownFor),
			fmt.Sprintf("max by (%s, namespace, pod%s) (up{%s}) == 0", cl, extra, jobSel),
			"Prometheus cannot scrape a "+human+".",
			"Prometheus cannot scrape the "+human+" {{ $labels.namespace }}/{{ $labels.pod }}"+inCluster+": it is down, or its metrics port is unreachable.")
		add(name+"Absent", "warning", fd(p.TargetDownFor),
			fmt.Sprintf("%s\nunless on (%s)\ngroup by (%s) (up{%s} == 1)", clusters, cl, cl, jobSel),
			"No "+human+" is up.",
			"Prometheus finds no "+human+" target that is up in cluster {{ $labels."+cl+" }}: it is not installed, not scraped (its PodMonitor is not selected) or down everywhere.")
	}
	target("webhook", p.WebhookJobSelector, "")
	target("agent", p.AgentJobSelector, ", node")
	_ = by
}

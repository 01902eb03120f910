package monitoring

import "strconv"

// Dashboard is a Grafana dashboard, in the JSON model Grafana imports and
// the kube-prometheus-stack sidecar loads from ConfigMaps.
type Dashboard struct {
	UID           string      `json:"uid"`
	Title         string      `json:"title"`
	Description   string      `json:"description"`
	Tags          []string    `json:"tags"`
	SchemaVersion int         `json:"schemaVersion"`
	Editable      bool        `json:"editable"`
	Refresh       string      `json:"refresh"`
	Time          TimeRange   `json:"time"`
	Templating    Templating  `json:"templating"`
	Annotations   Annotations `json:"annotations"`
	Panels        []Panel     `json:"panels"`
}

// Annotations mark events on every time series panel: rollouts and
// GOMAXPROCS changes.
type Annotations struct {
	List []Annotation `json:"list"`
}

// Annotation is a Prometheus annotation query: an event at each step
// where Expr returns a series.
type Annotation struct {
	Name        string     `json:"name"`
	Datasource  Datasource `json:"datasource"`
	Enable      bool       `json:"enable"`
	IconColor   string     `json:"iconColor"`
	Expr        string     `json:"expr"`
	Step        string     `json:"step"`
	TitleFormat string     `json:"titleFormat"`
	TextFormat  string     `json:"textFormat,omitempty"`
	TagKeys     string     `json:"tagKeys,omitempty"`
}

// TimeRange is the dashboard's default range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Templating holds the dashboard's variables.
type Templating struct {
	List []Variable `json:"list"`
}

// Variable is a dashboard variable: the data source, a label_values query,
// or a text box.
type Variable struct {
	Name       string      `json:"name"`
	Label      string      `json:"label,omitempty"`
	Type       string      `json:"type"`
	Query      any         `json:"query"`
	Datasource *Datasource `json:"datasource,omitempty"`
	Refresh    int         `json:"refresh,omitempty"`
	Multi      bool        `json:"multi,omitempty"`
	IncludeAll bool        `json:"includeAll,omitempty"`
	AllValue   string      `json:"allValue,omitempty"`
	Sort       int         `json:"sort,omitempty"`
	Current    *Current    `json:"current,omitempty"`
}

// Current is a variable's default value.
type Current struct {
	Text  string `json:"text"`
	Value string `json:"value"`
}

// Datasource names the Prometheus data source through the datasource
// variable.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is one panel; Targets are its PromQL queries.
type Panel struct {
	ID          int         `json:"id"`
	Type        string      `json:"type"`
	Title       string      `json:"title"`
	Description string      `json:"description"`
	Datasource  Datasource  `json:"datasource"`
	GridPos     GridPos     `json:"gridPos"`
	Targets     []Target    `json:"targets"`
	FieldConfig FieldConfig `json:"fieldConfig"`
	Options     any         `json:"options,omitempty"`
	// Transformations join a table's queries into one row per workload.
	Transformations []Transformation `json:"transformations,omitempty"`

	// gofitOnly: the panel reads gofit's own metrics, which only fitted
	// containers serve (tests expect data for a fitted pod only).
	gofitOnly bool
	// apiServer: the panel reads the API server's admission metrics.
	apiServer bool
}

// Transformation is one of Grafana's data transformations.
type Transformation struct {
	ID      string `json:"id"`
	Options any    `json:"options"`
}

// GridPos places a panel on Grafana's 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one query.
type Target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Instant      bool   `json:"instant,omitempty"`
	Format       string `json:"format,omitempty"`
}

// FieldConfig sets the unit and limits of a panel's values.
type FieldConfig struct {
	Defaults FieldDefaults `json:"defaults"`
}

// FieldDefaults are the unit, the axis range and the data links.
type FieldDefaults struct {
	Unit  string   `json:"unit,omitempty"`
	Min   *float64 `json:"min,omitempty"`
	Max   *float64 `json:"max,omitempty"`
	Links []Link   `json:"links,omitempty"`
}

// Link is a data link: a click on a value opens URL.
type Link struct {
	Title string `json:"title"`
	URL   string `json:"url"`
}

var ds = Datasource{Type: "prometheus", UID: "${datasource}"}

func datasourceVar() Variable {
	return Variable{Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus"}
}

// queryVar is a label_values variable. A multi-value one offers All,
// which Grafana writes as the regex of every value it lists (no
// allValue: ".*" would reach past the variables above it).
func queryVar(name, label, query string, multi bool) Variable {
	v := Variable{Name: name, Label: label, Type: "query", Datasource: &ds, Refresh: 2, Sort: 1,
		Query: map[string]string{"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"}}
	if multi {
		v.Multi, v.IncludeAll = true, true
	}
	return v
}

// layout gives panels ids and places them two to a row, full width when
// wide.
type layout struct {
	panels []Panel
	x, y   int
}

func (l *layout) add(p Panel, wide bool) {
	w, h := 12, 8
	if wide {
		w = 24
	}
	if l.x+w > 24 {
		l.x, l.y = 0, l.y+h
	}
	p.ID = len(l.panels) + 1
	p.GridPos = GridPos{H: h, W: w, X: l.x, Y: l.y}
	p.Datasource = ds
	if p.Type == "" {
		p.Type = "timeseries"
	}
	for i := range p.Targets {
		p.Targets[i].RefID = string(rune('A' + i))
	}
	l.panels = append(l.panels, p)
	l.x += w
	if wide {
		l.x, l.y = 0, l.y+h
	}
}

func unit(u string) FieldConfig { return FieldConfig{Defaults: FieldDefaults{Unit: u}} }

func share() FieldConfig {
	zero, one := 0.0, 1.0
	return FieldConfig{Defaults: FieldDefaults{Unit: "percentunit", Min: &zero, Max: &one}}
}

// line labels a series for the legend, so optional series (memory.high,
// the plan's warnings) can share one query with those always there.
func line(expr, name string) string {
	return `label_replace(` + expr + `, "line", "` + name + `", "", "")`
}

// LatencyMetric is the workload dashboard's default latency histogram
// (its latency_metric variable): client_golang's usual name, and what
// examples/service serves.
const LatencyMetric = "http_request_duration_seconds"

// Dashboards returns the workload and the fleet dashboard.
func Dashboards(p Params) []Dashboard {
	return []Dashboard{workload(p), fleet(p)}
}

// quantileLegend names a quantile the way people say it: 0.5 is p50,
// 0.999 is p99.9.
func quantileLegend(q float64) string {
	return "p" + strconv.FormatFloat(q*100, 'f', -1, 64)
}

// clusterVar is the cluster variable, over the series every Go container
// has; without a cluster label it has one empty value, which matches the
// series without one.
func clusterVar(p Params) Variable {
	return queryVar("cluster", "Cluster", "label_values("+recGoProcs+", "+p.ClusterLabel+")", false)
}

func workload(p Params) Dashboard {
	cl := p.ClusterLabel
	c := cl + `="$cluster"`
	sel := c + `, namespace="$namespace", pod=~"$pod"`
	s := func(metric string) string { return metric + "{" + sel + "}" }
	sw := func(metric, matchers string) string { return metric + "{" + sel + ", " + matchers + "}" }
	byPod := func(metric string) string { return "max by (pod) (" + s(metric) + ")" }
	cadv := func(metric string) string {
		return metric + "{" + sel + ", " + sel2(p.CAdvisorSelector, `container!=""`, `container!="POD"`) + "}"
	}
	ksm := func(metric, matchers string) string {
		return metric + "{" + sel + ", " + sel2(p.KubeStateSelector, matchers) + "}"
	}
	var l layout
	// From the standard exporters: any Go container, fitted or not.
	l.add(Panel{Title: "CPU used, request and limit", Description: "CPU the container used, in cores (cAdvisor, 5m rate), against its request and limit (kube-state-metrics).",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: "sum by (pod) (" + s(recCtrCPU) + ")", LegendFormat: "{{pod}} used"},
			{Expr: line("max by (pod) ("+ksm("kube_pod_container_resource_requests", `resource="cpu"`)+")", "request") + " or " + line(byPod(recCPULimit), "limit"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Throttled share of CFS periods", Description: "Share of CFS periods in which the container was throttled (cAdvisor). High with GOMAXPROCS above the limit: the Go runtime's threads spend the quota early (GoGOMAXPROCSAboveCPULimit).",
		FieldConfig: share(), Targets: []Target{{Expr: "max by (pod) (" + s(recCtrThrottled) + ")", LegendFormat: "{{pod}}"}}}, false)
	l.add(Panel{Title: "GOMAXPROCS and CPU limit", Description: "GOMAXPROCS the Go runtime reports (go_sched_gomaxprocs_threads), gofit's plan where gofit fits the container, and the CPU limit in cores. Fitted: GOMAXPROCS at or under the limit (at least 1).",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: line(byPod(recGoProcs), "GOMAXPROCS") + " or " + line(byPod("gofit_plan_gomaxprocs"), "planned") + " or " + line(byPod(recCPULimit), "limit cores"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Go memory, GOMEMLIMIT and the memory limit", Description: "What the Go runtime holds (go_memstats_sys_bytes less what it released) and its heap in use, against GOMEMLIMIT (no line: unset), the container's working set (cAdvisor) and its memory limit (kube-state-metrics).",
		FieldConfig: unit("bytes"), Targets: []Target{
			{Expr: line(byPod(recGoMemory), "Go total") + " or " + line(byPod("go_memstats_heap_inuse_bytes"), "heap in use") + " or " + line(byPod(recCtrWorkingSet), "working set"), LegendFormat: "{{pod}} {{line}}"},
			{Expr: line("max by (pod) ("+s(recGoMemLimit)+" < "+unsetGOMEMLIMIT+")", "GOMEMLIMIT") + " or " + line(byPod(recMemLimit), "limit"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "GC cycles and GOGC", Description: "GC cycles a second (go_gc_duration_seconds_count), and GOGC (go_gc_gogc_percent; -1 is off). Many cycles with the heap at GOMEMLIMIT: GoHeapPinnedAtGOMEMLIMIT.",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: "max by (pod) (" + s(recGoGCCycles) + ")", LegendFormat: "{{pod}} GC/s"},
			{Expr: byPod("go_gc_gogc_percent"), LegendFormat: "{{pod}} GOGC"},
		}}, false)
	l.add(Panel{Title: "GC pauses", Description: "Stop-the-world GC pauses over the last cycles (client_golang's go_gc_duration_seconds summary): median and longest.",
		FieldConfig: unit("s"), Targets: []Target{
			{Expr: "max by (pod) (" + sw("go_gc_duration_seconds", `quantile="0.5"`) + ")", LegendFormat: "{{pod}} median"},
			{Expr: "max by (pod) (" + sw("go_gc_duration_seconds", `quantile="1"`) + ")", LegendFormat: "{{pod}} max"},
		}}, false)
	l.add(Panel{Title: "Restarts and OOM kills", Description: "Container restarts (kube-state-metrics), OOM kills in the container's cgroup (cAdvisor), and 1 while the last termination was OOMKilled.",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: line("sum by (pod) (increase("+ksm("kube_pod_container_status_restarts_total", "")+"[$__rate_interval]))", "restarts") +
				" or " + line("sum by (pod) (increase("+cadv("container_oom_events_total")+"[$__rate_interval]))", "OOM kills") +
				" or " + line("max by (pod) ("+ksm("kube_pod_container_status_last_terminated_reason", `reason="OOMKilled"`)+")", "last terminated OOMKilled"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Fit status", Type: "table", Description: "Each container's fit status: fitted by gofit, fitted by hand, unfitted (no GOMEMLIMIT under a memory limit) or misfitted (GOMAXPROCS above the limit, or GOMEMLIMIT at it).",
		FieldConfig: unit("short"), Targets: []Target{{Expr: "max by (pod, container, status) (" + s(recGoFit) + ")", Instant: true, Format: "table"}}}, false)
	lat := func(q float64) Target {
		return Target{Expr: "histogram_quantile(" + num(q) + ", sum by (le) (rate(${latency_metric}_bucket{" + sel + "}[$__rate_interval])))", LegendFormat: quantileLegend(q)}
	}
	l.add(Panel{Title: "Latency percentiles ($latency_metric)", Description: "p50, p90, p99 and p99.9 from the service's own latency histogram (the latency_metric variable, without _bucket). Watch them while GOMAXPROCS or GOMEMLIMIT change.",
		FieldConfig: unit("s"), Targets: []Target{lat(0.5), lat(0.9), lat(0.99), lat(0.999)}}, true)

	// gofit's own metrics, where gofit fits the container.
	l.add(Panel{Title: "gofit: Go memory and limits", gofitOnly: true, Description: "Where gofit fits the container: what the Go runtime holds against GOMEMLIMIT, its heap objects and heap goal, against GOMEMLIMIT, memory.high and the container's memory limit.",
		FieldConfig: unit("bytes"), Targets: []Target{
			{Expr: line(byPod("gofit_go_memory_bytes"), "Go total") + " or " + line(byPod("gofit_go_heap_objects_bytes"), "heap") + " or " + line(byPod("gofit_go_heap_goal_bytes"), "heap goal"), LegendFormat: "{{pod}} {{line}}"},
			{Expr: line(byPod("gofit_gomemlimit_bytes"), "GOMEMLIMIT") + " or " + line(byPod("gofit_memory_high_bytes"), "memory.high") + " or " + line(byPod("gofit_memory_limit_bytes"), "limit"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "gofit: GC share of busy CPU", gofitOnly: true, Description: "Where gofit fits the container: the Go runtime's GC CPU time over its busy CPU time (GC, scavenger, user code). Above 25% with the heap at GOMEMLIMIT: GofitGoHeapPinnedAtGOMEMLIMIT.",
		FieldConfig: share(), Targets: []Target{{Expr: "max by (pod) (" + s(recGC) + ")", LegendFormat: "{{pod}}"}}}, false)
	l.add(Panel{Title: "gofit: pressure stalls (PSI)", gofitOnly: true, Description: "Where gofit fits the container: share of time some (or all) of its tasks waited for CPU or memory.",
		FieldConfig: share(), Targets: []Target{{Expr: "max by (pod, resource, kind) (" + s(recPressure) + ")", LegendFormat: "{{pod}} {{resource}} {{kind}}"}}}, false)
	l.add(Panel{Title: "gofit: OOM kills, limit and memory.high hits, major faults", gofitOnly: true, Description: "Where gofit fits the container, per second: processes the OOM killer killed, times usage hit the limit or went over memory.high, and page faults that read from disk.",
		FieldConfig: unit("ops"), Targets: []Target{
			{Expr: line("sum by (pod) (rate("+s("gofit_oom_kills_total")+"[$__rate_interval]))", "OOM kills") + " or " + line("sum by (pod) (rate("+s("gofit_memory_limit_hits_total")+"[$__rate_interval]))", "limit hits") + " or " + line("sum by (pod) (rate("+s("gofit_memory_high_hits_total")+"[$__rate_interval]))", "memory.high hits"), LegendFormat: "{{pod}} {{line}}"},
			{Expr: "sum by (pod) (rate(" + s("gofit_memory_major_faults_total") + "[$__rate_interval]))", LegendFormat: "{{pod}} major faults"},
		}}, false)
	l.add(Panel{Title: "gofit: plan, reasons and warnings", Type: "table", gofitOnly: true, Description: "Where gofit fits the container: where each planned setting comes from (gofit_plan_reason) and the warnings in force (gofit_plan_warning), with the planned values.",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: "max by (pod, setting, reason) (" + s("gofit_plan_reason") + ") or max by (pod, warning) (" + s("gofit_plan_warning") + ")", Instant: true, Format: "table"},
			{Expr: line(byPod("gofit_plan_gomaxprocs"), "GOMAXPROCS") + " or " + line(byPod("gofit_plan_gomemlimit_bytes"), "GOMEMLIMIT") + " or " + line(byPod("gofit_plan_gogc_percent"), "GOGC"), Instant: true, Format: "table"},
		}}, false)

	fit := recGoFit + "{" + c + `, namespace="$namespace"`
	latency := Variable{Name: "latency_metric", Label: "Latency histogram", Type: "textbox", Query: LatencyMetric, Current: &Current{Text: LatencyMetric, Value: LatencyMetric}}
	ownerSel := c + `, namespace="$namespace"`
	rollout := func(kind string) string {
		return "changes(kube_" + kind + "_status_observed_generation{" + sel2(p.KubeStateSelector, ownerSel, kind+`="$workload"`) + "}[2m]) > 0"
	}
	d := dashboard(p, "gofit-workload", "gofit / Workload",
		"A Go workload against its container, fitted by gofit or not: CPU, throttling, GOMAXPROCS, Go memory against GOMEMLIMIT and the limits, GC, restarts and OOM kills, the fit status and the service's latency; gofit's plan, PSI and memory events where gofit fits it.",
		"30s", "now-1h", false,
		queryVar("workload", "Workload", "label_values("+fit+"}, workload)", false),
		queryVar("pod", "Pod", "label_values("+fit+`, workload="$workload"}, pod)`, true),
		latency)
	d.Annotations.List = []Annotation{
		{Name: "Rollouts", Datasource: ds, Enable: true, IconColor: "blue", Step: "60s", TitleFormat: "Rollout of $workload",
			TextFormat: "The workload's spec changed (observed generation).",
			Expr:       rollout("deployment") + " or " + rollout("statefulset") + " or " + rollout("daemonset")},
		{Name: "GOMAXPROCS changes", Datasource: ds, Enable: true, IconColor: "orange", Step: "60s", TitleFormat: "GOMAXPROCS changed in {{pod}}",
			TagKeys: "pod", Expr: "changes(" + s("go_sched_gomaxprocs_threads") + "[2m]) > 0 or changes(" + s("gofit_gomaxprocs") + "[2m]) > 0"},
	}
	d.Panels = l.panels
	return d
}

// dashboard is what gofit's dashboards share: tags, schema, refresh every
// refresh over from..now, and the data source, cluster and namespace
// (multi-valued or not) variables ahead of their own vars. The caller adds
// the panels and any annotations.
func dashboard(p Params, uid, title, description, refresh, from string, multiNamespace bool, vars ...Variable) Dashboard {
	c := p.ClusterLabel + `="$cluster"`
	return Dashboard{
		UID: uid, Title: title, Description: description,
		Tags: []string{"gofit", "go", "kubernetes"}, SchemaVersion: 39, Refresh: refresh, Time: TimeRange{from, "now"},
		Templating: Templating{List: append([]Variable{
			datasourceVar(),
			clusterVar(p),
			queryVar("namespace", "Namespace", "label_values("+recGoFit+"{"+c+"}, namespace)", multiNamespace),
		}, vars...)},
		Annotations: Annotations{List: []Annotation{}},
	}
}

// sel2 joins label matchers, leaving out empty ones.
func sel2(matchers ...string) string { return sel(matchers...) }

func fleet(p Params) Dashboard {
	cl := p.ClusterLabel
	c := cl + `="$cluster"`
	ns := c + `, namespace=~"$namespace"`
	var l layout
	l.add(Panel{Title: "Go containers by fit status", Type: "bargauge", Description: "Every container running a Go process that serves client_golang's metrics (or gofit's): fitted by gofit, fitted by hand, unfitted (no GOMEMLIMIT under a memory limit), misfitted (GOMAXPROCS above the CPU limit, or GOMEMLIMIT at the memory limit).",
		FieldConfig: unit("short"), Targets: []Target{{Expr: "sum by (status) (" + recGoFitCount + "{" + ns + "})", LegendFormat: "{{status}}", Instant: true}}}, false)
	link := "/d/gofit-workload/gofit-workload?var-datasource=${datasource}&var-cluster=${cluster}&var-namespace=${__data.fields.namespace}&var-workload=${__data.fields.workload}&${__url_time_range}"
	wl := func(expr string) string { return "max by (" + cl + ", namespace, workload) (" + expr + ")" }
	l.add(Panel{Title: "Go workloads: fit status, throttling and GC cost", Type: "table", Description: "One row per Go workload (a Deployment through its ReplicaSet, a StatefulSet, a DaemonSet, from kube_pod_owner; a bare pod is its own): its fit status, the throttled share of its containers' CFS periods and its GC cycles a second, worst first. A click on a workload opens its workload dashboard.",
		FieldConfig: FieldConfig{Defaults: FieldDefaults{Links: []Link{{Title: "Workload dashboard", URL: link}}}},
		Transformations: []Transformation{
			{ID: "merge", Options: map[string]any{}},
			{ID: "organize", Options: map[string]any{"excludeByName": map[string]bool{"Time": true}, "renameByName": map[string]string{"Value #A": "containers", "Value #B": "throttled share", "Value #C": "GC cycles/s"}}},
			{ID: "sortBy", Options: map[string]any{"sort": []map[string]any{{"field": "throttled share", "desc": true}}}},
		},
		Targets: []Target{
			{Expr: "count by (" + cl + ", namespace, workload, workload_type, status) (" + recGoFit + "{" + ns + "})", Instant: true, Format: "table"},
			{Expr: wl(recWlThrottled + "{" + ns + "}"), Instant: true, Format: "table"},
			{Expr: wl(recWlGCCycles + "{" + ns + "}"), Instant: true, Format: "table"},
		}}, true)
	l.add(Panel{Title: "Most throttled Go workloads", Description: "The ten Go workloads with the largest throttled share of CFS periods (cAdvisor).",
		FieldConfig: share(), Targets: []Target{{Expr: "topk(10, " + recWlThrottled + "{" + ns + "})", LegendFormat: "{{namespace}}/{{workload}}"}}}, false)
	l.add(Panel{Title: "Largest GC cost", Description: "The ten Go workloads whose GC runs the most cycles a second.",
		FieldConfig: unit("short"), Targets: []Target{{Expr: "topk(10, " + recWlGCCycles + "{" + ns + "})", LegendFormat: "{{namespace}}/{{workload}}"}}}, false)
	l.add(Panel{Title: "Containers misfitted or unfitted", Type: "table", Description: "Each Go container that is misfitted or unfitted, with its workload.",
		FieldConfig: unit("short"), Targets: []Target{{Expr: recGoFit + "{" + ns + `, status=~"misfitted|unfitted"}`, Instant: true, Format: "table"}}}, false)
	l.add(Panel{Title: "Fitted by gofit: status", Type: "bargauge", gofitOnly: true, Description: "Containers serving gofit's metrics: fitted, GOMAXPROCS above the CPU limit and gofit's plan, a memory limit without GOMEMLIMIT, GOMEMLIMIT at or above the limit, a plan warning in force (one container may be in several).",
		FieldConfig: unit("short"), Targets: []Target{{Expr: "sum by (status) (" + recFitCount + "{" + ns + "})", LegendFormat: "{{status}}", Instant: true}}}, false)
	l.add(Panel{Title: "API server: gofit webhook failing open and rejections", apiServer: true, Description: "Per second, as the API server counts them: calls to gofit's webhook that failed open (pods admitted unfitted) and requests rejected on it.",
		FieldConfig: unit("reqps"), Targets: []Target{
			{Expr: line("sum by (name) (rate(apiserver_admission_webhook_fail_open_count{"+sel2(p.APIServerSelector, c, `name="`+p.WebhookName+`"`)+"}[$__rate_interval]))", "failed open") +
				" or " + line("sum by (name) (rate(apiserver_admission_webhook_rejection_count{"+sel2(p.APIServerSelector, c, `name="`+p.WebhookName+`"`)+"}[$__rate_interval]))", "rejected"), LegendFormat: "{{line}}"},
		}}, false)
	l.add(Panel{Title: "Webhook admissions by outcome", Description: "Admissions per second by outcome: patched, unchanged, skipped, ignored, warned; error and busy are answered open (failurePolicy Ignore).",
		FieldConfig: unit("reqps"), Targets: []Target{{Expr: "sum by (outcome) (" + recWebhookRate + "{" + c + "})", LegendFormat: "{{outcome}}"}}}, false)
	l.add(Panel{Title: "Webhook p99 latency and timeout", Description: "p99 admission latency against the API server's timeoutSeconds.",
		FieldConfig: unit("s"), Targets: []Target{
			{Expr: "max by (" + cl + ", namespace) (" + recWebhookP99 + "{" + c + "})", LegendFormat: "p99 {{namespace}}"},
			{Expr: "vector(" + num(p.WebhookTimeoutSeconds) + ")", LegendFormat: "timeoutSeconds"},
		}}, false)
	l.add(Panel{Title: "Webhook certificate expires in", Type: "stat", Description: "Time until the serving certificate now loaded expires; renewed well before 7 days.",
		FieldConfig: unit("s"), Targets: []Target{{Expr: "min by (" + cl + ", namespace, pod) (gofit_webhook_certificate_expiry_timestamp_seconds{" + c + "} > 0) - time()", LegendFormat: "{{pod}}", Instant: true}}}, false)
	l.add(Panel{Title: "Webhook and node agent targets up", Description: "1 for each gofit webhook and node agent target Prometheus scrapes, 0 while it is down.",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: "max by (job, pod) (up{" + sel2(c, p.WebhookJobSelector) + "}) or max by (job, pod) (up{" + sel2(c, p.AgentJobSelector) + "})", LegendFormat: "{{job}} {{pod}}"},
		}}, false)
	l.add(Panel{Title: "Node agent: time since last pass", Description: "Seconds since each node agent ended a reconcile pass (passes run every 10s).",
		FieldConfig: unit("s"), Targets: []Target{{Expr: "time() - max by (node) (gofit_node_last_reconcile_timestamp_seconds{" + c + "})", LegendFormat: "{{node}}"}}}, false)
	l.add(Panel{Title: "Node agent: errors, skipped passes, unprotected pods", Description: "Per node: failed cgroup reads or writes and skipped passes per second, and pods the last pass left unprotected.",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: line("sum by (node) (rate(gofit_node_cgroup_write_errors_total{"+c+"}[$__rate_interval]))", "write errors/s") + " or " + line("sum by (node) (rate(gofit_node_skipped_reconciles_total{"+c+"}[$__rate_interval]))", "skipped passes/s") + " or " + line("max by (node) (gofit_node_unprotected_pods{"+c+"})", "unprotected pods"), LegendFormat: "{{node}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Node agent: p99 pass duration", Description: "p99 time to plan and apply one reconcile pass, per node.",
		FieldConfig: unit("s"), Targets: []Target{{Expr: recAgentPassP99 + "{" + c + "}", LegendFormat: "{{node}}"}}}, false)
	d := dashboard(p, "gofit-fleet", "gofit / Fleet",
		"Every Go workload with its fit status (fitted by gofit, by hand, unfitted, misfitted), ranked by throttling and GC cost, and the health of the gofit webhook and node agent.",
		"1m", "now-6h", true)
	d.Panels = l.panels
	return d
}

package monitoring

import "strings"

// Dashboard is a Grafana dashboard, in the JSON model Grafana imports and
// the kube-prometheus-stack sidecar loads from ConfigMaps.
type Dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	Description   string     `json:"description"`
	Tags          []string   `json:"tags"`
	SchemaVersion int        `json:"schemaVersion"`
	Editable      bool       `json:"editable"`
	Refresh       string     `json:"refresh"`
	Time          TimeRange  `json:"time"`
	Templating    Templating `json:"templating"`
	Panels        []Panel    `json:"panels"`
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

// FieldDefaults are the unit and the axis range.
type FieldDefaults struct {
	Unit string   `json:"unit,omitempty"`
	Min  *float64 `json:"min,omitempty"`
	Max  *float64 `json:"max,omitempty"`
}

var ds = Datasource{Type: "prometheus", UID: "${datasource}"}

func datasourceVar() Variable {
	return Variable{Name: "datasource", Label: "Data source", Type: "datasource", Query: "prometheus"}
}

func queryVar(name, label, query string, multi bool) Variable {
	v := Variable{Name: name, Label: label, Type: "query", Datasource: &ds, Refresh: 2, Sort: 1,
		Query: map[string]string{"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"}}
	if multi {
		v.Multi, v.IncludeAll, v.AllValue = true, true, ".*"
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
	return []Dashboard{workload(), fleet(p)}
}

func workload() Dashboard {
	sel := `namespace="$namespace", workload="$workload", pod=~"$pod"`
	s := func(metric string) string { return metric + "{" + sel + "}" }
	byPod := func(metric string) string { return "max by (pod) (" + s(metric) + ")" }
	var l layout
	l.add(Panel{Title: "CPU used, request and limit", Description: "CPU the container's cgroup used (5m rate) against the request its cpu.shares/cpu.weight encode and its CFS limit.",
		FieldConfig: unit("cores"), Targets: []Target{
			{Expr: "sum by (pod) (" + s(recCPU) + ")", LegendFormat: "{{pod}} used"},
			{Expr: line(byPod("gofit_cpu_request_cores"), "request") + " or " + line(byPod("gofit_cpu_limit_cores"), "limit"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Throttled share of CFS periods", Description: "Share of CFS periods in which the container was throttled. High with GOMAXPROCS above the limit: the Go runtime's threads spend the quota early (GofitGOMAXPROCSAboveCPULimit).",
		FieldConfig: share(), Targets: []Target{{Expr: "max by (pod) (" + s(recThrottled) + ")", LegendFormat: "{{pod}}"}}}, false)
	l.add(Panel{Title: "GOMAXPROCS and CPU limit", Description: "GOMAXPROCS now and in gofit's plan, against the CPU limit in cores. Fitted: GOMAXPROCS at or under the limit (at least 1).",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: line(byPod("gofit_gomaxprocs"), "GOMAXPROCS") + " or " + line(byPod("gofit_plan_gomaxprocs"), "planned") + " or " + line(byPod("gofit_cpu_limit_cores"), "limit cores"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Go memory and limits", Description: "What the Go runtime holds against GOMEMLIMIT, its heap objects and heap goal, against GOMEMLIMIT, memory.high and the container's memory limit.",
		FieldConfig: unit("bytes"), Targets: []Target{
			{Expr: line(byPod("gofit_go_memory_bytes"), "Go total") + " or " + line(byPod("gofit_go_heap_objects_bytes"), "heap") + " or " + line(byPod("gofit_go_heap_goal_bytes"), "heap goal"), LegendFormat: "{{pod}} {{line}}"},
			{Expr: line(byPod("gofit_gomemlimit_bytes"), "GOMEMLIMIT") + " or " + line(byPod("gofit_memory_high_bytes"), "memory.high") + " or " + line(byPod("gofit_memory_limit_bytes"), "limit"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Container memory", Description: "The cgroup's working set (usage minus inactive file pages, what the kubelet evicts on) and usage, against the limit.",
		FieldConfig: unit("bytes"), Targets: []Target{
			{Expr: line(byPod("gofit_memory_working_set_bytes"), "working set") + " or " + line(byPod("gofit_memory_usage_bytes"), "usage") + " or " + line(byPod("gofit_memory_limit_bytes"), "limit"), LegendFormat: "{{pod}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "GC share of busy CPU", Description: "The Go runtime's GC CPU time over its busy CPU time (GC, scavenger, user code). Above 25% with the heap at GOMEMLIMIT: GofitGoHeapPinnedAtGOMEMLIMIT.",
		FieldConfig: share(), Targets: []Target{{Expr: "max by (pod) (" + s(recGC) + ")", LegendFormat: "{{pod}}"}}}, false)
	l.add(Panel{Title: "GC pauses", Description: "Stop-the-world GC pauses, p50 and p99 over the rate interval.",
		FieldConfig: unit("s"), Targets: []Target{
			{Expr: "histogram_quantile(0.5, sum by (pod, le) (rate(" + s("gofit_go_gc_pause_seconds"+"_bucket") + "[$__rate_interval])))", LegendFormat: "{{pod}} p50"},
			{Expr: "histogram_quantile(0.99, sum by (pod, le) (rate(" + s("gofit_go_gc_pause_seconds"+"_bucket") + "[$__rate_interval])))", LegendFormat: "{{pod}} p99"},
		}}, false)
	l.add(Panel{Title: "Pressure stalls (PSI)", Description: "Share of time some (or all) of the container's tasks waited for CPU or memory.",
		FieldConfig: share(), Targets: []Target{{Expr: "max by (pod, resource, kind) (" + s(recPressure) + ")", LegendFormat: "{{pod}} {{resource}} {{kind}}"}}}, false)
	l.add(Panel{Title: "OOM kills, limit and memory.high hits, major faults", Description: "Per second: processes the OOM killer killed, times usage hit the limit or went over memory.high, and page faults that read from disk.",
		FieldConfig: unit("ops"), Targets: []Target{
			{Expr: line("sum by (pod) (rate("+s("gofit_oom_kills_total")+"[$__rate_interval]))", "OOM kills") + " or " + line("sum by (pod) (rate("+s("gofit_memory_limit_hits_total")+"[$__rate_interval]))", "limit hits") + " or " + line("sum by (pod) (rate("+s("gofit_memory_high_hits_total")+"[$__rate_interval]))", "memory.high hits"), LegendFormat: "{{pod}} {{line}}"},
			{Expr: "sum by (pod) (rate(" + s("gofit_memory_major_faults_total") + "[$__rate_interval]))", LegendFormat: "{{pod}} major faults"},
		}}, false)
	l.add(Panel{Title: "Plan: reasons and warnings", Type: "table", Description: "Where each planned setting comes from (gofit_plan_reason) and the warnings in force (gofit_plan_warning), with the planned values.",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: "max by (pod, setting, reason) (" + s("gofit_plan_reason") + ") or max by (pod, warning) (" + s("gofit_plan_warning") + ")", Instant: true, Format: "table"},
			{Expr: line(byPod("gofit_plan_gomaxprocs"), "GOMAXPROCS") + " or " + line(byPod("gofit_plan_gomemlimit_bytes"), "GOMEMLIMIT") + " or " + line(byPod("gofit_plan_gogc_percent"), "GOGC"), Instant: true, Format: "table"},
		}}, false)
	lat := func(q string) Target {
		return Target{Expr: "histogram_quantile(" + q + ", sum by (le) (rate(${latency_metric}_bucket{" + sel + "}[$__rate_interval])))", LegendFormat: "p" + strings.TrimPrefix(q, "0.")}
	}
	l.add(Panel{Title: "Latency percentiles ($latency_metric)", Description: "p50, p90, p99 and p99.9 from the service's own latency histogram (the latency_metric variable, without _bucket). Watch them while GOMAXPROCS or GOMEMLIMIT change.",
		FieldConfig: unit("s"), Targets: []Target{lat("0.5"), lat("0.9"), lat("0.99"), lat("0.999")}}, true)

	latency := Variable{Name: "latency_metric", Label: "Latency histogram", Type: "textbox", Query: LatencyMetric, Current: &Current{Text: LatencyMetric, Value: LatencyMetric}}
	return Dashboard{
		UID: "gofit-workload", Title: "gofit / Workload",
		Description: "A Go workload against its container: CPU, throttling, GOMAXPROCS, Go memory against GOMEMLIMIT and the limits, GC, PSI, OOM kills, gofit's plan and the service's latency.",
		Tags:        []string{"gofit", "go", "kubernetes"}, SchemaVersion: 39, Refresh: "30s", Time: TimeRange{"now-1h", "now"},
		Templating: Templating{List: []Variable{
			datasourceVar(),
			queryVar("namespace", "Namespace", "label_values(gofit_gomaxprocs, namespace)", false),
			queryVar("workload", "Workload", `label_values(gofit_gomaxprocs{namespace="$namespace"}, workload)`, false),
			queryVar("pod", "Pod", `label_values(gofit_gomaxprocs{namespace="$namespace", workload="$workload"}, pod)`, true),
			latency,
		}},
		Panels: l.panels,
	}
}

func fleet(p Params) Dashboard {
	ns := `namespace=~"$namespace"`
	var l layout
	l.add(Panel{Title: "Go containers by fit status", Type: "bargauge", Description: "Containers serving gofit's metrics: fitted, GOMAXPROCS above the CPU limit, a memory limit without GOMEMLIMIT, GOMEMLIMIT at or above the limit, a plan warning in force (one container may be in several).",
		FieldConfig: unit("short"), Targets: []Target{{Expr: "sum by (status) (" + recFitCount + "{" + ns + "})", LegendFormat: "{{status}}", Instant: true}}}, false)
	l.add(Panel{Title: "Containers not fitted", Type: "table", Description: "Each container in a status other than fitted.",
		FieldConfig: unit("short"), Targets: []Target{{Expr: recFitStatus + `{` + ns + `, status!="fitted"}`, Instant: true, Format: "table"}}}, false)
	l.add(Panel{Title: "Most throttled workloads", Description: "The ten workloads with the largest throttled share of CFS periods.",
		FieldConfig: share(), Targets: []Target{{Expr: "topk(10, " + recWorkloadThr + "{" + ns + "})", LegendFormat: "{{namespace}}/{{workload}}"}}}, false)
	l.add(Panel{Title: "Largest GC share of busy CPU", Description: "The ten containers whose GC takes the largest share of their busy CPU.",
		FieldConfig: share(), Targets: []Target{{Expr: "topk(10, " + recGC + "{" + ns + "})", LegendFormat: "{{namespace}}/{{pod}} {{container}}"}}}, false)
	l.add(Panel{Title: "Webhook admissions by outcome", Description: "Admissions per second by outcome: patched, unchanged, skipped, ignored, warned; error and busy are answered open (failurePolicy Ignore).",
		FieldConfig: unit("reqps"), Targets: []Target{{Expr: "sum by (outcome) (" + recWebhookRate + ")", LegendFormat: "{{outcome}}"}}}, false)
	l.add(Panel{Title: "Webhook p99 latency and timeout", Description: "p99 admission latency against the API server's timeoutSeconds.",
		FieldConfig: unit("s"), Targets: []Target{
			{Expr: "max by (namespace) (" + recWebhookP99 + ")", LegendFormat: "p99 {{namespace}}"},
			{Expr: "vector(" + num(p.WebhookTimeoutSeconds) + ")", LegendFormat: "timeoutSeconds"},
		}}, false)
	l.add(Panel{Title: "Webhook certificate expires in", Type: "stat", Description: "Time until the serving certificate now loaded expires; renewed well before 7 days.",
		FieldConfig: unit("s"), Targets: []Target{{Expr: "min by (namespace, pod) (gofit_webhook_certificate_expiry_timestamp_seconds > 0) - time()", LegendFormat: "{{pod}}", Instant: true}}}, false)
	l.add(Panel{Title: "Node agent: time since last pass", Description: "Seconds since each node agent ended a reconcile pass (passes run every 10s).",
		FieldConfig: unit("s"), Targets: []Target{{Expr: "time() - max by (node) (gofit_node_last_reconcile_timestamp_seconds)", LegendFormat: "{{node}}"}}}, false)
	l.add(Panel{Title: "Node agent: errors, skipped passes, unprotected pods", Description: "Per node: failed cgroup reads or writes and skipped passes per second, and pods the last pass left unprotected.",
		FieldConfig: unit("short"), Targets: []Target{
			{Expr: line("sum by (node) (rate(gofit_node_cgroup_write_errors_total[$__rate_interval]))", "write errors/s") + " or " + line("sum by (node) (rate(gofit_node_skipped_reconciles_total[$__rate_interval]))", "skipped passes/s") + " or " + line("max by (node) (gofit_node_unprotected_pods)", "unprotected pods"), LegendFormat: "{{node}} {{line}}"},
		}}, false)
	l.add(Panel{Title: "Node agent: p99 pass duration", Description: "p99 time to plan and apply one reconcile pass, per node.",
		FieldConfig: unit("s"), Targets: []Target{{Expr: recAgentPassP99, LegendFormat: "{{node}}"}}}, false)
	return Dashboard{
		UID: "gofit-fleet", Title: "gofit / Fleet",
		Description: "Go containers by fit status, the most throttled workloads, and the health of the gofit webhook and node agent.",
		Tags:        []string{"gofit", "go", "kubernetes"}, SchemaVersion: 39, Refresh: "1m", Time: TimeRange{"now-6h", "now"},
		Templating: Templating{List: []Variable{
			datasourceVar(),
			queryVar("namespace", "Namespace", "label_values(gofit_gomaxprocs, namespace)", true),
		}},
		Panels: l.panels,
	}
}

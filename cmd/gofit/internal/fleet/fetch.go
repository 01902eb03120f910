package fleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Query is what to read.
type Query struct {
	From, To time.Time
	// Step is the resolution of the series (a range query's step, and the
	// range its rates and peaks look back over): at least two scrape
	// intervals.
	Step time.Duration
	// Namespace limits to one namespace ("" for all); Selector to pods
	// whose labels match (k=v and k!=v terms, comma-separated, read
	// through kube_pod_labels); Cluster to one value of ClusterLabel.
	Namespace, Selector, Cluster string
	ClusterLabel                 string // default "cluster"
	// MaxContainers bounds the Go containers read; more is an error.
	MaxContainers int
	// ChunkSteps bounds the steps one range query asks for (default: a
	// day's worth, at most 10,000): the server's answer and ours stay
	// bounded whatever --since is.
	ChunkSteps int
	// Found, if set, is told how many Go containers were found and how
	// many steps each series has, before any series is read: gofit fleet
	// bounds its own heap by HeapGoal of them.
	Found func(containers, steps int)
	// Concurrency is how many range queries are in flight at once
	// (default 1). Prometheus evaluates a query on one core, so a server
	// with cores to spare answers a fleet's week sooner; each query in
	// flight holds a chunk's answer here (HeapGoal counts them).
	Concurrency int
	// CPUBurst also reads each step's highest 1-minute CPU rate
	// (Pod.CPUPeak) for --cpu-limit burst: a subquery at BurstResolution,
	// which costs the server more than the step's mean.
	CPUBurst bool
}

// BurstWindow and BurstResolution are the CPU burst series' rate window
// and subquery resolution: the step's highest 1-minute rate, evaluated
// every 30 s (at least two scrapes of 30 s or less in each window).
const (
	BurstWindow     = time.Minute
	BurstResolution = 30 * time.Second
)

// seriesKinds is how many per-step series Fetch holds per container at
// most (cpu, throttling, working set, non-heap, heap allocated low, heap
// goal, live heap, GC).
const seriesKinds = 8

// HeapGoal is the heap Fetch and Analyze need for containers' series of
// steps steps: the series themselves (a float32 a step) with a quarter
// more, and 64 MiB for each chunk's answer in flight (inFlight, at least
// one) and the analysis. As a soft
// memory limit it keeps the collector from letting the heap run to
// twice what is live (GOGC=100): for 5,000 containers over 7 days at
// 5-minute steps, about 450 MiB (with 7 series, 400 MiB where the heap
// had peaked at 773 MiB).
func HeapGoal(containers, steps, inFlight int) int64 {
	series := int64(containers) * seriesKinds * int64(steps) * 4
	return series + series/4 + int64(max(1, inFlight))*64<<20
}

// ErrTooMany is returned when more containers match than MaxContainers.
var ErrTooMany = errors.New("too many containers")

// ErrNoGo is returned when no container with go_* series matches.
var ErrNoGo = errors.New("no Go containers")

type key struct{ cluster, ns, pod, container string }

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// ParseSelector turns a label selector (app=web,tier!=db) into
// kube_pod_labels matchers (label_app="web", label_tier!="db").
func ParseSelector(s string) (string, error) {
	var ms []string
	for _, term := range strings.Split(s, ",") {
		term = strings.TrimSpace(term)
		if term == "" {
			continue
		}
		op := "="
		k, v, ok := strings.Cut(term, "!=")
		if ok {
			op = "!="
		} else if k, v, ok = strings.Cut(term, "=="); !ok {
			k, v, ok = strings.Cut(term, "=")
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || strings.ContainsAny(v, "=!()") {
			return "", fmt.Errorf("selector term %q: want key=value or key!=value", term)
		}
		// kube-state-metrics turns a label key into label_<key> with
		// every character outside [a-zA-Z0-9_] as _.
		name := "label_" + regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_")
		if !labelName.MatchString(name) {
			return "", fmt.Errorf("selector term %q: key %q", term, k)
		}
		ms = append(ms, fmt.Sprintf("%s%s%q", name, op, v))
	}
	return strings.Join(ms, ", "), nil
}

type fetcher struct {
	ctx     context.Context
	prom    v1.API
	raw     api.Client
	q       Query
	sel     string // the namespace and cluster matchers, maybe empty
	by      string // the container key's labels
	filter  string // `and on (…) …`: Go containers (of the selected pods)
	steps   int
	mu      sync.Mutex // notes and queries, from concurrent range reads
	notes   []string
	queries int
}

func (f *fetcher) m(extra string) string {
	parts := []string{}
	if f.sel != "" {
		parts = append(parts, f.sel)
	}
	if extra != "" {
		parts = append(parts, extra)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func (f *fetcher) keyOf(m model.Metric) key {
	return key{string(m[model.LabelName(f.q.ClusterLabel)]), string(m["namespace"]), string(m["pod"]), string(m["container"])}
}

func (f *fetcher) instant(query string) (model.Vector, error) {
	f.mu.Lock()
	f.queries++
	f.mu.Unlock()
	v, warns, err := f.prom.Query(f.ctx, query, f.q.To)
	if err != nil {
		return nil, fmt.Errorf("prometheus query %s: %w", query, err)
	}
	f.note(warns, query)
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("prometheus query %s: got %s, want a vector", query, v.Type())
	}
	return vec, nil
}

// ranged runs query over the window in chunks, handing each series'
// points (step index, value) to put.
func (f *fetcher) ranged(query string, put func(m model.Metric, i int, v float64)) (int, error) {
	return f.rangedCtx(f.ctx, query, put)
}

// note keeps the server's warnings about a query.
func (f *fetcher) note(warns []string, query string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range warns {
		f.notes = append(f.notes, fmt.Sprintf("prometheus: %s (query %s)", w, query))
	}
}

// rangedCtx is ranged under ctx; several may run at once, each handing
// points to its own put.
func (f *fetcher) rangedCtx(ctx context.Context, query string, put func(m model.Metric, i int, v float64)) (int, error) {
	n := 0
	for c := 0; c < f.steps; c += f.q.ChunkSteps {
		last := min(c+f.q.ChunkSteps, f.steps) - 1
		r := v1.Range{Start: f.q.From.Add(time.Duration(c+1) * f.q.Step), End: f.q.From.Add(time.Duration(last+1) * f.q.Step), Step: f.q.Step}
		f.mu.Lock()
		f.queries++
		f.mu.Unlock()
		from := float64(f.q.From.UnixMilli()) / 1e3
		warns, err := queryRange(ctx, f.raw, query, r.Start, r.End, r.Step, func(m model.Metric, t, v float64) {
			i := int(math.Round((t-from)/f.q.Step.Seconds())) - 1
			if i >= 0 && i < f.steps && !math.IsNaN(v) {
				put(m, i, v)
				n++
			}
		})
		if err != nil {
			return n, fmt.Errorf("prometheus query %s: %w", query, err)
		}
		f.note(warns, query)
	}
	return n, nil
}

// Fetch reads the fleet's series. Every query aggregates on the server to
// one series per container and is limited to Go containers there, and
// range queries go in chunks of ChunkSteps.
func Fetch(ctx context.Context, c api.Client, q Query) (Input, error) {
	prom := v1.NewAPI(c)
	if q.Step <= 0 || !q.To.After(q.From) {
		return Input{}, fmt.Errorf("want a step and a span: step %v, from %v to %v", q.Step, q.From, q.To)
	}
	if q.ClusterLabel == "" {
		q.ClusterLabel = "cluster"
	}
	if !labelName.MatchString(q.ClusterLabel) {
		return Input{}, fmt.Errorf("cluster label %q: not a label name", q.ClusterLabel)
	}
	if q.ChunkSteps <= 0 {
		q.ChunkSteps = int(max(1, min(10000, 24*time.Hour/q.Step)))
	}
	if q.MaxContainers <= 0 {
		q.MaxContainers = 10000
	}
	q.Concurrency = max(1, q.Concurrency)
	steps := int(q.To.Sub(q.From) / q.Step)
	if steps < 1 {
		return Input{}, fmt.Errorf("span %v is shorter than one step of %v", q.To.Sub(q.From), q.Step)
	}
	f := &fetcher{ctx: ctx, prom: prom, raw: c, q: q, steps: steps}
	var sel []string
	if q.Namespace != "" {
		sel = append(sel, fmt.Sprintf("namespace=%q", q.Namespace))
	}
	if q.Cluster != "" {
		sel = append(sel, fmt.Sprintf("%s=%q", q.ClusterLabel, q.Cluster))
	}
	f.sel = strings.Join(sel, ", ")
	f.by = q.ClusterLabel + ", namespace, pod, container"
	podBy := q.ClusterLabel + ", namespace, pod"
	since := model.Duration(q.To.Sub(q.From)).String()
	step := model.Duration(q.Step).String()
	in := Input{Start: q.From, Step: q.Step, Steps: steps, Sources: map[string]string{}}

	goSeries := fmt.Sprintf(`group by (%s) (go_info%s)`, f.by, f.m(`container!=""`))
	podFilter := ""
	if q.Selector != "" {
		ms, err := ParseSelector(q.Selector)
		if err != nil {
			return Input{}, err
		}
		podFilter = fmt.Sprintf(` and on (%s) group by (%s) (kube_pod_labels%s)`, podBy, podBy, f.m(ms))
	}
	f.filter = fmt.Sprintf(` and on (%s) (%s%s)`, f.by, goSeries, podFilter)

	// The Go containers: go_info at any time in the window.
	goQ := fmt.Sprintf(`max by (%s, version) (last_over_time(go_info%s[%s]))`, f.by, f.m(`container!=""`), since)
	if podFilter != "" {
		goQ += fmt.Sprintf(` and on (%s) group by (%s) (last_over_time(kube_pod_labels%s[%s]))`, podBy, podBy, f.m(mustSel(q.Selector)), since)
	}
	vec, err := f.instant(goQ)
	if err != nil {
		return Input{}, err
	}
	pods := map[key]*Pod{}
	for _, s := range vec {
		k := f.keyOf(s.Metric)
		if pods[k] == nil {
			pods[k] = newPod(k.pod)
		}
		pods[k].GoVersion = string(s.Metric["version"])
	}
	if len(pods) > q.MaxContainers {
		return Input{}, fmt.Errorf("%w: %d Go containers match, more than %d (narrow it with --namespace, --selector or --cluster, or raise --max-containers)", ErrTooMany, len(pods), q.MaxContainers)
	}
	// Containers without go_* series, counted.
	all, err := f.instant(fmt.Sprintf(`count(group by (%s) (last_over_time(container_cpu_usage_seconds_total%s[%s])) unless on (%s) group by (%s) (last_over_time(go_info%s[%s])))`,
		f.by, f.m(`container!="", container!="POD"`), since, f.by, f.by, f.m(`container!=""`), since))
	if err != nil {
		return Input{}, err
	}
	if len(all) > 0 {
		in.NonGo = int(all[0].Value)
	}
	// Go series that cannot be read as a container's, counted by reason:
	// they are left out, and the report says so.
	in.Unread = map[string]int{}
	for _, u := range []struct{ why, query string }{
		{UnreadNoContainer, fmt.Sprintf(`count(group by (%s) (last_over_time(go_info%s[%s])))`, podBy, f.m(`pod!="", container=""`), since)},
		{UnreadNoPod, fmt.Sprintf(`count(group by (job, instance) (last_over_time(go_info%s[%s])))`, f.m(`pod=""`), since)},
	} {
		vec, err := f.instant(u.query)
		if err != nil {
			return Input{}, err
		}
		if len(vec) > 0 && vec[0].Value > 0 {
			in.Unread[u.why] = int(vec[0].Value)
		}
	}
	if len(pods) == 0 {
		where := "in Prometheus"
		if f.sel != "" {
			where = "matching " + f.sel
		}
		return Input{}, fmt.Errorf("%w %s: no container has go_info series over the last %s (a Go container counts when client_golang's go_* series are scraped with namespace, pod and container labels, as a PodMonitor gives them); %d containers without them", ErrNoGo, where, since, in.NonGo)
	}
	in.Sources["go"] = fmt.Sprintf("go_info: %d Go containers; %d without go_* series left out", len(pods), in.NonGo)
	if q.Found != nil {
		q.Found(len(pods), steps)
	}

	// Last values over the window: the spec and the runtime's settings.
	last := func(what, query string, set func(p *Pod, m model.Metric, v float64)) error {
		vec, err := f.instant(query)
		if err != nil {
			return err
		}
		n := 0
		for _, s := range vec {
			if p := pods[f.keyOf(s.Metric)]; p != nil {
				set(p, s.Metric, float64(s.Value))
				n++
			}
		}
		in.Sources[what] = fmt.Sprintf("%s (%d series)", in.Sources[what], n)
		if n == 0 {
			in.Sources[what] = "none found"
		}
		return nil
	}
	lastOf := func(metric, extra string) string {
		return fmt.Sprintf(`max by (%s) (last_over_time(%s%s[%s]))`, f.by, metric, f.m(extra), since)
	}
	for _, r := range []struct {
		what, metric string
		set          func(p *Pod, v float64)
	}{
		{"gomaxprocs", "go_sched_gomaxprocs_threads", func(p *Pod, v float64) { p.GOMAXPROCS = v }},
		{"gomemlimit", "go_gc_gomemlimit_bytes", func(p *Pod, v float64) { p.GOMEMLIMIT = v }},
		{"gogc", "go_gc_gogc_percent", func(p *Pod, v float64) { p.GOGC = v }},
	} {
		in.Sources[r.what] = r.metric
		set := r.set
		if err := last(r.what, lastOf(r.metric, ""), func(p *Pod, _ model.Metric, v float64) { set(p, v) }); err != nil {
			return Input{}, err
		}
	}
	for _, kind := range []string{"requests", "limits"} {
		in.Sources[kind] = "kube_pod_container_resource_" + kind
		q := fmt.Sprintf(`max by (%s, resource) (last_over_time(kube_pod_container_resource_%s%s[%s]))`, f.by, kind, f.m(`resource=~"cpu|memory"`), since)
		if err := last(kind, q, func(p *Pod, m model.Metric, v float64) {
			r := &p.Requests
			if kind == "limits" {
				r = &p.Limits
			}
			if m["resource"] == "cpu" {
				r.CPU = v
			} else {
				r.Memory = v
			}
		}); err != nil {
			return Input{}, err
		}
	}
	in.Sources["created"] = "kube_pod_created"
	created := map[key]float64{}
	vec, err = f.instant(fmt.Sprintf(`max by (%s) (last_over_time(kube_pod_created%s[%s]))`, podBy, f.m(""), since))
	if err != nil {
		return Input{}, err
	}
	for _, s := range vec {
		created[f.keyOf(s.Metric)] = float64(s.Value)
	}
	in.Sources["created"] = fmt.Sprintf("kube_pod_created (%d pods)", len(created))
	in.Sources["restarts"] = "kube_pod_container_status_restarts_total"
	if err := last("restarts", fmt.Sprintf(`max by (%s) (increase(kube_pod_container_status_restarts_total%s[%s]))`, f.by, f.m(""), since),
		func(p *Pod, _ model.Metric, v float64) { p.Restarts = math.Round(v) }); err != nil {
		return Input{}, err
	}
	in.Sources["oom"] = "container_oom_events_total (cAdvisor)"
	if err := last("oom", fmt.Sprintf(`max by (%s) (increase(container_oom_events_total%s[%s]))`, f.by, f.m(`container!=""`), since),
		func(p *Pod, _ model.Metric, v float64) { p.OOMKills = math.Round(v) }); err != nil {
		return Input{}, err
	}
	if strings.HasPrefix(in.Sources["oom"], "none") {
		in.Sources["oom"] = "kube_pod_container_status_last_terminated_reason{reason=\"OOMKilled\"} (at least one kill when seen)"
		if err := last("oom", fmt.Sprintf(`max by (%s) (max_over_time(kube_pod_container_status_last_terminated_reason%s[%s]))`, f.by, f.m(`reason="OOMKilled"`), since),
			func(p *Pod, _ model.Metric, v float64) { p.OOMKills = v }); err != nil {
			return Input{}, err
		}
	}

	// Owners: a pod's, and a ReplicaSet's (its Deployment).
	owners := map[key][2]string{} // pod key (container "") → kind, name
	vec, err = f.instant(fmt.Sprintf(`max by (%s, owner_kind, owner_name) (last_over_time(kube_pod_owner%s[%s]))`, podBy, f.m(`owner_kind!="", owner_kind!="<none>"`), since))
	if err != nil {
		return Input{}, err
	}
	for _, s := range vec {
		k := f.keyOf(s.Metric)
		owners[k] = [2]string{string(s.Metric["owner_kind"]), string(s.Metric["owner_name"])}
	}
	rsOwner := map[key][2]string{}
	vec, err = f.instant(fmt.Sprintf(`max by (%s, replicaset, owner_kind, owner_name) (last_over_time(kube_replicaset_owner%s[%s]))`, q.ClusterLabel+", namespace", f.m(`owner_kind!="", owner_kind!="<none>"`), since))
	if err != nil {
		return Input{}, err
	}
	for _, s := range vec {
		rsOwner[key{string(s.Metric[model.LabelName(q.ClusterLabel)]), string(s.Metric["namespace"]), string(s.Metric["replicaset"]), ""}] = [2]string{string(s.Metric["owner_kind"]), string(s.Metric["owner_name"])}
	}
	// A Job's owner, a CronJob: its jobTemplate is what can be patched.
	jobOwner := map[key][2]string{}
	vec, err = f.instant(fmt.Sprintf(`max by (%s, job_name, owner_kind, owner_name) (last_over_time(kube_job_owner%s[%s]))`, q.ClusterLabel+", namespace", f.m(`owner_kind!="", owner_kind!="<none>"`), since))
	if err != nil {
		return Input{}, err
	}
	for _, s := range vec {
		jobOwner[key{string(s.Metric[model.LabelName(q.ClusterLabel)]), string(s.Metric["namespace"]), string(s.Metric["job_name"]), ""}] = [2]string{string(s.Metric["owner_kind"]), string(s.Metric["owner_name"])}
	}
	in.Sources["owners"] = fmt.Sprintf("kube_pod_owner (%d pods), kube_replicaset_owner (%d), kube_job_owner (%d)", len(owners), len(rsOwner), len(jobOwner))

	// HorizontalPodAutoscalers: what each scales, and on which resources'
	// utilisation (the targets whose meaning a new request changes).
	hpas := map[key]*HPA{} // workload key (pod = kind/name)
	hpaByName := map[key]*HPA{}
	vec, err = f.instant(fmt.Sprintf(`max by (%s, horizontalpodautoscaler, scaletargetref_kind, scaletargetref_name) (last_over_time(kube_horizontalpodautoscaler_info%s[%s]))`, q.ClusterLabel+", namespace", f.m(""), since))
	if err != nil {
		return Input{}, err
	}
	for _, s := range vec {
		c, ns := string(s.Metric[model.LabelName(q.ClusterLabel)]), string(s.Metric["namespace"])
		h := &HPA{Name: string(s.Metric["horizontalpodautoscaler"])}
		hpas[key{c, ns, string(s.Metric["scaletargetref_kind"]) + "/" + string(s.Metric["scaletargetref_name"]), ""}] = h
		hpaByName[key{c, ns, h.Name, ""}] = h
	}
	if len(hpas) > 0 {
		vec, err = f.instant(fmt.Sprintf(`max by (%s, horizontalpodautoscaler, metric_name) (last_over_time(kube_horizontalpodautoscaler_spec_target_metric%s[%s]))`, q.ClusterLabel+", namespace", f.m(`metric_name=~"cpu|memory", metric_target_type="utilization"`), since))
		if err != nil {
			return Input{}, err
		}
		for _, s := range vec {
			if h := hpaByName[key{string(s.Metric[model.LabelName(q.ClusterLabel)]), string(s.Metric["namespace"]), string(s.Metric["horizontalpodautoscaler"]), ""}]; h != nil {
				switch s.Metric["metric_name"] {
				case "cpu":
					h.CPU = true
				case "memory":
					h.Memory = true
				}
			}
		}
	}
	in.Sources["hpa"] = fmt.Sprintf("kube_horizontalpodautoscaler_info, kube_horizontalpodautoscaler_spec_target_metric (%d HPAs)", len(hpas))

	// The series, per step.
	cadvisor := `container!="", container!="POD"`
	type rq struct {
		what, source, query string
		slot                func(p *Pod) *[]float32
	}
	rate := func(metric, extra string) string {
		return fmt.Sprintf(`sum by (%s) (rate(%s%s[%s]))%s`, f.by, metric, f.m(extra), step, f.filter)
	}
	over := func(fn, metric, extra string) string {
		return fmt.Sprintf(`max by (%s) (%s(%s%s[%s]))%s`, f.by, fn, metric, f.m(extra), step, f.filter)
	}
	series := []rq{
		{"cpu", "container_cpu_usage_seconds_total (cAdvisor)", rate("container_cpu_usage_seconds_total", cadvisor), func(p *Pod) *[]float32 { return &p.CPU }},
		{"throttling", "container_cpu_cfs_throttled_periods_total ÷ container_cpu_cfs_periods_total (cAdvisor)",
			fmt.Sprintf(`sum by (%[1]s) (increase(container_cpu_cfs_throttled_periods_total%[2]s[%[3]s])) / sum by (%[1]s) (increase(container_cpu_cfs_periods_total%[2]s[%[3]s]))%[4]s`, f.by, f.m(cadvisor), step, f.filter),
			func(p *Pod) *[]float32 { return &p.Throttled }},
		{"working_set", "container_memory_working_set_bytes (cAdvisor), the step's peak", over("max_over_time", "container_memory_working_set_bytes", cadvisor), func(p *Pod) *[]float32 { return &p.WorkingSet }},
		{"non_heap", "container_memory_working_set_bytes less the heap's resident spans (go_memstats_heap_inuse_bytes + go_memstats_heap_idle_bytes − go_memstats_heap_released_bytes), the step's averages",
			fmt.Sprintf(`max by (%[1]s) (avg_over_time(container_memory_working_set_bytes%[2]s[%[4]s])) - on (%[1]s) (max by (%[1]s) (avg_over_time(go_memstats_heap_inuse_bytes%[3]s[%[4]s])) + on (%[1]s) max by (%[1]s) (avg_over_time(go_memstats_heap_idle_bytes%[3]s[%[4]s])) - on (%[1]s) max by (%[1]s) (avg_over_time(go_memstats_heap_released_bytes%[3]s[%[4]s])))`, f.by, f.m(cadvisor), f.m(""), step),
			func(p *Pod) *[]float32 { return &p.NonHeap }},
		{"heap_alloc_low", "go_memstats_heap_alloc_bytes, the step's low", over("min_over_time", "go_memstats_heap_alloc_bytes", ""), func(p *Pod) *[]float32 { return &p.HeapAllocLow }},
		{"heap_goal", "go_memstats_next_gc_bytes, the step's peak", over("max_over_time", "go_memstats_next_gc_bytes", ""), func(p *Pod) *[]float32 { return &p.HeapGoal }},
		{"live_heap", "go_gc_heap_live_bytes, the step's peak", over("max_over_time", "go_gc_heap_live_bytes", ""), func(p *Pod) *[]float32 { return &p.LiveHeap }},
		{"gc", "go_cpu_classes_gc_total_cpu_seconds_total", rate("go_cpu_classes_gc_total_cpu_seconds_total", ""), func(p *Pod) *[]float32 { return &p.GC }},
	}
	// The range reads, Concurrency at a time: each fills its own slot of
	// every pod, so they share nothing but the pods' index; the first
	// error cancels the rest.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	found := make([]int, len(series))
	errs := make([]error, len(series))
	sem := make(chan struct{}, q.Concurrency)
	var wg sync.WaitGroup
	for k, r := range series {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			slot := r.slot
			found[k], errs[k] = f.rangedCtx(rctx, r.query, func(m model.Metric, i int, v float64) {
				if p := pods[f.keyOf(m)]; p != nil {
					set(slot(p), steps, i, v)
				}
			})
			if errs[k] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// A query's own error, not the cancellation it caused in the others.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return Input{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return Input{}, err
	}
	for k, r := range series {
		if errs[k] != nil {
			return Input{}, errs[k]
		}
		in.Sources[r.what] = r.source
		if found[k] == 0 {
			in.Sources[r.what] = "none found"
		}
	}
	if q.CPUBurst {
		burst := fmt.Sprintf(`max_over_time((sum by (%s) (rate(container_cpu_usage_seconds_total%s[%s])))[%s:%s])%s`,
			f.by, f.m(cadvisor), model.Duration(BurstWindow), step, model.Duration(BurstResolution), f.filter)
		n, err := f.ranged(burst, func(m model.Metric, i int, v float64) {
			if p := pods[f.keyOf(m)]; p != nil {
				set(&p.CPUPeak, steps, i, v)
			}
		})
		if err != nil {
			return Input{}, err
		}
		in.Sources["cpu_burst"] = fmt.Sprintf("container_cpu_usage_seconds_total (cAdvisor), the step's highest %s rate every %s", model.Duration(BurstWindow), model.Duration(BurstResolution))
		if n == 0 {
			in.Sources["cpu_burst"] = "none found"
		}
	}
	in.GCSource = "go_cpu_classes_gc_total_cpu_seconds_total"
	if strings.HasPrefix(in.Sources["gc"], "none") {
		// client_golang's default collector: stop-the-world pauses only,
		// a floor of the GC's CPU.
		n, err := f.ranged(rate("go_gc_duration_seconds_sum", ""), func(m model.Metric, i int, v float64) {
			if p := pods[f.keyOf(m)]; p != nil {
				set(&p.GC, steps, i, v)
			}
		})
		if err != nil {
			return Input{}, err
		}
		in.GCSource = "go_gc_duration_seconds (stop-the-world pauses only: a floor of the GC's CPU)"
		in.Sources["gc"] = in.GCSource
		if n == 0 {
			in.Sources["gc"], in.GCSource = "none found", ""
		}
	}
	in.Notes = append(in.Notes, f.notes...)
	in.Sources["queries"] = fmt.Sprintf("%d (range queries in chunks of %d steps of %s)", f.queries, q.ChunkSteps, step)

	groups := map[string]*Group{}
	for k, p := range pods {
		w := Workload{Cluster: k.cluster, Namespace: k.ns, Kind: "Pod", Name: k.pod}
		if o, ok := owners[key{k.cluster, k.ns, k.pod, ""}]; ok {
			w.Kind, w.Name = o[0], o[1]
			switch o[0] {
			case "ReplicaSet":
				if d, ok := rsOwner[key{k.cluster, k.ns, o[1], ""}]; ok {
					w.Kind, w.Name = d[0], d[1]
				}
			case "Job":
				if d, ok := jobOwner[key{k.cluster, k.ns, o[1], ""}]; ok {
					w.Kind, w.Name = d[0], d[1]
				}
			}
		}
		if c, ok := created[key{k.cluster, k.ns, k.pod, ""}]; ok {
			p.Created = c
		}
		gk := w.String() + "\x00" + k.container
		g := groups[gk]
		if g == nil {
			g = &Group{Workload: w, Container: k.container}
			if h := hpas[key{w.Cluster, w.Namespace, w.Kind + "/" + w.Name, ""}]; h != nil {
				hc := *h
				g.HPA = &hc
			}
			groups[gk] = g
		}
		g.Pods = append(g.Pods, *p)
	}
	for _, g := range groups {
		sort.Slice(g.Pods, func(i, j int) bool { return g.Pods[i].Name < g.Pods[j].Name })
		in.Groups = append(in.Groups, *g)
	}
	sort.Slice(in.Groups, func(i, j int) bool {
		a, b := in.Groups[i], in.Groups[j]
		return a.Workload.String()+"\x00"+a.Container < b.Workload.String()+"\x00"+b.Container
	})
	return in, nil
}

func mustSel(s string) string { m, _ := ParseSelector(s); return m }

// newPod is a pod with no figures yet: its series are allocated as
// their first points come (most fleets lack some of them: a fleet's
// week of a series it does not have would be 8 KiB a container of NaN).
func newPod(name string) *Pod {
	return &Pod{Name: name, GOMAXPROCS: math.NaN(), GOMEMLIMIT: math.NaN(), GOGC: math.NaN()}
}

// set puts step i's value in *s, allocating it (every step NaN) first.
func set(s *[]float32, steps, i int, v float64) {
	if *s == nil {
		*s = make([]float32, steps)
		for j := range *s {
			(*s)[j] = float32(math.NaN())
		}
	}
	(*s)[i] = float32(v)
}

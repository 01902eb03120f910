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

	"github.com/gofit-dev/gofit/cmd/gofit/internal/promclient"
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
	// many steps their series can hold in all, before any series is read:
	// each container's from its pod's creation (kube_pod_created; the
	// window's start where older or unknown) to the window's end. gofit
	// fleet bounds its own heap by HeapGoal of them.
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

// HeapGoal is the heap Fetch and Analyze need for series that hold steps
// steps in all (Query.Found: the containers' steps, each from its pod's
// creation): seriesKinds series of them (a float32 a step) with a quarter
// more, and 64 MiB for each chunk's answer in flight (inFlight, at least
// one) and the analysis. As a soft memory limit it keeps the collector
// from letting the heap run to twice what is live (GOGC=100): for 5,000
// containers over 7 days at 5-minute steps, about 450 MiB (with 7 series,
// 400 MiB where the heap had peaked at 773 MiB).
func HeapGoal(steps, inFlight int) int64 {
	series := int64(steps) * seriesKinds * 4
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
	podBy   string // the pod key's labels
	filter  string // `and on (…) …`: Go containers (of the selected pods)
	since   string // the window, as PromQL's duration
	step    string // the step, as PromQL's duration
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

// note keeps the server's warnings about a query.
func (f *fetcher) note(warns []string, query string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range warns {
		f.notes = append(f.notes, fmt.Sprintf("prometheus: %s (query %s)", w, query))
	}
}

// ranged runs query over the window in chunks of ChunkSteps under ctx
// (promclient.ReadRange), handing each series' points (step index, the
// end of the chunk, value) to put and giving how many it handed; several
// may run at once, each handing points to its own put.
func (f *fetcher) ranged(ctx context.Context, query string, put func(m model.Metric, i, end int, v float64)) (int, error) {
	n := 0
	from := float64(f.q.From.UnixMilli()) / 1e3
	r := promclient.Range{Query: query, Start: f.q.From.Add(f.q.Step), End: f.q.From.Add(time.Duration(f.steps) * f.q.Step), Step: f.q.Step, ChunkSteps: f.q.ChunkSteps}
	err := promclient.ReadRange(ctx, f.raw, r, func(c *promclient.Chunk) error {
		f.mu.Lock()
		f.queries++
		f.mu.Unlock()
		f.note(c.Warnings, query)
		// Step i's point is at the window's start + (i+1) steps: the
		// range's Start is step 0.
		return c.Points(func(m model.Metric, t, v float64) {
			i := int(math.Round((t-from)/f.q.Step.Seconds())) - 1
			if i >= 0 && i < f.steps && !math.IsNaN(v) {
				put(m, i, c.To, v)
				n++
			}
		})
	})
	return n, err
}

// Fetch reads the fleet's series. Every query aggregates on the server to
// one series per container and is limited to Go containers there, and
// range queries go in chunks of ChunkSteps. It runs one fetch's stages in
// order: the Go containers and those left out, their last values (the
// spec, the runtime's settings, restarts and OOM kills), the owners and
// HPAs, then the series per step; then it groups the containers by
// workload.
func Fetch(ctx context.Context, c api.Client, q Query) (Input, error) {
	q, steps, err := q.withDefaults()
	if err != nil {
		return Input{}, err
	}
	r, err := newFetchRun(ctx, c, q, steps)
	if err != nil {
		return Input{}, err
	}
	for _, stage := range []func() error{
		r.goContainers, r.leftOut, r.found,
		r.settings, r.creation, r.sized, r.counts,
		r.readOwners, r.hpas,
		r.series, r.burst, r.gcFallback,
	} {
		if err := stage(); err != nil {
			return Input{}, err
		}
	}
	in, f := r.in, r.f
	in.Notes = append(in.Notes, f.notes...)
	in.Sources["queries"] = fmt.Sprintf("%d (range queries in chunks of %d steps of %s)", f.queries, q.ChunkSteps, f.step)
	in.Groups = r.groups()
	return *in, nil
}

// withDefaults checks q and fills in its defaults; it gives the steps in
// its span.
func (q Query) withDefaults() (Query, int, error) {
	if q.Step <= 0 || !q.To.After(q.From) {
		return q, 0, fmt.Errorf("want a step and a span: step %v, from %v to %v", q.Step, q.From, q.To)
	}
	if q.ClusterLabel == "" {
		q.ClusterLabel = "cluster"
	}
	if !labelName.MatchString(q.ClusterLabel) {
		return q, 0, fmt.Errorf("cluster label %q: not a label name", q.ClusterLabel)
	}
	if q.ChunkSteps <= 0 {
		q.ChunkSteps = promclient.DefaultChunkSteps(q.Step)
	}
	if q.MaxContainers <= 0 {
		q.MaxContainers = 10000
	}
	q.Concurrency = max(1, q.Concurrency)
	steps := int(q.To.Sub(q.From) / q.Step)
	if steps < 1 {
		return q, 0, fmt.Errorf("span %v is shorter than one step of %v", q.To.Sub(q.From), q.Step)
	}
	return q, steps, nil
}

// fetchRun is one Fetch's state as its stages fill it in.
type fetchRun struct {
	f  *fetcher
	in *Input
	// podSel is the selector's kube_pod_labels matchers ("" without one);
	// podFilter limits a query to the selected pods.
	podSel, podFilter string
	pods              map[key]*Pod    // the Go containers
	created           map[key]float64 // pod key (container "") → kube_pod_created
	owners            owners
	hpa               map[key]*HPA // workload key (pod = kind/name)
}

// owners are what kube-state-metrics says owns pods, ReplicaSets and
// Jobs, keyed by the object's name as a pod's (container "") → kind,
// name.
type owners struct{ pod, rs, job map[key][2]string }

func newFetchRun(ctx context.Context, c api.Client, q Query, steps int) (*fetchRun, error) {
	f := &fetcher{ctx: ctx, prom: v1.NewAPI(c), raw: c, q: q, steps: steps}
	var sel []string
	if q.Namespace != "" {
		sel = append(sel, fmt.Sprintf("namespace=%q", q.Namespace))
	}
	if q.Cluster != "" {
		sel = append(sel, fmt.Sprintf("%s=%q", q.ClusterLabel, q.Cluster))
	}
	f.sel = strings.Join(sel, ", ")
	f.by = q.ClusterLabel + ", namespace, pod, container"
	f.podBy = q.ClusterLabel + ", namespace, pod"
	f.since = model.Duration(q.To.Sub(q.From)).String()
	f.step = model.Duration(q.Step).String()
	r := &fetchRun{f: f, in: &Input{Start: q.From, Step: q.Step, Steps: steps, Sources: map[string]string{}}, pods: map[key]*Pod{}}
	goSeries := fmt.Sprintf(`group by (%s) (go_info%s)`, f.by, f.m(`container!=""`))
	if q.Selector != "" {
		ms, err := ParseSelector(q.Selector)
		if err != nil {
			return nil, err
		}
		r.podSel = ms
		r.podFilter = fmt.Sprintf(` and on (%s) group by (%s) (kube_pod_labels%s)`, f.podBy, f.podBy, f.m(ms))
	}
	f.filter = fmt.Sprintf(` and on (%s) (%s%s)`, f.by, goSeries, r.podFilter)
	return r, nil
}

// goContainers finds the Go containers: go_info at any time in the window.
func (r *fetchRun) goContainers() error {
	f := r.f
	goQ := fmt.Sprintf(`max by (%s, version) (last_over_time(go_info%s[%s]))`, f.by, f.m(`container!=""`), f.since)
	if r.podFilter != "" {
		goQ += fmt.Sprintf(` and on (%s) group by (%s) (last_over_time(kube_pod_labels%s[%s]))`, f.podBy, f.podBy, f.m(r.podSel), f.since)
	}
	vec, err := f.instant(goQ)
	if err != nil {
		return err
	}
	for _, s := range vec {
		k := f.keyOf(s.Metric)
		if r.pods[k] == nil {
			r.pods[k] = newPod(k.pod)
		}
		r.pods[k].GoVersion = string(s.Metric["version"])
	}
	if len(r.pods) > f.q.MaxContainers {
		return fmt.Errorf("%w: %d Go containers match, more than %d (narrow it with --namespace, --selector or --cluster, or raise --max-containers)", ErrTooMany, len(r.pods), f.q.MaxContainers)
	}
	return nil
}

// leftOut counts the containers without go_* series, and the Go series
// that cannot be read as a container's, by reason: they are left out, and
// the report says so.
func (r *fetchRun) leftOut() error {
	f, in := r.f, r.in
	all, err := f.instant(fmt.Sprintf(`count(group by (%s) (last_over_time(container_cpu_usage_seconds_total%s[%s])) unless on (%s) group by (%s) (last_over_time(go_info%s[%s])))`,
		f.by, f.m(`container!="", container!="POD"`), f.since, f.by, f.by, f.m(`container!=""`), f.since))
	if err != nil {
		return err
	}
	if len(all) > 0 {
		in.NonGo = int(all[0].Value)
	}
	in.Unread = map[string]int{}
	for _, u := range []struct{ why, query string }{
		{UnreadNoContainer, fmt.Sprintf(`count(group by (%s) (last_over_time(go_info%s[%s])))`, f.podBy, f.m(`pod!="", container=""`), f.since)},
		{UnreadNoPod, fmt.Sprintf(`count(group by (job, instance) (last_over_time(go_info%s[%s])))`, f.m(`pod=""`), f.since)},
	} {
		vec, err := f.instant(u.query)
		if err != nil {
			return err
		}
		if len(vec) > 0 && vec[0].Value > 0 {
			in.Unread[u.why] = int(vec[0].Value)
		}
	}
	return nil
}

// found fails without Go containers, and else says how many there are.
func (r *fetchRun) found() error {
	f, in := r.f, r.in
	if len(r.pods) == 0 {
		where := "in Prometheus"
		if f.sel != "" {
			where = "matching " + f.sel
		}
		return fmt.Errorf("%w %s: no container has go_info series over the last %s (a Go container counts when client_golang's go_* series are scraped with namespace, pod and container labels, as a PodMonitor gives them); %d containers without them", ErrNoGo, where, f.since, in.NonGo)
	}
	in.Sources["go"] = fmt.Sprintf("go_info: %d Go containers; %d without go_* series left out", len(r.pods), in.NonGo)
	return nil
}

// sized tells Query.Found how many Go containers there are and the steps
// their series can hold, once the pods' creation is known and before any
// series is read.
func (r *fetchRun) sized() error {
	if r.f.q.Found != nil {
		r.f.q.Found(len(r.pods), heldSteps(r.pods, r.created, r.f.q, r.f.steps))
	}
	return nil
}

// heldSteps is how many steps the Go containers' series can hold in all
// (Track), over steps steps of q: each from the step its pod was created
// in, the window's first where the pod is older or kube_pod_created does
// not say (created, by pod key), to the last.
func heldSteps(pods map[key]*Pod, created map[key]float64, q Query, steps int) int {
	from, step := float64(q.From.UnixMilli())/1e3, q.Step.Seconds()
	n := 0
	for k := range pods {
		first := 0
		if c, ok := created[key{k.cluster, k.ns, k.pod, ""}]; ok && c > from {
			// Step i's point is at the window's start + (i+1) steps.
			first = min(steps-1, max(0, int(math.Ceil((c-from)/step))-1))
		}
		n += steps - first
	}
	return n
}

// lastRead is an instant query of one value per container over the
// window, and where it goes.
type lastRead struct {
	what, source, query string
	set                 func(p *Pod, m model.Metric, v float64)
}

// last runs l's query and sets each Go container's value; its source says
// how many series answered ("none found" for none).
func (r *fetchRun) last(l lastRead) error {
	vec, err := r.f.instant(l.query)
	if err != nil {
		return err
	}
	n := 0
	for _, s := range vec {
		if p := r.pods[r.f.keyOf(s.Metric)]; p != nil {
			l.set(p, s.Metric, float64(s.Value))
			n++
		}
	}
	r.in.Sources[l.what] = fmt.Sprintf("%s (%d series)", l.source, n)
	if n == 0 {
		r.in.Sources[l.what] = "none found"
	}
	return nil
}

// lastOf is metric's last value per container over the window.
func (f *fetcher) lastOf(metric, extra string) string {
	return fmt.Sprintf(`max by (%s) (last_over_time(%s%s[%s]))`, f.by, metric, f.m(extra), f.since)
}

// settings reads the last values over the window of the runtime's
// settings and the spec's requests and limits.
func (r *fetchRun) settings() error {
	f := r.f
	resources := func(kind string) lastRead {
		return lastRead{kind, "kube_pod_container_resource_" + kind,
			fmt.Sprintf(`max by (%s, resource) (last_over_time(kube_pod_container_resource_%s%s[%s]))`, f.by, kind, f.m(`resource=~"cpu|memory"`), f.since),
			func(p *Pod, m model.Metric, v float64) {
				res := &p.Requests
				if kind == "limits" {
					res = &p.Limits
				}
				if m["resource"] == "cpu" {
					res.CPU = v
				} else {
					res.Memory = v
				}
			}}
	}
	for _, l := range []lastRead{
		{"gomaxprocs", "go_sched_gomaxprocs_threads", f.lastOf("go_sched_gomaxprocs_threads", ""), func(p *Pod, _ model.Metric, v float64) { p.GOMAXPROCS = v }},
		{"gomemlimit", "go_gc_gomemlimit_bytes", f.lastOf("go_gc_gomemlimit_bytes", ""), func(p *Pod, _ model.Metric, v float64) { p.GOMEMLIMIT = v }},
		{"gogc", "go_gc_gogc_percent", f.lastOf("go_gc_gogc_percent", ""), func(p *Pod, _ model.Metric, v float64) { p.GOGC = v }},
		resources("requests"),
		resources("limits"),
	} {
		if err := r.last(l); err != nil {
			return err
		}
	}
	return nil
}

// creation reads when each pod was created: the newest pod's spec is the
// workload's.
func (r *fetchRun) creation() error {
	f := r.f
	vec, err := f.instant(fmt.Sprintf(`max by (%s) (last_over_time(kube_pod_created%s[%s]))`, f.podBy, f.m(""), f.since))
	if err != nil {
		return err
	}
	r.created = map[key]float64{}
	for _, s := range vec {
		r.created[f.keyOf(s.Metric)] = float64(s.Value)
	}
	r.in.Sources["created"] = fmt.Sprintf("kube_pod_created (%d pods)", len(r.created))
	return nil
}

// counts reads each container's restarts and OOM kills over the window:
// cAdvisor's kernel OOM events, else kube-state-metrics' last
// termination reason (at least one kill when seen).
func (r *fetchRun) counts() error {
	f := r.f
	if err := r.last(lastRead{"restarts", "kube_pod_container_status_restarts_total",
		fmt.Sprintf(`max by (%s) (increase(kube_pod_container_status_restarts_total%s[%s]))`, f.by, f.m(""), f.since),
		func(p *Pod, _ model.Metric, v float64) { p.Restarts = math.Round(v) }}); err != nil {
		return err
	}
	if err := r.last(lastRead{"oom", "container_oom_events_total (cAdvisor)",
		fmt.Sprintf(`max by (%s) (increase(container_oom_events_total%s[%s]))`, f.by, f.m(`container!=""`), f.since),
		func(p *Pod, _ model.Metric, v float64) { p.OOMKills = math.Round(v) }}); err != nil {
		return err
	}
	if !strings.HasPrefix(r.in.Sources["oom"], "none") {
		return nil
	}
	return r.last(lastRead{"oom", "kube_pod_container_status_last_terminated_reason{reason=\"OOMKilled\"} (at least one kill when seen)",
		fmt.Sprintf(`max by (%s) (max_over_time(kube_pod_container_status_last_terminated_reason%s[%s]))`, f.by, f.m(`reason="OOMKilled"`), f.since),
		func(p *Pod, _ model.Metric, v float64) { p.OOMKills = v }})
}

// readOwners reads the owners: a pod's, a ReplicaSet's (its Deployment) and
// a Job's (a CronJob: its jobTemplate is what can be patched).
func (r *fetchRun) readOwners() error {
	o := &r.owners
	var err error
	if o.pod, err = r.f.ownersOf("kube_pod_owner", "pod"); err != nil {
		return err
	}
	if o.rs, err = r.f.ownersOf("kube_replicaset_owner", "replicaset"); err != nil {
		return err
	}
	if o.job, err = r.f.ownersOf("kube_job_owner", "job_name"); err != nil {
		return err
	}
	r.in.Sources["owners"] = fmt.Sprintf("kube_pod_owner (%d pods), kube_replicaset_owner (%d), kube_job_owner (%d)", len(o.pod), len(o.rs), len(o.job))
	return nil
}

// ownersOf reads metric's owner of each object its label name names,
// keyed by the object's name (as a pod's, with no container); "<none>"
// for an object kube-state-metrics says has none, so that a bare
// ReplicaSet stays itself (promclient.Workload).
func (f *fetcher) ownersOf(metric, name string) (map[key][2]string, error) {
	vec, err := f.instant(fmt.Sprintf(`max by (%s, %s, owner_kind, owner_name) (last_over_time(%s%s[%s]))`, f.q.ClusterLabel+", namespace", name, metric, f.m(`owner_kind!=""`), f.since))
	if err != nil {
		return nil, err
	}
	owners := map[key][2]string{}
	for _, s := range vec {
		k := key{string(s.Metric[model.LabelName(f.q.ClusterLabel)]), string(s.Metric["namespace"]), string(s.Metric[model.LabelName(name)]), ""}
		// "<none>" says the object has no owner; an owner it had at
		// another time in the window wins over it.
		if o, ok := owners[k]; ok && o[0] != "<none>" {
			continue
		}
		owners[k] = [2]string{string(s.Metric["owner_kind"]), string(s.Metric["owner_name"])}
	}
	return owners, nil
}

// hpas reads the HorizontalPodAutoscalers: what each scales, and on which
// resources' utilisation (the targets whose meaning a new request
// changes).
func (r *fetchRun) hpas() error {
	f := r.f
	nsBy := f.q.ClusterLabel + ", namespace"
	r.hpa = map[key]*HPA{}
	byName := map[key]*HPA{}
	vec, err := f.instant(fmt.Sprintf(`max by (%s, horizontalpodautoscaler, scaletargetref_kind, scaletargetref_name) (last_over_time(kube_horizontalpodautoscaler_info%s[%s]))`, nsBy, f.m(""), f.since))
	if err != nil {
		return err
	}
	for _, s := range vec {
		c, ns := string(s.Metric[model.LabelName(f.q.ClusterLabel)]), string(s.Metric["namespace"])
		h := &HPA{Name: string(s.Metric["horizontalpodautoscaler"])}
		r.hpa[key{c, ns, string(s.Metric["scaletargetref_kind"]) + "/" + string(s.Metric["scaletargetref_name"]), ""}] = h
		byName[key{c, ns, h.Name, ""}] = h
	}
	if len(r.hpa) > 0 {
		vec, err = f.instant(fmt.Sprintf(`max by (%s, horizontalpodautoscaler, metric_name) (last_over_time(kube_horizontalpodautoscaler_spec_target_metric%s[%s]))`, nsBy, f.m(`metric_name=~"cpu|memory", metric_target_type="utilization"`), f.since))
		if err != nil {
			return err
		}
		for _, s := range vec {
			if h := byName[key{string(s.Metric[model.LabelName(f.q.ClusterLabel)]), string(s.Metric["namespace"]), string(s.Metric["horizontalpodautoscaler"]), ""}]; h != nil {
				switch s.Metric["metric_name"] {
				case "cpu":
					h.CPU = true
				case "memory":
					h.Memory = true
				}
			}
		}
	}
	r.in.Sources["hpa"] = fmt.Sprintf("kube_horizontalpodautoscaler_info, kube_horizontalpodautoscaler_spec_target_metric (%d HPAs)", len(r.hpa))
	return nil
}

// cadvisor keeps cAdvisor's containers' own series.
const cadvisor = `container!="", container!="POD"`

// rangeRead is a range query of one series per container, and the
// slot of each Go container it fills.
type rangeRead struct {
	what, source, query string
	slot                func(p *Pod) *Track
}

// rate is metric's rate per container over each step, of Go containers.
func (f *fetcher) rate(metric, extra string) string {
	return fmt.Sprintf(`sum by (%s) (rate(%s%s[%s]))%s`, f.by, metric, f.m(extra), f.step, f.filter)
}

// over is fn (max_over_time, min_over_time) of metric per container over
// each step, of Go containers.
func (f *fetcher) over(fn, metric, extra string) string {
	return fmt.Sprintf(`max by (%s) (%s(%s%s[%s]))%s`, f.by, fn, metric, f.m(extra), f.step, f.filter)
}

// seriesReads are the series per step every fetch reads.
func (f *fetcher) seriesReads() []rangeRead {
	return []rangeRead{
		{"cpu", "container_cpu_usage_seconds_total (cAdvisor)", f.rate("container_cpu_usage_seconds_total", cadvisor), func(p *Pod) *Track { return &p.CPU }},
		{"throttling", "container_cpu_cfs_throttled_periods_total ÷ container_cpu_cfs_periods_total (cAdvisor)",
			fmt.Sprintf(`sum by (%[1]s) (increase(container_cpu_cfs_throttled_periods_total%[2]s[%[3]s])) / sum by (%[1]s) (increase(container_cpu_cfs_periods_total%[2]s[%[3]s]))%[4]s`, f.by, f.m(cadvisor), f.step, f.filter),
			func(p *Pod) *Track { return &p.Throttled }},
		{"working_set", "container_memory_working_set_bytes (cAdvisor), the step's peak", f.over("max_over_time", "container_memory_working_set_bytes", cadvisor), func(p *Pod) *Track { return &p.WorkingSet }},
		{"non_heap", "container_memory_working_set_bytes less the heap's resident spans (go_memstats_heap_inuse_bytes + go_memstats_heap_idle_bytes − go_memstats_heap_released_bytes), the step's averages",
			fmt.Sprintf(`max by (%[1]s) (avg_over_time(container_memory_working_set_bytes%[2]s[%[4]s])) - on (%[1]s) (max by (%[1]s) (avg_over_time(go_memstats_heap_inuse_bytes%[3]s[%[4]s])) + on (%[1]s) max by (%[1]s) (avg_over_time(go_memstats_heap_idle_bytes%[3]s[%[4]s])) - on (%[1]s) max by (%[1]s) (avg_over_time(go_memstats_heap_released_bytes%[3]s[%[4]s])))`, f.by, f.m(cadvisor), f.m(""), f.step),
			func(p *Pod) *Track { return &p.NonHeap }},
		{"heap_alloc_low", "go_memstats_heap_alloc_bytes, the step's low", f.over("min_over_time", "go_memstats_heap_alloc_bytes", ""), func(p *Pod) *Track { return &p.HeapAllocLow }},
		{"heap_goal", "go_memstats_next_gc_bytes, the step's peak", f.over("max_over_time", "go_memstats_next_gc_bytes", ""), func(p *Pod) *Track { return &p.HeapGoal }},
		{"live_heap", "go_gc_heap_live_bytes, the step's peak", f.over("max_over_time", "go_gc_heap_live_bytes", ""), func(p *Pod) *Track { return &p.LiveHeap }},
		{"gc", "go_cpu_classes_gc_total_cpu_seconds_total", f.rate("go_cpu_classes_gc_total_cpu_seconds_total", ""), func(p *Pod) *Track { return &p.GC }},
	}
}

// fill runs a range query under ctx and puts each Go container's points
// in its slot; it gives how many points it put.
func (r *fetchRun) fill(ctx context.Context, query string, slot func(p *Pod) *Track) (int, error) {
	return r.f.ranged(ctx, query, func(m model.Metric, i, end int, v float64) {
		if p := r.pods[r.f.keyOf(m)]; p != nil {
			slot(p).put(i, end, v)
		}
	})
}

// series reads the series per step (seriesReads), Concurrency at a time:
// each fills its own slot of every pod, so they share nothing but the
// pods' index; the first error cancels the rest.
func (r *fetchRun) series() error {
	reads := r.f.seriesReads()
	ctx := r.f.ctx
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	found := make([]int, len(reads))
	errs := make([]error, len(reads))
	sem := make(chan struct{}, r.f.q.Concurrency)
	var wg sync.WaitGroup
	for k, rr := range reads {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			found[k], errs[k] = r.fill(rctx, rr.query, rr.slot)
			if errs[k] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	// A query's own error, not the cancellation it caused in the others.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for k, rr := range reads {
		if errs[k] != nil {
			return errs[k]
		}
		r.in.Sources[rr.what] = rr.source
		if found[k] == 0 {
			r.in.Sources[rr.what] = "none found"
		}
	}
	return nil
}

// burst reads each step's highest 1-minute CPU rate, with
// Query.CPUBurst only.
func (r *fetchRun) burst() error {
	f := r.f
	if !f.q.CPUBurst {
		return nil
	}
	burst := fmt.Sprintf(`max_over_time((sum by (%s) (rate(container_cpu_usage_seconds_total%s[%s])))[%s:%s])%s`,
		f.by, f.m(cadvisor), model.Duration(BurstWindow), f.step, model.Duration(BurstResolution), f.filter)
	n, err := r.fill(f.ctx, burst, func(p *Pod) *Track { return &p.CPUPeak })
	if err != nil {
		return err
	}
	r.in.Sources["cpu_burst"] = fmt.Sprintf("container_cpu_usage_seconds_total (cAdvisor), the step's highest %s rate every %s", model.Duration(BurstWindow), model.Duration(BurstResolution))
	if n == 0 {
		r.in.Sources["cpu_burst"] = "none found"
	}
	return nil
}

// gcFallback reads the GC's CPU from client_golang's default collector
// where the runtime/metrics one is missing: stop-the-world pauses only,
// a floor of the GC's CPU.
func (r *fetchRun) gcFallback() error {
	in := r.in
	in.GCSource = "go_cpu_classes_gc_total_cpu_seconds_total"
	if !strings.HasPrefix(in.Sources["gc"], "none") {
		return nil
	}
	n, err := r.fill(r.f.ctx, r.f.rate("go_gc_duration_seconds_sum", ""), func(p *Pod) *Track { return &p.GC })
	if err != nil {
		return err
	}
	in.GCSource = "go_gc_duration_seconds (stop-the-world pauses only: a floor of the GC's CPU)"
	in.Sources["gc"] = in.GCSource
	if n == 0 {
		in.Sources["gc"], in.GCSource = "none found", ""
	}
	return nil
}

// groups pools the Go containers by workload and container name: a pod's
// owner, or its ReplicaSet's or Job's where kube-state-metrics knows it;
// the pods in each by name, the groups by workload and container.
func (r *fetchRun) groups() []Group {
	groups := map[string]*Group{}
	for k, p := range r.pods {
		w := r.owners.workload(k)
		if c, ok := r.created[key{k.cluster, k.ns, k.pod, ""}]; ok {
			p.Created = c
		}
		gk := w.String() + "\x00" + k.container
		g := groups[gk]
		if g == nil {
			g = &Group{Workload: w, Container: k.container}
			if h := r.hpa[key{w.Cluster, w.Namespace, w.Kind + "/" + w.Name, ""}]; h != nil {
				hc := *h
				g.HPA = &hc
			}
			groups[gk] = g
		}
		g.Pods = append(g.Pods, *p)
	}
	var out []Group
	for _, g := range groups {
		sort.Slice(g.Pods, func(i, j int) bool { return g.Pods[i].Name < g.Pods[j].Name })
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Workload.String()+"\x00"+a.Container < b.Workload.String()+"\x00"+b.Container
	})
	return out
}

// workload is the workload of container k's pod (the pod itself without
// an owner), by the rule every reader shares (promclient.Workload): its
// ReplicaSet's or Job's owner where kube-state-metrics says, else (no
// kube_replicaset_owner series at all: a kube-state-metrics that leaves
// it out) a Deployment's ReplicaSet by its name.
func (o owners) workload(k key) Workload {
	w := Workload{Cluster: k.cluster, Namespace: k.ns, Kind: "Pod", Name: k.pod}
	po, ok := o.pod[key{k.cluster, k.ns, k.pod, ""}]
	if !ok {
		return w
	}
	up := func(kind, name string) (string, string, bool) {
		var d [2]string
		var known bool
		switch kind {
		case "ReplicaSet":
			d, known = o.rs[key{k.cluster, k.ns, name, ""}]
		case "Job":
			d, known = o.job[key{k.cluster, k.ns, name, ""}]
		}
		return d[0], d[1], known
	}
	if kind, name, ok := promclient.Workload(po[0], po[1], up); ok {
		w.Kind, w.Name = kind, name
	}
	return w
}

// newPod is a pod with no figures yet: its series are allocated as
// their first points come (most fleets lack some of them: a fleet's
// week of a series it does not have would be 8 KiB a container of NaN).
func newPod(name string) *Pod {
	return &Pod{Name: name, GOMAXPROCS: math.NaN(), GOMEMLIMIT: math.NaN(), GOGC: math.NaN()}
}

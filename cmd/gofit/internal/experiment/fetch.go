package experiment

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/promclient"
	"github.com/gofit-dev/gofit/kube/admission"
)

// Query is what to fetch.
type Query struct {
	Namespace string
	Name      string // the experiment
	// Workload is the experiment's workload ("Deployment/web", as
	// admission.Workload names it; NoController for pods without one).
	// "" means the only one that runs an experiment of this name in the
	// namespace: with two, Fetch asks for one.
	Workload string
	From, To time.Time
	Window   time.Duration // the paired windows' length (the range queries' step)
	Latency  string        // the service's latency histogram (classic or native), seconds
	// ErrorMatcher selects the failed requests among the histogram's
	// series (a PromQL label matcher such as code=~"5..").
	ErrorMatcher string
	Control      string // "" means the spec's (from a live pod), else the first arm
	// Matchers are extra PromQL label matchers for every series
	// (cluster="prod" where one Prometheus holds several clusters).
	Matchers []string
	// WarmUp is left out after each pod starts: its windows until then
	// count as missing (restarts and OOM kills still count).
	WarmUp    time.Duration
	Resamples int
	Seed      int64
	// chunkSteps bounds the windows one range query asks for (0:
	// promclient.DefaultChunkSteps, a day's).
	chunkSteps int
}

// Spec is what the API server knows of an experiment: its live pods by
// arm, the spec a live pod carries (arm order and control) and the
// restarts of its live containers.
type Spec struct {
	// Workloads are the workloads whose live pods run an experiment of
	// this name, whichever was asked for (NoController for pods without
	// one).
	Workloads []string
	// Live is the workload of every live pod of the experiment's name,
	// whichever workload was asked for.
	Live     map[string]string
	Arms     []string             // in the spec's order; nil when no live pod had one
	Control  string               // the spec's control
	Pods     map[string][]string  // arm → live pods
	Restarts map[string]float64   // arm → container restarts of its live pods
	OOMKills map[string]float64   // arm → live containers whose last end was an OOM kill
	Started  map[string]time.Time // pod → when it started
	// Nodes counts the arm's live pods on each node (arm → node →
	// pods), scheduled ones only: the arm × node balance.
	Nodes map[string]map[string]int
	// MaxDuration is the spec's maxDuration, 0 without one.
	MaxDuration time.Duration
}

// PodSource finds an experiment's live pods (the API server): those of
// workload, or of every workload for "".
type PodSource interface {
	Experiment(ctx context.Context, namespace, name, workload string) (Spec, error)
}

// NoController is the workload of pods without a controller, as
// kube-state-metrics's kube_pod_owner names it.
const NoController = "<none>"

// WorkloadOf is admission.Workload with NoController for "".
func WorkloadOf(m *metav1.ObjectMeta) string {
	if w := admission.Workload(m); w != "" {
		return w
	}
	return NoController
}

// sameWorkload reports whether a gone pod's workload (ownerWorkload's,
// which takes a ReplicaSet for a Deployment's) is want: an Argo Rollout's
// ReplicaSets look the same in kube_pod_owner.
func sameWorkload(gone, want string) bool {
	if gone == want {
		return true
	}
	name, ok := strings.CutPrefix(want, "Rollout/")
	return ok && gone == "Deployment/"+name
}

// ownerWorkload is the workload of a gone pod from its kube_pod_owner
// series, by the one rule every reader shares (promclient.Workload): a
// ReplicaSet NAME-HASH whose HASH is a pod-template-hash's is taken for
// Deployment NAME, as for live pods (where the pod-template-hash label
// says so); another ReplicaSet is itself.
func ownerWorkload(kind, name string) string {
	k, n, ok := promclient.Workload(kind, name, nil)
	if !ok {
		return NoController
	}
	return k + "/" + n
}

// Fetch finds the arms' pods and reads their series into paired windows.
// pods may be nil (no API access): Prometheus's kube_pod_labels alone
// then says which pod was in which arm. It runs one fetch's stages in
// order: the pods by arm, the arms' windows, then each kind of series.
func Fetch(ctx context.Context, prom api.Client, pods PodSource, q Query) (Input, error) {
	if q.Window <= 0 || !q.To.After(q.From) {
		return Input{}, fmt.Errorf("want a window and a span: window %v, from %v to %v", q.Window, q.From, q.To)
	}
	n := int(q.To.Sub(q.From) / q.Window)
	if n < 1 {
		return Input{}, fmt.Errorf("span %v is shorter than one window of %v", q.To.Sub(q.From), q.Window)
	}
	r := &fetchRun{
		in: &Input{Experiment: q.Name, Namespace: q.Namespace, From: q.From, To: q.From.Add(time.Duration(n) * q.Window), Window: q.Window,
			Have: map[string]bool{}, Sources: map[string]string{}, Resamples: q.Resamples, Seed: q.Seed},
		f: fetcher{prom: prom, q: q, n: n, ctx: ctx}, q: q,
		armOf: map[string]string{}, covered: map[string]map[int]bool{},
	}
	r.f.warn = func(s string) { r.in.Notes = append(r.in.Notes, s) }
	for _, m := range q.Matchers {
		r.extra += ", " + m
	}
	if err := r.podsByArm(pods); err != nil {
		return Input{}, err
	}
	if err := r.layOut(); err != nil {
		return Input{}, err
	}
	// Restarts and OOM kills are whole numbers per window, never
	// extrapolated rates (increase() said 10.3 restarts), and a kernel
	// OOM kill is one (issue 57).
	for _, stage := range []func() error{r.latency, r.series, r.restartsAndOOMs, r.companions} {
		if err := stage(); err != nil {
			return Input{}, err
		}
	}
	in := r.in
	if q.WarmUp > 0 {
		if err := r.f.warmUp(in.Arms, r.spec.Started, q.WarmUp, in.Window); err != nil {
			return Input{}, err
		}
		in.Notes = append(in.Notes, fmt.Sprintf("the first %v after each pod started is left out (--warm-up)", q.WarmUp))
	}
	if !in.Have["latency"] && !in.Have["cpu"] {
		return Input{}, fmt.Errorf("experiment %s in %s, pods %s: %w (latency: %s; cpu: %s)", q.Name, q.Namespace, strings.Join(r.all, ", "), ErrNoData, in.Sources["latency"], in.Sources["cpu"])
	}
	r.liveCounts()
	return *in, nil
}

// fetchRun is one Fetch's state as its stages fill it in.
type fetchRun struct {
	in    *Input
	f     fetcher
	q     Query // as asked, with the workload once known
	spec  Spec  // the API server's (empty without one)
	extra string
	armOf map[string]string // pod → arm
	// loc is each pod's arm index and its index in the arm.
	loc map[string][2]int
	all []string // the pods, quoted for a regexp
	// covered is, by kind, the arms the chosen source has data for.
	covered map[string]map[int]bool
}

// podsByArm finds the experiment's pods: the live ones from the API
// server, and gone ones from what kube-state-metrics kept of their
// labels and owners.
func (r *fetchRun) podsByArm(pods PodSource) error {
	q := &r.q
	var sources []string
	if pods != nil {
		spec, err := pods.Experiment(r.f.ctx, q.Namespace, q.Name, q.Workload)
		if err != nil {
			return fmt.Errorf("pods of experiment %s in %s from the API server: %w", q.Name, q.Namespace, err)
		}
		r.spec = spec
		if q.Workload == "" {
			if len(spec.Workloads) > 1 {
				return fmt.Errorf("experiment %s in namespace %s runs in %d workloads (%s), each its own experiment: name one with --workload", q.Name, q.Namespace, len(spec.Workloads), strings.Join(spec.Workloads, ", "))
			}
			if len(spec.Workloads) == 1 {
				q.Workload = spec.Workloads[0]
			}
		}
		for arm, ps := range spec.Pods {
			for _, p := range ps {
				r.armOf[p] = arm
			}
		}
		sources = append(sources, fmt.Sprintf("API server (%d live pods)", len(r.armOf)))
	}
	kept, added, err := r.gonePods()
	if err != nil {
		return err
	}
	r.in.Workload = q.Workload
	if len(kept) > 0 {
		sources = append(sources, fmt.Sprintf("Prometheus kube_pod_labels (%d pods, %d not live)", len(kept), added))
	}
	r.in.Sources["pods"] = strings.Join(sources, "; ")
	if len(r.armOf) == 0 {
		return fmt.Errorf("experiment %s in namespace %s: no pods found (API server: %d live; kube_pod_labels: none; kube-state-metrics exports pod labels only with --metric-labels-allowlist=pods=[gofit.dev/experiment,gofit.dev/arm])", q.Name, q.Namespace, len(r.spec.Pods))
	}
	return nil
}

// gonePods adds the pods that kube_pod_labels kept and the API server no
// longer has, from the experiment's workload (kube_pod_owner, exported
// by default, says whose). It returns the kept series and how many it
// added.
func (r *fetchRun) gonePods() (model.Matrix, int, error) {
	q := &r.q
	kept, err := r.f.matrix(fmt.Sprintf(`max by (pod, label_gofit_dev_arm) (kube_pod_labels{namespace=%q, label_gofit_dev_experiment=%q%s})`, q.Namespace, q.Name, r.extra), false)
	if err != nil {
		return nil, 0, err
	}
	owners := map[string]string{} // gone pod → workload
	if len(kept) > 0 {
		ows, err := r.f.matrix(fmt.Sprintf(`max by (pod, owner_kind, owner_name) (kube_pod_owner{namespace=%q, owner_is_controller=~"true|<none>"%s})`, q.Namespace, r.extra), false)
		if err != nil {
			return nil, 0, err
		}
		for _, s := range ows {
			owners[string(s.Metric["pod"])] = ownerWorkload(string(s.Metric["owner_kind"]), string(s.Metric["owner_name"]))
		}
	}
	added, unknown := 0, 0
	goneIn := map[string]bool{} // workloads of the gone pods, none asked for
	for _, s := range kept {
		p, arm := string(s.Metric["pod"]), string(s.Metric["label_gofit_dev_arm"])
		if p == "" || arm == "" {
			continue
		}
		if _, ok := r.armOf[p]; ok {
			continue
		}
		if _, live := r.spec.Live[p]; live {
			continue // live, in another workload: not this experiment's
		}
		w, known := owners[p]
		switch {
		case !known && (len(owners) > 0 || len(r.spec.Workloads) > 1):
			unknown++
			continue
		case !known:
			// No kube_pod_owner at all, and one workload at most runs
			// the experiment now: its gone pods count.
		case q.Workload != "" && !sameWorkload(w, q.Workload):
			continue
		case q.Workload == "":
			goneIn[w] = true
		}
		r.armOf[p] = arm
		added++
	}
	if q.Workload == "" && len(goneIn) > 1 {
		ws := slices.Sorted(maps.Keys(goneIn))
		return nil, 0, fmt.Errorf("experiment %s in namespace %s ran in %d workloads (%s), each its own experiment: name one with --workload", q.Name, q.Namespace, len(ws), strings.Join(ws, ", "))
	}
	if q.Workload == "" && len(goneIn) == 1 {
		for w := range goneIn {
			q.Workload = w
		}
	}
	if unknown > 0 {
		r.in.Notes = append(r.in.Notes, fmt.Sprintf("%d gone pods of experiment %s left out: kube_pod_owner does not say their workload", unknown, q.Name))
	}
	return kept, added, nil
}

// layOut orders the arms (the spec's order, then any others by name),
// picks the control and gives every pod its windows.
func (r *fetchRun) layOut() error {
	in := r.in
	order := append([]string{}, r.spec.Arms...)
	seen := map[string]bool{}
	for _, a := range order {
		seen[a] = true
	}
	var others []string
	for _, a := range r.armOf {
		if !seen[a] {
			seen[a] = true
			others = append(others, a)
		}
	}
	sort.Strings(others)
	order = append(order, others...)
	in.Planned = r.spec.MaxDuration
	in.Nodes = r.spec.Nodes
	in.Control = r.q.Control
	if in.Control == "" {
		in.Control = r.spec.Control
	}
	if in.Control == "" {
		in.Control = order[0]
	}
	if !seen[in.Control] {
		return fmt.Errorf("control arm %q has no pods (arms: %s)", in.Control, strings.Join(order, ", "))
	}
	byArm := map[string][]string{}
	for p, a := range r.armOf {
		byArm[a] = append(byArm[a], p)
	}
	r.loc = map[string][2]int{}
	for i, a := range order {
		sort.Strings(byArm[a])
		arm := Arm{Name: a, Pods: byArm[a]}
		for j, p := range byArm[a] {
			arm.Windows = append(arm.Windows, make([]Window, r.f.n))
			r.loc[p] = [2]int{i, j}
		}
		in.Arms = append(in.Arms, arm)
	}
	for p := range r.armOf {
		r.all = append(r.all, regexp.QuoteMeta(p))
	}
	sort.Strings(r.all)
	r.f.sel = fmt.Sprintf(`namespace=%q, pod=~%q%s`, r.q.Namespace, strings.Join(r.all, "|"), r.extra)
	return nil
}

// put adds a pod's per-window values into its windows, marking them as
// having the source.
func (r *fetchRun) put(ss model.Matrix, has Source, set func(w *Window, v float64)) {
	for _, s := range ss {
		l, ok := r.loc[string(s.Metric["pod"])]
		if !ok {
			continue
		}
		ws := r.in.Arms[l[0]].Windows[l[1]]
		for _, v := range s.Values {
			if i, ok := r.f.window(v.Timestamp); ok && !math.IsNaN(float64(v.Value)) {
				set(&ws[i], float64(v.Value))
				ws[i].Has |= has
			}
		}
	}
}

// first runs the candidates in order and keeps the first with data for
// every arm; else the one with data for the most arms, saying which arms
// it misses (GOFIT=off leaves an arm without gofit's own metrics: it is
// missing there, never zero).
func (r *fetchRun) first(what string, cands ...[2]string) (model.Matrix, error) {
	in := r.in
	var best model.Matrix
	var bestArms map[int]bool
	bestSrc, bestN := "", 0
	for _, c := range cands {
		m, err := r.f.matrix(c[1], true)
		if err != nil {
			return nil, err
		}
		armsWith := map[int]bool{}
		for _, s := range m {
			if l, ok := r.loc[string(s.Metric["pod"])]; ok {
				armsWith[l[0]] = true
			}
		}
		if len(armsWith) > bestN {
			best, bestSrc, bestN, bestArms = m, c[0], len(armsWith), armsWith
		}
		if len(armsWith) == len(in.Arms) {
			break
		}
	}
	if best == nil {
		return nil, nil
	}
	in.Have[what] = true
	in.Sources[what] = bestSrc
	r.covered[what] = bestArms
	if bestN < len(in.Arms) {
		in.Sources[what] += fmt.Sprintf(" (missing for %d of %d arms)", len(in.Arms)-bestN, len(in.Arms))
		in.Notes = append(in.Notes, fmt.Sprintf("%s: no source has data for every arm; %s is missing for some, whose %s figures are left out", what, bestSrc, what))
	}
	return best, nil
}

// inc and avg are the per-pod, per-window increase and mean of a
// metric's series of these pods.
func (r *fetchRun) inc(metric, extra string) string {
	return fmt.Sprintf(`sum by (pod) (increase(%s{%s%s}[%s]))`, metric, r.f.sel, extra, r.f.rng())
}

func (r *fetchRun) avg(metric, extra string) string {
	return fmt.Sprintf(`sum by (pod) (avg_over_time(%s{%s%s}[%s]))`, metric, r.f.sel, extra, r.f.rng())
}

// cadvisor keeps cAdvisor's containers' own series.
const cadvisor = `, container!="", container!="POD"`

// latency reads requests and latency: the classic histogram's buckets,
// else the native histogram; and the errors among them.
func (r *fetchRun) latency() error {
	in, f, lat := r.in, r.f, r.q.Latency
	buckets, err := f.matrix(fmt.Sprintf(`sum by (pod, le) (increase(%s_bucket{%s}[%s]))`, lat, f.sel, f.rng()), true)
	if err != nil {
		return err
	}
	readErrors := func(query string) error {
		errs, err := f.matrix(query, true)
		if err != nil {
			return err
		}
		r.put(errs, 0, func(w *Window, v float64) { w.Errors += v })
		return nil
	}
	if len(buckets) > 0 {
		in.Have["latency"] = true
		in.Sources["latency"] = lat + " (classic histogram)"
		if err := addClassic(buckets, r.loc, in.Arms, f); err != nil {
			return err
		}
		return readErrors(r.inc(lat+"_count", ", "+r.q.ErrorMatcher))
	}
	native, err := f.matrix(fmt.Sprintf(`sum by (pod) (increase(%s{%s}[%s]))`, lat, f.sel, f.rng()), true)
	if err != nil {
		return err
	}
	if !addNative(native, r.loc, in.Arms, f) {
		in.Sources["latency"] = fmt.Sprintf("none: no %s_bucket or native %s series for these pods (--latency names the histogram)", lat, lat)
		return nil
	}
	in.Have["latency"] = true
	in.Sources["latency"] = lat + " (native histogram)"
	return readErrors(fmt.Sprintf(`histogram_count(sum by (pod) (increase(%s{%s, %s}[%s])))`, lat, f.sel, r.q.ErrorMatcher, f.rng()))
}

// series reads each kind of series from the first of its sources with
// data for every arm (first).
func (r *fetchRun) series() error {
	inc, avg := r.inc, r.avg
	steps := []struct {
		what  string
		has   Source
		set   func(w *Window, v float64)
		cands [][2]string
	}{
		{"cpu", HasCPU, func(w *Window, v float64) { w.CPUSeconds += v }, [][2]string{
			{"container_cpu_usage_seconds_total (cAdvisor)", inc("container_cpu_usage_seconds_total", cadvisor)},
			{"gofit_cpu_usage_seconds_total", inc("gofit_cpu_usage_seconds_total", "")},
			{"process_cpu_seconds_total", inc("process_cpu_seconds_total", "")}}},
		{"throttling", HasThrottling, func(w *Window, v float64) { w.Periods += v }, [][2]string{
			{"container_cpu_cfs_periods_total (cAdvisor)", inc("container_cpu_cfs_periods_total", cadvisor)},
			{"gofit_cpu_periods_total", inc("gofit_cpu_periods_total", "")}}},
		{"gc", HasGC, func(w *Window, v float64) { w.GCSeconds += v }, [][2]string{
			{"gofit_go_cpu_seconds_total{class=\"gc\"}", inc("gofit_go_cpu_seconds_total", `, class="gc"`)},
			{"go_cpu_classes_gc_total_cpu_seconds_total", inc("go_cpu_classes_gc_total_cpu_seconds_total", "")}}},
		{"pauses", HasPauses, func(w *Window, v float64) { w.PauseSecs += v }, [][2]string{
			{"go_gc_duration_seconds", inc("go_gc_duration_seconds_sum", "")},
			{"gofit_go_gc_pause_seconds", inc(sumOf("gofit_go_gc_pause_seconds"), "")}}},
		{"memory", HasMemory, func(w *Window, v float64) { w.WorkingSet += v }, [][2]string{
			{"container_memory_working_set_bytes (cAdvisor)", avg("container_memory_working_set_bytes", cadvisor)},
			{"gofit_memory_working_set_bytes", avg("gofit_memory_working_set_bytes", "")}}},
		{"heap", HasHeap, func(w *Window, v float64) { w.Heap += v }, [][2]string{
			{"go_memstats_heap_inuse_bytes", avg("go_memstats_heap_inuse_bytes", "")},
			{"gofit_go_heap_live_bytes", avg("gofit_go_heap_live_bytes", "")}}},
		// A pod that stalls near its memory limit fails its readiness
		// probe and its scrapes long before (if ever) it is killed.
		{"ready", HasReady, func(w *Window, v float64) { w.Unready = math.Max(w.Unready, min(max(v, 0), 1)) }, [][2]string{
			{"kube_pod_status_ready{condition=\"false\"}", fmt.Sprintf(`max by (pod) (avg_over_time(kube_pod_status_ready{%s, condition="false"}[%s]))`, r.f.sel, r.f.rng())},
			{"up (scrapes that failed)", fmt.Sprintf(`max by (pod) (1 - avg_over_time(up{%s}[%s]))`, r.f.sel, r.f.rng())}}},
	}
	for _, s := range steps {
		m, err := r.first(s.what, s.cands...)
		if err != nil {
			return err
		}
		r.put(m, s.has, s.set)
		if m == nil {
			r.in.Sources[s.what] = "none found"
		}
	}
	return nil
}

// companions reads the companions of what series found, from the same
// source.
func (r *fetchRun) companions() error {
	inc, f := r.inc, r.f
	companions := []struct {
		what, source, query string
		set                 func(w *Window, v float64)
	}{
		{"throttling", "container_cpu_cfs_periods_total (cAdvisor)", inc("container_cpu_cfs_throttled_periods_total", cadvisor), func(w *Window, v float64) { w.Throttled += v }},
		{"throttling", "gofit_cpu_periods_total", inc("gofit_cpu_throttled_periods_total", ""), func(w *Window, v float64) { w.Throttled += v }},
		{"gc", "gofit_go_cpu_seconds_total{class=\"gc\"}", inc("gofit_go_cpu_seconds_total", `, class=~"gc|scavenge|user"`), func(w *Window, v float64) { w.GoBusy += v }},
		{"gc", "go_cpu_classes_gc_total_cpu_seconds_total", fmt.Sprintf(`sum by (pod) (increase(go_cpu_classes_total_cpu_seconds_total{%[1]s}[%[2]s])) - sum by (pod) (increase(go_cpu_classes_idle_cpu_seconds_total{%[1]s}[%[2]s]))`, f.sel, f.rng()), func(w *Window, v float64) { w.GoBusy += v }},
		{"pauses", "go_gc_duration_seconds", inc("go_gc_duration_seconds_count", ""), func(w *Window, v float64) { w.Pauses += v }},
		{"pauses", "gofit_go_gc_pause_seconds", inc(countOf("gofit_go_gc_pause_seconds"), ""), func(w *Window, v float64) { w.Pauses += v }},
	}
	for _, c := range companions {
		if !strings.HasPrefix(r.in.Sources[c.what], c.source) {
			continue
		}
		m, err := f.matrix(c.query, true)
		if err != nil {
			return err
		}
		r.put(m, 0, c.set)
	}
	return nil
}

// liveCounts adds the restarts and OOM kills of live pods from the API
// server, for the arms Prometheus has no source for: harm must not go
// unseen because a metric is missing.
func (r *fetchRun) liveCounts() {
	in := r.in
	for _, k := range []struct {
		what   string
		counts map[string]float64
		set    func(w *Window, v float64)
	}{
		{"restarts", r.spec.Restarts, func(w *Window, v float64) { w.Restarts += v }},
		{"oom", r.spec.OOMKills, func(w *Window, v float64) { w.OOMKills += v }},
	} {
		if k.counts == nil {
			continue
		}
		used := false
		for i := range in.Arms {
			if r.covered[k.what][i] {
				continue
			}
			used = true
			if v := k.counts[in.Arms[i].Name]; v > 0 {
				k.set(&in.Arms[i].Windows[0][r.f.n-1], v)
			}
		}
		if used {
			src := "API server (live pods' containers)"
			if in.Sources[k.what] != "" && in.Sources[k.what] != "none found" {
				src = in.Sources[k.what] + "; " + src + " for the other arms"
			}
			in.Sources[k.what] = src
			in.Have[k.what] = true
		}
	}
}

// restartsAndOOMs reads restarts as the soonest whole count of each
// pod's ends (mergeEnds): kube-state-metrics' restart counter, its last
// terminations, and cAdvisor's kernel OOM kills. OOM kills are, per
// pod, the soonest count of cAdvisor's container_oom_events_total and
// of the restarts whose container's last end at the window's end was
// OOMKilled (kube_pod_container_status_last_terminated_reason); with
// neither, gofit's gofit_oom_kills_total; whole increases all.
func (r *fetchRun) restartsAndOOMs() error {
	f, in, put, covered, loc := r.f, r.in, r.put, r.covered, r.loc
	restarts, err := f.counterSteps(fmt.Sprintf(`max by (pod, container) (kube_pod_container_status_restarts_total{%s})`, f.sel))
	if err != nil {
		return err
	}
	armsOf := func(m model.Matrix) map[int]bool {
		out := map[int]bool{}
		for _, s := range m {
			if l, ok := loc[string(s.Metric["pod"])]; ok {
				out[l[0]] = true
			}
		}
		return out
	}
	ends, err := f.endSteps(fmt.Sprintf(`max by (pod, container) (kube_pod_container_status_last_terminated_timestamp{%s})`, f.sel))
	if err != nil {
		return err
	}
	// Kernel OOM kills as cAdvisor sees them, each container's own
	// counter (a restarted container is a new series, counted from 0).
	kernel, err := f.counterSteps(fmt.Sprintf(`max by (pod, container, id) (container_oom_events_total{%s%s})`, f.sel, cadvisor))
	if err != nil {
		return err
	}
	if len(restarts) > 0 {
		what := []string{"kube_pod_container_status_restarts_total (whole increases per window)"}
		if len(ends) > 0 {
			what = append(what, "kube_pod_container_status_last_terminated_timestamp (each end when first seen)")
		}
		if len(kernel) > 0 {
			what = append(what, "container_oom_events_total (each kernel OOM kill when seen)")
		}
		restarts = mergeEnds(restarts, ends, kernel)
		in.Have["restarts"] = true
		in.Sources["restarts"] = "the soonest count of " + strings.Join(what, ", ")
		covered["restarts"] = armsOf(restarts)
		put(restarts, 0, func(w *Window, v float64) { w.Restarts += v })
	} else {
		in.Sources["restarts"] = "none found"
	}
	// OOM kills: per pod, the soonest whole count of the kernel's (as
	// cAdvisor sees them, when they happen) and of the restarts whose
	// container last ended OOMKilled (kube-state-metrics, with the
	// restart). Either alone misses kills: a container OOM-killed seconds
	// after its start can be gone before cAdvisor's next scrape shows its
	// counter at 1, and the guard then logged oom_kills=0 beside 9
	// restarts of an arm growing into its limit (the e2e node, 2026-12-07,
	// eleventh session); the reasons come minutes late on a slow node.
	kills, err := f.oomRestarts(restarts)
	if err != nil {
		return err
	}
	if len(kernel) > 0 || len(kills) > 0 {
		var what []string
		if len(kernel) > 0 {
			what = append(what, "container_oom_events_total (cAdvisor, whole increases per window)")
			covered["oom"] = armsOf(kernel)
		}
		if len(kills) > 0 {
			what = append(what, `kube_pod_container_status_last_terminated_reason{reason="OOMKilled"} at each restart`)
			covered["oom"] = covered["restarts"]
		}
		in.Have["oom"] = true
		in.Sources["oom"] = what[0]
		if len(what) > 1 {
			in.Sources["oom"] = "the soonest count, per pod, of " + strings.Join(what, " and ")
			covered["oom"] = union(armsOf(kernel), covered["restarts"])
		}
		put(mergeEnds(kernel, kills), 0, func(w *Window, v float64) { w.OOMKills += v })
		return nil
	}
	m, err := f.counterSteps(fmt.Sprintf(`sum by (pod) (gofit_oom_kills_total{%s})`, f.sel))
	if err != nil {
		return err
	}
	if len(m) == 0 {
		in.Sources["oom"] = "none found"
		return nil
	}
	in.Have["oom"] = true
	in.Sources["oom"] = "gofit_oom_kills_total (whole increases per window)"
	covered["oom"] = armsOf(m)
	put(m, 0, func(w *Window, v float64) { w.OOMKills += v })
	return nil
}

// oomRestarts is, per pod, the restarts (whole counts per window) whose
// container last ended OOMKilled as kube-state-metrics says at the
// window's end (kube_pod_container_status_last_terminated_reason); nil
// without reasons or restarts.
func (f fetcher) oomRestarts(restarts model.Matrix) (model.Matrix, error) {
	reason, err := f.matrix(fmt.Sprintf(`max by (pod, container) (kube_pod_container_status_last_terminated_reason{%s, reason="OOMKilled"})`, f.sel), false)
	if err != nil {
		return nil, err
	}
	var kills model.Matrix
	if len(reason) > 0 && len(restarts) > 0 {
		// Per pod, as the restarts are (mergeEnds): a pod one of whose
		// containers last ended OOMKilled.
		oom := map[string]map[model.Time]bool{}
		for _, s := range reason {
			k := string(s.Metric["pod"])
			for _, v := range s.Values {
				if v.Value == 1 {
					if oom[k] == nil {
						oom[k] = map[model.Time]bool{}
					}
					oom[k][v.Timestamp] = true
				}
			}
		}
		for _, s := range restarts {
			k := string(s.Metric["pod"])
			o := &model.SampleStream{Metric: s.Metric}
			for _, v := range s.Values {
				if v.Value > 0 && oom[k][v.Timestamp] {
					o.Values = append(o.Values, v)
				}
			}
			kills = append(kills, o)
		}
	}
	return kills, nil
}

// counterSteps runs query (a counter per series) at every window
// boundary from From, and gives each series its whole increase per
// window, stamped at the window's end: the difference from the series'
// last sample, or the new value after a reset. A series first seen
// after From is a new container or pod, counted from 0; one seen at
// From starts there. Extrapolation (increase, rate) would turn 10
// restarts into 10.3.
func (f fetcher) counterSteps(query string) (model.Matrix, error) {
	m, start, err := f.atBoundaries(query)
	if err != nil {
		return nil, err
	}
	var out model.Matrix
	for _, s := range m {
		o := &model.SampleStream{Metric: s.Metric}
		last, have := 0.0, false
		for _, p := range s.Values {
			x := float64(p.Value)
			if math.IsNaN(x) || x < 0 {
				continue
			}
			if !have && p.Timestamp.Equal(start) {
				last, have = x, true
				continue
			}
			d := x - last
			if d < 0 {
				d = x // a reset: the counter started again
			}
			last, have = x, true
			o.Values = append(o.Values, model.SamplePair{Timestamp: p.Timestamp, Value: model.SampleValue(math.Round(d))})
		}
		out = append(out, o)
	}
	return out, nil
}

// atBoundaries runs query at every window boundary from From (the start
// included) and gives the start's model time.
func (f fetcher) atBoundaries(query string) (model.Matrix, model.Time, error) {
	m, err := f.read(query, f.q.From)
	return m, model.TimeFromUnixNano(f.q.From.UnixNano()), err
}

// endSteps runs query (each container's last end as a Unix time:
// kube-state-metrics' kube_pod_container_status_last_terminated_timestamp)
// at every window boundary from From, and gives each series the ends first
// seen in each window (endsPerWindow).
func (f fetcher) endSteps(query string) (model.Matrix, error) {
	m, start, err := f.atBoundaries(query)
	if err != nil {
		return nil, err
	}
	return endsPerWindow(m, start), nil
}

// endsPerWindow counts, per series of last-end times read at window
// boundaries, the ends first seen in each window, stamped at its end: a
// value other than the last one, or a series first seen after start (its
// container's first end). A value seen at start ended before the span.
// Two ends between two boundaries read as one.
func endsPerWindow(m model.Matrix, start model.Time) model.Matrix {
	var out model.Matrix
	for _, s := range m {
		o := &model.SampleStream{Metric: s.Metric}
		var last model.SampleValue
		have := false
		for _, p := range s.Values {
			if math.IsNaN(float64(p.Value)) {
				continue
			}
			if !have && p.Timestamp.Equal(start) {
				last, have = p.Value, true
				continue
			}
			if !have || p.Value != last {
				o.Values = append(o.Values, model.SamplePair{Timestamp: p.Timestamp, Value: 1})
			}
			last, have = p.Value, true
		}
		out = append(out, o)
	}
	return out
}

// mergeEnds gives each pod's restarts per window as the soonest of
// whole counts of its containers' ends, each source summed over the pod's
// containers: the restart counter's increases, ends first seen as a last
// termination (endsPerWindow), and kernel OOM kills. The kubelet counts a
// restart when it has started the next container, after the crash-loop
// back-off and the start itself, and writes an end as the container's
// last termination only then or in the back-off; cAdvisor sees an OOM
// kill when it happens. On the emulated e2e node the first OOM kills came
// 2 minutes before the first restarts (2026-12-07). Per pod the
// cumulative count is the largest of the sources' so far, so an end is
// counted once, when first seen anywhere, and a source that reads two
// ends as one is made up by the others.
func mergeEnds(sources ...model.Matrix) model.Matrix {
	byPod := map[model.LabelValue][]map[model.Time]float64{}
	times := map[model.LabelValue]map[model.Time]bool{}
	var order []model.LabelValue
	for i, m := range sources {
		for _, s := range m {
			pod := s.Metric["pod"]
			if byPod[pod] == nil {
				byPod[pod] = make([]map[model.Time]float64, len(sources))
				for j := range byPod[pod] {
					byPod[pod][j] = map[model.Time]float64{}
				}
				times[pod] = map[model.Time]bool{}
				order = append(order, pod)
			}
			for _, p := range s.Values {
				byPod[pod][i][p.Timestamp] += float64(p.Value)
				times[pod][p.Timestamp] = true
			}
		}
	}
	var out model.Matrix
	for _, pod := range order {
		c := byPod[pod]
		ts := slices.Sorted(maps.Keys(times[pod]))
		o := &model.SampleStream{Metric: model.Metric{"pod": pod}}
		cum := make([]float64, len(c))
		e := 0.0
		for _, t := range ts {
			best := 0.0
			for i := range c {
				cum[i] += c[i][t]
				best = max(best, cum[i])
			}
			o.Values = append(o.Values, model.SamplePair{Timestamp: t, Value: model.SampleValue(best - e)})
			e = best
		}
		out = append(out, o)
	}
	return out
}

// union is the arms in either set.
func union(a, b map[int]bool) map[int]bool {
	out := map[int]bool{}
	for k, v := range a {
		out[k] = out[k] || v
	}
	for k, v := range b {
		out[k] = out[k] || v
	}
	return out
}

// warmUp blanks each pod's windows that start before its start plus d:
// the API server knows live pods' starts, kube_pod_start_time gone ones'.
func (f fetcher) warmUp(arms []Arm, live map[string]time.Time, d, win time.Duration) error {
	started := map[string]time.Time{}
	for p, t := range live {
		started[p] = t
	}
	m, err := f.matrix(fmt.Sprintf(`max by (pod) (kube_pod_start_time{%s})`, f.sel), false)
	if err != nil {
		return err
	}
	for _, s := range m {
		p := string(s.Metric["pod"])
		if _, ok := started[p]; ok || len(s.Values) == 0 {
			continue
		}
		started[p] = time.Unix(int64(s.Values[len(s.Values)-1].Value), 0)
	}
	for ai := range arms {
		for pi, p := range arms[ai].Pods {
			t, ok := started[p]
			if !ok {
				continue
			}
			ws := arms[ai].Windows[pi]
			for i := range ws {
				if start := f.q.From.Add(time.Duration(i) * win); start.Before(t.Add(d)) {
					ws[i] = blank(ws[i], start.Add(win).After(t))
				}
			}
		}
	}
	return nil
}

// blank is a window of a pod's warm-up: its figures left out, its ends
// kept, and, if the pod existed in it, HasPod.
func blank(w Window, existed bool) Window {
	b := Window{Restarts: w.Restarts, OOMKills: w.OOMKills}
	if existed {
		b.Has = HasPod
	}
	return b
}

type fetcher struct {
	ctx  context.Context
	prom api.Client
	q    Query
	n    int
	sel  string
	warn func(string)
}

func (f fetcher) rng() string { return model.Duration(f.q.Window).String() }

// window maps an evaluation time (the end of a window) to its index.
func (f fetcher) window(ts model.Time) (int, bool) {
	d := ts.Time().Sub(f.q.From)
	i := int(math.Round(float64(d)/float64(f.q.Window))) - 1
	return i, i >= 0 && i < f.n
}

// matrix runs a range query over the windows: evaluated at each window's
// end; ranged ones look back one window.
func (f fetcher) matrix(query string, ranged bool) (model.Matrix, error) {
	return f.read(query, f.q.From.Add(f.q.Window))
}

// read runs query at every window boundary from start to the span's end,
// in chunks (promclient.ReadRange), and gives each series' points of
// every chunk, in time order, as one series: the series in the order the
// server first gave them, and each warning once.
func (f fetcher) read(query string, start time.Time) (model.Matrix, error) {
	r := promclient.Range{Query: query, Start: start, End: f.q.From.Add(time.Duration(f.n) * f.q.Window), Step: f.q.Window, ChunkSteps: f.q.chunkSteps}
	var out model.Matrix
	seen := map[string]*model.SampleStream{}
	warned := map[string]bool{}
	err := promclient.ReadRange(f.ctx, f.prom, r, func(c *promclient.Chunk) error {
		for _, w := range c.Warnings {
			if !warned[w] {
				warned[w] = true
				f.warn(fmt.Sprintf("prometheus: %s (query %s)", w, query))
			}
		}
		m, err := c.Matrix()
		if err != nil {
			return err
		}
		for _, s := range m {
			k := s.Metric.String()
			if o := seen[k]; o != nil {
				o.Values = append(o.Values, s.Values...)
				o.Histograms = append(o.Histograms, s.Histograms...)
				continue
			}
			seen[k] = s
			out = append(out, s)
		}
		return nil
	})
	return out, err
}

// addClassic turns per-pod cumulative bucket increases into per-window
// buckets.
func addClassic(ss model.Matrix, loc map[string][2]int, arms []Arm, f fetcher) error {
	type key struct {
		arm, pod, win int
	}
	cum := map[key]map[float64]float64{}
	for _, s := range ss {
		l, ok := loc[string(s.Metric["pod"])]
		if !ok {
			continue
		}
		le, err := strconv.ParseFloat(string(s.Metric["le"]), 64)
		if err != nil {
			return fmt.Errorf("bucket le=%q of %s: %w", s.Metric["le"], f.q.Latency, err)
		}
		for _, v := range s.Values {
			i, ok := f.window(v.Timestamp)
			if !ok || math.IsNaN(float64(v.Value)) {
				continue
			}
			k := key{l[0], l[1], i}
			if cum[k] == nil {
				cum[k] = map[float64]float64{}
			}
			cum[k][le] += float64(v.Value)
		}
	}
	for k, c := range cum {
		les := make([]float64, 0, len(c))
		for le := range c {
			les = append(les, le)
		}
		sort.Float64s(les)
		w := &arms[k.arm].Windows[k.pod][k.win]
		w.Has |= HasLatency
		lower, prev := 0.0, 0.0
		for _, le := range les {
			// increase() per bucket can dip below the one before it
			// (extrapolation, a scrape missed): never a negative count.
			cnt := math.Max(0, c[le]-prev)
			prev = math.Max(prev, c[le])
			w.Latency = append(w.Latency, Bucket{lower, le, cnt})
			lower = le
		}
		if len(les) > 0 && math.IsInf(les[len(les)-1], 1) {
			w.Requests += c[les[len(les)-1]]
		} else if len(les) > 0 {
			w.Requests += prev
		}
	}
	return nil
}

// addNative turns per-pod native histogram increases into buckets.
func addNative(ss model.Matrix, loc map[string][2]int, arms []Arm, f fetcher) bool {
	found := false
	for _, s := range ss {
		l, ok := loc[string(s.Metric["pod"])]
		if !ok {
			continue
		}
		for _, h := range s.Histograms {
			i, ok := f.window(h.Timestamp)
			if !ok || h.Histogram == nil {
				continue
			}
			found = true
			w := &arms[l[0]].Windows[l[1]][i]
			w.Has |= HasLatency
			w.Requests += float64(h.Histogram.Count)
			for _, b := range h.Histogram.Buckets {
				w.Latency = append(w.Latency, Bucket{math.Max(0, float64(b.Lower)), float64(b.Upper), float64(b.Count)})
			}
		}
	}
	return found
}

// ErrNoData is returned when the experiment has pods but Prometheus has
// none of their series.
var ErrNoData = errors.New("no series for the experiment's pods")

// sumOf and countOf name a histogram's or summary's series (spelt out,
// a name would read as a metric of its own).
func sumOf(name string) string   { return name + "_sum" }
func countOf(name string) string { return name + "_count" }

// Command fleetscale writes a real Prometheus TSDB holding what a
// cluster's Prometheus keeps for a fleet of Go containers (issue 52, item
// 3): cAdvisor's container series, client_golang's go_* series and
// kube-state-metrics' spec, owner, restart and HPA series, scraped every
// -interval over -days, with Deployments rolled out during the window
// (new pods, new series) and non-Go containers beside. It writes the
// blocks with Prometheus's own tsdb package, as promtool tsdb
// create-blocks-from does; at 5,000 containers over 7 days at 60 s that
// is over a billion samples, which no OpenMetrics text file holds
// reasonably.
//
// It is its own module (outside go.work), so that the Prometheus module
// and its dependencies stay out of gofit's. tools/groundtruth's
// BenchmarkFleetPrometheus runs it, starts Prometheus on the blocks and
// times gofit fleet against it (docs/results/fleet.md).
//
//	GOWORK=off go run . -out DIR -containers 5000 -days 7
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
)

// Params are what the data holds; written beside the blocks as
// fleetscale.json, so a cached directory is reused only for the same.
type Params struct {
	Containers int       `json:"containers"` // Go containers running at any time
	NonGo      int       `json:"non_go"`     // other containers running at any time
	Days       int       `json:"days"`
	Interval   string    `json:"interval"`
	End        time.Time `json:"end"`
	Seed       uint64    `json:"seed"`
	// Written after the blocks, so a directory without it is incomplete.
	Series  int   `json:"series,omitempty"`
	Samples int64 `json:"samples,omitempty"`
	Pods    int   `json:"pods,omitempty"` // Go pods over the window, rolled ones included
}

func main() {
	var p Params
	out := flag.String("out", "", "write the TSDB into `DIR` (created; must be empty or hold the same parameters)")
	flag.IntVar(&p.Containers, "containers", 5000, "Go containers running at any time (two pods a Deployment)")
	flag.IntVar(&p.NonGo, "non-go", 3000, "non-Go containers running at any time")
	flag.IntVar(&p.Days, "days", 7, "days of history")
	interval := flag.Duration("interval", time.Minute, "scrape interval")
	end := flag.String("end", "2026-11-08T00:00:00Z", "end of the data (RFC 3339)")
	flag.Uint64Var(&p.Seed, "seed", 1, "random seed")
	flag.Parse()
	if err := run(*out, &p, *interval, *end); err != nil {
		fmt.Fprintln(os.Stderr, "fleetscale:", err)
		os.Exit(1)
	}
}

func run(out string, p *Params, interval time.Duration, end string) error {
	switch {
	case out == "":
		return errors.New("-out: want a directory")
	case p.Containers < 2 || p.Containers%2 != 0:
		return fmt.Errorf("-containers %d: want an even number, at least 2", p.Containers)
	case p.NonGo < 0:
		return fmt.Errorf("-non-go %d: want 0 or more", p.NonGo)
	case p.Days < 1 || p.Days > 60:
		return fmt.Errorf("-days %d: want 1 to 60", p.Days)
	case interval < 5*time.Second || interval > 10*time.Minute:
		return fmt.Errorf("-interval %v: want 5s to 10m", interval)
	}
	t, err := time.Parse(time.RFC3339, end)
	if err != nil {
		return fmt.Errorf("-end: %w", err)
	}
	p.End, p.Interval = t.UTC().Truncate(24*time.Hour), interval.String()
	meta := filepath.Join(out, "fleetscale.json")
	if b, err := os.ReadFile(meta); err == nil {
		var have Params
		if json.Unmarshal(b, &have) == nil && have.Containers == p.Containers && have.NonGo == p.NonGo && have.Days == p.Days &&
			have.Interval == p.Interval && have.End.Equal(p.End) && have.Seed == p.Seed {
			fmt.Printf("fleetscale: %s already holds %d series, %d samples\n", out, have.Series, have.Samples)
			return nil
		}
		return fmt.Errorf("-out %s holds other data (%s): remove it first", out, b)
	}
	if ents, err := os.ReadDir(out); err == nil && len(ents) > 0 {
		return fmt.Errorf("-out %s: not empty and not a finished fleetscale directory: remove it first", out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	f := newFleet(p, interval)
	start := time.Now()
	// A block a day, written by as many workers as there are CPUs: each
	// has its own head, so a day's blocks share nothing.
	days := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	var samples int64
	for range max(1, min(runtime.GOMAXPROCS(0), p.Days)) {
		wg.Go(func() {
			for d := range days {
				n, err := f.writeDay(out, d)
				mu.Lock()
				samples += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	for d := range p.Days {
		days <- d
	}
	close(days)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	p.Series, p.Samples, p.Pods = f.series(), samples, f.goPods()
	b, _ := json.MarshalIndent(p, "", "  ")
	if err := os.WriteFile(meta, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("fleetscale: %d series, %d samples in %d daily blocks, %v\n", p.Series, p.Samples, p.Days, time.Since(start).Round(time.Second))
	return nil
}

// pod is one pod of the fleet, alive over [born, died).
type pod struct {
	ns, name, rs, deploy, container string
	goPod                           bool
	born, died                      int64   // ms
	cpu                             float64 // mean cores
	cpuReq, cpuLim                  float64 // cores; lim 0: none
	memLim                          float64 // bytes; 0: none
	live, outside                   float64 // bytes: live heap, memory outside the heap
	gogc, gomemlimit, gomaxprocs    float64
	phase                           float64 // of the daily cycle
	throttle                        float64 // share of periods throttled
	restartAt, oomAt                int64   // ms; 0 none
	hpa                             bool
	seed                            uint64
}

type fleet struct {
	p        *Params
	step     int64 // ms
	from, to int64 // ms
	pods     []pod
}

func newFleet(p *Params, interval time.Duration) *fleet {
	f := &fleet{p: p, step: interval.Milliseconds(), to: p.End.UnixMilli()}
	f.from = f.to - int64(p.Days)*24*3600*1000
	rng := rand.New(rand.NewPCG(p.Seed, 52))
	week := f.to - f.from
	for d := range p.Containers / 2 {
		ns := fmt.Sprintf("team-%02d", d%50)
		deploy := fmt.Sprintf("svc-%04d", d)
		// A third of the Deployments roll out once in the window: their
		// pods are replaced, as a release does.
		rollAt := int64(0)
		if d%3 == 0 {
			rollAt = f.from + week/10 + rng.Int64N(week*8/10)
		}
		cpu := 0.01 + 1.2*math.Pow(rng.Float64(), 2.5)
		req := []float64{0.05, 0.1, 0.25, 0.5, 1, 2}[rng.IntN(6)]
		lim := 0.0
		if rng.Float64() < 0.6 {
			lim = req * []float64{1, 2, 4}[rng.IntN(3)]
		}
		live := math.Exp(math.Log(6<<20) + rng.Float64()*math.Log(80)) // 6 MiB to 480 MiB
		outside := float64(8<<20) + rng.Float64()*float64(40<<20)
		memLim := math.Ceil((2.5*live+outside)/(64<<20)) * (64 << 20)
		gogc, gomemlimit := 100.0, math.MaxInt64*1.0
		if rng.Float64() < 0.3 {
			gomemlimit = 0.9 * memLim
		}
		gomaxprocs := 16.0
		if lim > 0 && rng.Float64() < 0.5 {
			gomaxprocs = math.Max(1, math.Ceil(lim))
		}
		hpa := d%10 == 0
		for _, gen := range []int{0, 1} {
			if gen == 1 && rollAt == 0 {
				break
			}
			born, died := f.from-rng.Int64N(30*24*3600*1000), f.to+1
			rs := fmt.Sprintf("%s-%08x", deploy, rng.Uint32())
			if rollAt != 0 {
				if gen == 0 {
					died = rollAt
				} else {
					born = rollAt
				}
			}
			for range 2 {
				pd := pod{ns: ns, rs: rs, deploy: deploy, container: "app", goPod: true, born: born, died: died,
					cpu: cpu * (0.9 + 0.2*rng.Float64()), cpuReq: req, cpuLim: lim, memLim: memLim,
					live: live * (0.9 + 0.2*rng.Float64()), outside: outside, gogc: gogc, gomemlimit: gomemlimit,
					gomaxprocs: gomaxprocs, phase: rng.Float64() * 2 * math.Pi, hpa: hpa, seed: rng.Uint64()}
				pd.name = fmt.Sprintf("%s-%05x", rs, rng.Uint32()&0xfffff)
				if lim > 0 && cpu > 0.7*lim {
					pd.throttle = math.Min(0.5, (cpu-0.7*lim)/lim)
				}
				if rng.Float64() < 0.02 {
					pd.restartAt = max(born, f.from) + rng.Int64N(max(1, min(died, f.to)-max(born, f.from)))
					if rng.Float64() < 0.5 {
						pd.oomAt = pd.restartAt
					}
				}
				f.pods = append(f.pods, pd)
			}
		}
	}
	for d := range p.NonGo {
		f.pods = append(f.pods, pod{ns: fmt.Sprintf("team-%02d", d%50), name: fmt.Sprintf("db-%04d-0", d), container: "db",
			born: f.from - 24*3600*1000, died: f.to + 1, cpu: 0.05 + 0.5*rng.Float64(), outside: float64(50<<20) + rng.Float64()*float64(500<<20),
			phase: rng.Float64() * 2 * math.Pi, seed: rng.Uint64()})
	}
	return f
}

func (f *fleet) goPods() int {
	n := 0
	for _, p := range f.pods {
		if p.goPod {
			n++
		}
	}
	return n
}

func (f *fleet) series() int {
	n, rs, hpas := 0, map[string]bool{}, map[string]bool{}
	for _, p := range f.pods {
		if !p.goPod {
			n += 2
			continue
		}
		n += len(goNames) + len(cadvisorNames) + 8
		if p.cpuLim > 0 {
			n++
		}
		rs[p.ns+"/"+p.rs] = true
		if p.hpa {
			hpas[p.ns+"/"+p.deploy] = true
		}
	}
	return n + len(rs) + 2*len(hpas)
}

var (
	cadvisorNames = []string{"container_cpu_usage_seconds_total", "container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total",
		"container_memory_working_set_bytes", "container_oom_events_total"}
	goNames = []string{"go_info", "go_sched_gomaxprocs_threads", "go_gc_gomemlimit_bytes", "go_gc_gogc_percent",
		"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "go_memstats_heap_alloc_bytes",
		"go_memstats_next_gc_bytes", "go_gc_heap_live_bytes", "go_cpu_classes_gc_total_cpu_seconds_total"}
)

// writeDay writes day d's block: every series of every pod alive then.
func (f *fleet) writeDay(out string, d int) (int64, error) {
	lo := f.from + int64(d)*24*3600*1000
	hi := lo + 24*3600*1000
	// The head takes a sample no older than half its block size before
	// its newest: a day's series are written one after the other, each
	// over the whole day, so the size is two days (the block holds one).
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), out, 2*24*3600*1000)
	if err != nil {
		return 0, err
	}
	defer w.Close()
	ctx := context.Background()
	var n int64
	seenRS, seenHPA := map[string]bool{}, map[string]bool{}
	for i := range f.pods {
		p := &f.pods[i]
		a, b := max(lo, p.born), min(hi, p.died)
		if a >= b {
			continue
		}
		// The first scrape at or after a, on the interval's grid.
		first := (a + f.step - 1) / f.step * f.step
		app := w.Appender(ctx)
		m, err := f.appendPod(app, p, first, b, (lo+f.step-1)/f.step*f.step, hi, seenRS, seenHPA)
		if err != nil {
			app.Rollback()
			return n, fmt.Errorf("day %d, pod %s/%s: %w", d, p.ns, p.name, err)
		}
		if err := app.Commit(); err != nil {
			return n, err
		}
		n += m
	}
	if _, err := w.Flush(ctx); err != nil {
		return n, fmt.Errorf("day %d: %w", d, err)
	}
	return n, nil
}

// appendPod appends pod p's samples in [from, to): each series' in
// turn, refs kept, so the head looks each up once.
// dayFrom and dayTo bound the day's series that outlive a pod (an HPA's).
func (f *fleet) appendPod(app storage.Appender, p *pod, from, to, dayFrom, dayTo int64, seenRS, seenHPA map[string]bool) (int64, error) {
	s := &podSeries{f: f, app: app, p: p, from: from, to: to}
	if !p.goPod {
		err := s.nonGo()
		return s.n, err
	}
	for _, step := range []func() error{s.cadvisor, s.goRuntime, s.kubeState} {
		if err := step(); err != nil {
			return s.n, err
		}
	}
	err := s.owners(seenRS, seenHPA, dayFrom, dayTo)
	return s.n, err
}

// valueAt is a series' value at time t (ms); rng is the series' own.
type valueAt = func(t int64, rng *rand.Rand) float64

// gauge is a constant series.
func gauge(v float64) valueAt { return func(int64, *rand.Rand) float64 { return v } }

// podSeries appends one pod's series over [from, to), counting the
// samples in n.
type podSeries struct {
	f        *fleet
	app      storage.Appender
	p        *pod
	from, to int64
	n        int64
}

func (s *podSeries) put(ls labels.Labels, value valueAt, salt uint64) error {
	return s.f.put(s.app, &s.n, s.p.seed, ls, value, salt, s.from, s.to)
}

// nonGo appends a non-Go container's: cAdvisor's CPU and working set.
func (s *podSeries) nonGo() error {
	p := s.p
	if err := s.put(p.cadvisorLabels("container_cpu_usage_seconds_total"), func(t int64, _ *rand.Rand) float64 { return math.Max(0, p.cpuAt(t)) }, 1); err != nil {
		return err
	}
	return s.put(p.cadvisorLabels("container_memory_working_set_bytes"), func(t int64, rng *rand.Rand) float64 { return p.outside * (0.95 + 0.1*rng.Float64()) }, 2)
}

// cadvisor appends a Go container's cAdvisor series.
func (s *podSeries) cadvisor() error {
	p := s.p
	ooms := func(t int64, _ *rand.Rand) float64 {
		if p.oomAt != 0 && t >= p.oomAt {
			return 1
		}
		return 0
	}
	for _, c := range []struct {
		name  string
		value valueAt
	}{
		{"container_cpu_usage_seconds_total", func(t int64, _ *rand.Rand) float64 { return math.Max(0, p.cpuAt(t)) }},
		{"container_cpu_cfs_periods_total", func(t int64, _ *rand.Rand) float64 { return math.Floor(p.secs(t) * 10) }},
		{"container_cpu_cfs_throttled_periods_total", func(t int64, _ *rand.Rand) float64 {
			return math.Floor(p.secs(t) * 10 * p.throttle)
		}},
		{"container_memory_working_set_bytes", func(t int64, _ *rand.Rand) float64 {
			l := p.heapLive(t)
			return p.outside + l + (p.goal(l)-l)*p.cycle(t)
		}},
		{"container_oom_events_total", ooms},
	} {
		if c.name != "container_cpu_usage_seconds_total" && c.name != "container_memory_working_set_bytes" && c.name != "container_oom_events_total" && p.cpuLim == 0 {
			continue // cAdvisor has CFS series only under a quota
		}
		if err := s.put(p.cadvisorLabels(c.name), c.value, hash(c.name)); err != nil {
			return err
		}
	}
	return nil
}

// goRuntime appends client_golang's go_* series.
func (s *podSeries) goRuntime() error {
	p := s.p
	for _, g := range []struct {
		name  string
		extra []string
		value valueAt
	}{
		{"go_info", []string{"version", "go1.25.4"}, gauge(1)},
		{"go_sched_gomaxprocs_threads", nil, gauge(p.gomaxprocs)},
		{"go_gc_gomemlimit_bytes", nil, gauge(p.gomemlimit)},
		{"go_gc_gogc_percent", nil, gauge(p.gogc)},
		{"go_memstats_heap_alloc_bytes", nil, func(t int64, _ *rand.Rand) float64 { l := p.heapLive(t); return l + (p.goal(l)-l)*p.cycle(t) }},
		{"go_memstats_heap_inuse_bytes", nil, func(t int64, _ *rand.Rand) float64 {
			l := p.heapLive(t)
			return 1.05 * (l + (p.goal(l)-l)*p.cycle(t))
		}},
		{"go_memstats_heap_idle_bytes", nil, func(t int64, _ *rand.Rand) float64 { return 0.4 * p.heapLive(t) }},
		{"go_memstats_heap_released_bytes", nil, func(t int64, _ *rand.Rand) float64 { return 0.3 * p.heapLive(t) }},
		{"go_memstats_next_gc_bytes", nil, func(t int64, _ *rand.Rand) float64 { return p.goal(p.heapLive(t)) }},
		{"go_gc_heap_live_bytes", nil, func(t int64, _ *rand.Rand) float64 { return p.heapLive(t) }},
		{"go_cpu_classes_gc_total_cpu_seconds_total", nil, func(t int64, _ *rand.Rand) float64 { return 0.08 * math.Max(0, p.cpuAt(t)) }},
	} {
		if err := s.put(p.goLabels(g.name, g.extra...), g.value, hash(g.name)); err != nil {
			return err
		}
	}
	return nil
}

// kubeState appends kube-state-metrics' series of the pod.
func (s *podSeries) kubeState() error {
	p := s.p
	restarts := func(t int64, _ *rand.Rand) float64 {
		if p.restartAt != 0 && t >= p.restartAt {
			return 1
		}
		return 0
	}
	type series struct {
		ls    labels.Labels
		value valueAt
	}
	ksm := []series{
		{p.ksmLabels("kube_pod_container_resource_requests", "container", p.container, "node", "node-1", "resource", "cpu", "unit", "core"), gauge(p.cpuReq)},
		{p.ksmLabels("kube_pod_container_resource_requests", "container", p.container, "node", "node-1", "resource", "memory", "unit", "byte"), gauge(p.memLim / 2)},
		{p.ksmLabels("kube_pod_container_resource_limits", "container", p.container, "node", "node-1", "resource", "memory", "unit", "byte"), gauge(p.memLim)},
		{p.ksmLabels("kube_pod_container_status_restarts_total", "container", p.container, "uid", p.name), restarts},
		{p.ksmLabels("kube_pod_created", "uid", p.name), gauge(float64(p.born / 1000))},
		{p.ksmLabels("kube_pod_owner", "owner_kind", "ReplicaSet", "owner_name", p.rs, "owner_is_controller", "true", "uid", p.name), gauge(1)},
		{p.ksmLabels("kube_pod_status_ready", "condition", "true", "uid", p.name), gauge(1)},
		{p.ksmLabels("kube_pod_info", "node", "node-1", "uid", p.name, "created_by_kind", "ReplicaSet", "created_by_name", p.rs), gauge(1)},
	}
	if p.cpuLim > 0 {
		ksm = append(ksm, series{p.ksmLabels("kube_pod_container_resource_limits", "container", p.container, "node", "node-1", "resource", "cpu", "unit", "core"), gauge(p.cpuLim)})
	}
	for k, ks := range ksm {
		if err := s.put(ks.ls, ks.value, uint64(100+k)); err != nil {
			return err
		}
	}
	return nil
}

// owners appends the pod's ReplicaSet's owner and its Deployment's HPA,
// once a day's block each (seenRS, seenHPA): kube-state-metrics' own
// series carry no pod. An HPA's span the day's, [dayFrom, dayTo).
func (s *podSeries) owners(seenRS, seenHPA map[string]bool, dayFrom, dayTo int64) error {
	p := s.p
	rsKey := p.ns + "/" + p.rs
	if !seenRS[rsKey] {
		seenRS[rsKey] = true
		ls := labels.FromStrings("__name__", "kube_replicaset_owner", "job", "kube-state-metrics", "instance", "kube-state-metrics:8080",
			"namespace", p.ns, "replicaset", p.rs, "owner_kind", "Deployment", "owner_name", p.deploy, "owner_is_controller", "true")
		if err := s.put(ls, gauge(1), 200); err != nil {
			return err
		}
	}
	if hk := p.ns + "/" + p.deploy; p.hpa && !seenHPA[hk] {
		seenHPA[hk] = true
		for k, ls := range []labels.Labels{
			labels.FromStrings("__name__", "kube_horizontalpodautoscaler_info", "job", "kube-state-metrics", "instance", "kube-state-metrics:8080",
				"namespace", p.ns, "horizontalpodautoscaler", p.deploy, "scaletargetref_kind", "Deployment", "scaletargetref_name", p.deploy),
			labels.FromStrings("__name__", "kube_horizontalpodautoscaler_spec_target_metric", "job", "kube-state-metrics", "instance", "kube-state-metrics:8080",
				"namespace", p.ns, "horizontalpodautoscaler", p.deploy, "metric_name", "cpu", "metric_target_type", "utilization"),
		} {
			if err := s.f.put(s.app, &s.n, p.seed, ls, gauge([]float64{1, 70}[k]), uint64(300+k), dayFrom, dayTo); err != nil {
				return err
			}
		}
	}
	return nil
}

// cadvisorLabels are the labels of cAdvisor's series name of the pod.
func (p *pod) cadvisorLabels(name string) labels.Labels {
	return labels.FromStrings("__name__", name, "job", "kubelet", "metrics_path", "/metrics/cadvisor", "container", p.container,
		"image", "registry.example.com/"+p.container+":v1", "id", "/kubepods/burstable/pod"+p.name+"/"+p.container, "namespace", p.ns, "pod", p.name)
}

// goLabels are the labels of the pod's own series name (client_golang's).
func (p *pod) goLabels(name string, extra ...string) labels.Labels {
	return labels.FromStrings(append([]string{"__name__", name, "job", "pods", "container", p.container, "instance", p.name + ":8080", "namespace", p.ns, "pod", p.name}, extra...)...)
}

// ksmLabels are the labels of kube-state-metrics' series name of the pod.
func (p *pod) ksmLabels(name string, extra ...string) labels.Labels {
	return labels.FromStrings(append([]string{"__name__", name, "job", "kube-state-metrics", "instance", "kube-state-metrics:8080", "namespace", p.ns, "pod", p.name}, extra...)...)
}

// secs is the pod's age at t, in seconds.
func (p *pod) secs(t int64) float64 { return float64(t-p.born) / 1000 }

// load is the demand through the day: a daily cycle with noise, the same
// for every series of the pod at a time (u is deterministic in t).
func (p *pod) load(t int64) float64 {
	h := float64(t%(24*3600*1000)) / (24 * 3600 * 1000)
	noise := (u(p.seed, t, 1) + u(p.seed, t, 2) + u(p.seed, t, 3) - 1.5) * 2 * 0.15
	return math.Max(0.05, 1+0.5*math.Sin(2*math.Pi*h+p.phase)+noise)
}

// cycle is where the heap is between its live part and the GC's goal at
// a scrape, shared by the series that see it.
func (p *pod) cycle(t int64) float64 { return u(p.seed, t, 4) }

// cpuAt is the CPU counter: the mean demand's integral.
func (p *pod) cpuAt(t int64) float64 {
	h := float64(t%(24*3600*1000)) / (24 * 3600 * 1000)
	return p.cpu * (p.secs(t) + 0.5*24*3600/(2*math.Pi)*(math.Cos(p.phase)-math.Cos(2*math.Pi*h+p.phase)))
}

// heapLive is the live heap at t, growing with the load.
func (p *pod) heapLive(t int64) float64 { return p.live * math.Pow(p.load(t), 0.3) }

// goal is the GC's goal for a live heap: GOGC's, or less under GOMEMLIMIT.
func (p *pod) goal(live float64) float64 {
	return math.Min(live*(1+p.gogc/100), math.Max(live, p.gomemlimit-p.outside))
}

// put appends one series' samples on the grid over [from, to), its ref
// kept, so the head looks the series up once.
func (f *fleet) put(app storage.Appender, n *int64, seed uint64, ls labels.Labels, value func(t int64, rng *rand.Rand) float64, salt uint64, from, to int64) error {
	rng := rand.New(rand.NewPCG(seed, salt^uint64(from)))
	// Sizes in bytes are whole pages, as the kernel and the runtime
	// count them (and as XOR chunks compress them).
	page := strings.HasSuffix(ls.Get("__name__"), "_bytes")
	var ref storage.SeriesRef
	for t := from; t < to; t += f.step {
		v := value(t, rng)
		if page && v < 1<<62 {
			v = math.Round(v/4096) * 4096
		}
		var err error
		if ref, err = app.Append(ref, ls, t, v); err != nil {
			return fmt.Errorf("%s at %d: %w", ls, t, err)
		}
		*n++
	}
	return nil
}

// u is a uniform number in [0, 1) fixed by seed, t and k (splitmix64).
func u(seed uint64, t int64, k uint64) float64 {
	z := seed + uint64(t)*0x9e3779b97f4a7c15 + k*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h
}

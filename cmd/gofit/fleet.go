package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/fleet"
)

// exitFleetFailOn is the exit status when a finding hits --fail-on (as
// `gofit experiment report --fail-on`).
const exitFleetFailOn = 3

// promDuration is a flag in Prometheus's duration syntax (7d, 12h, 90m).
type promDuration struct{ d *time.Duration }

func (p promDuration) String() string {
	if p.d == nil {
		return ""
	}
	return model.Duration(*p.d).String()
}

func (p promDuration) Set(s string) error {
	d, err := model.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 7d, 12h or 90m")
	}
	*p.d = time.Duration(d)
	return nil
}

// parse parses the flags of a command that reads Prometheus: it takes no
// arguments, and --prometheus is required.
func (p *promFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case p.url == "":
		return fmt.Errorf("%w: --prometheus is required", errUsage)
	}
	return nil
}

// checkStep checks --step against --since: at least a second, at most
// --since, and at most 100000 steps in it.
func checkStep(since, step time.Duration) error {
	switch {
	case step < time.Second || step > since:
		return fmt.Errorf("%w: --step %v: want at least 1s and at most --since %v", errUsage, model.Duration(step), model.Duration(since))
	case since/step > 100000:
		return fmt.Errorf("%w: --since %v at --step %v is %d steps: want at most 100000 (raise --step)", errUsage, model.Duration(since), model.Duration(step), since/step)
	}
	return nil
}

func runFleet(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("fleet", stderr)
	pf := addPromFlags(fs)
	since, step, minSpan := 7*24*time.Hour, 5*time.Minute, 24*time.Hour
	fs.Var(promDuration{&since}, "since", "read the last `DURATION` (7d, 36h, ...)")
	fs.Var(promDuration{&step}, "step", "resolution of the series: at least two scrape intervals (`DURATION`)")
	end := fs.String("end", "", "end `TIME` (RFC 3339; default now)")
	ns := fs.String("namespace", "", "only this `NAMESPACE` (default all)")
	selector := fs.String("selector", "", "only pods whose labels match `SELECTOR` (k=v,k!=v; through kube_pod_labels)")
	cluster := fs.String("cluster", "", "only series whose cluster label is `NAME` (Thanos, Mimir)")
	clusterLabel := fs.String("cluster-label", "cluster", "the `LABEL` that names the cluster")
	maxContainers := fs.Int("max-containers", 10000, "refuse to read more than `N` Go containers")
	concurrency := fs.Int("prometheus-concurrency", 2, "range queries in flight at once (`N`, 1 to 16): Prometheus evaluates each on one core")
	fs.Var(promDuration{&minSpan}, "min-span", "the least `DURATION` of history a figure rests on")
	minSamples := fs.Int("min-samples", 60, "the least samples (pod-steps) a figure rests on")
	cpuReqQ := fs.Float64("cpu-request-percentile", 0.95, "the CPU request covers this `QUANTILE` of CPU demand over pod-steps")
	cpuLimQ := fs.Float64("cpu-limit-percentile", 0.99, "the CPU limit covers this `QUANTILE` of CPU demand (with a 10% margin)")
	memQ := fs.Float64("memory-percentile", 0.99, "memory rests on this `QUANTILE` of the live heap and of the memory outside it over pod-steps (1: the peak)")
	cpuLimit := fs.String("cpu-limit", fleet.CPULimitPercentile, "how to set the CPU limit: `MODE` percentile (of the steps' mean demand, --cpu-limit-percentile), burst (of each step's highest 1-minute demand: one more, costlier query), none (the patches remove it) or keep")
	allowHPA := fs.Bool("allow-hpa", false, "size CPU and memory even where an HPA scales on their utilisation (as KRR's --allow-hpa)")
	asJSON := fs.Bool("json", false, "print results.json to stdout instead of the table")
	out := fs.String("out", "", "write results.json, report.html and patches/ into `DIR`")
	failOn := fs.String("fail-on", "", "exit 3 when a container has a finding with one of these `CODES` (comma-separated; see docs/fleet.md)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit fleet --prometheus URL [flags]\n\nLists every Go container Prometheus has series for, with its findings and a Go-aware\nrecommendation (requests, limits, GOMAXPROCS, GOMEMLIMIT, GOGC) beside KRR's and VPA's\non the same data. Nothing is applied. See docs/fleet.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := pf.parse(fs, args); err != nil {
		return err
	}
	if since <= 0 {
		return fmt.Errorf("%w: --since %v: want more than 0", errUsage, model.Duration(since))
	}
	if err := checkStep(since, step); err != nil {
		return err
	}
	switch {
	case *maxContainers < 1:
		return fmt.Errorf("%w: --max-containers %d: want at least 1", errUsage, *maxContainers)
	case *concurrency < 1 || *concurrency > 16:
		return fmt.Errorf("%w: --prometheus-concurrency %d: want 1 to 16", errUsage, *concurrency)
	case *minSamples < 1:
		return fmt.Errorf("%w: --min-samples %d: want at least 1", errUsage, *minSamples)
	}
	for _, q := range []struct {
		flag string
		v    float64
	}{{"cpu-request-percentile", *cpuReqQ}, {"cpu-limit-percentile", *cpuLimQ}, {"memory-percentile", *memQ}} {
		if !(q.v > 0 && q.v <= 1) {
			return fmt.Errorf("%w: --%s %v: want more than 0 and at most 1 (0.99 is p99)", errUsage, q.flag, q.v)
		}
	}
	if *cpuLimQ < *cpuReqQ {
		return fmt.Errorf("%w: --cpu-limit-percentile %v: want at least --cpu-request-percentile %v", errUsage, *cpuLimQ, *cpuReqQ)
	}
	switch *cpuLimit {
	case fleet.CPULimitPercentile, fleet.CPULimitBurst, fleet.CPULimitNone, fleet.CPULimitKeep:
	default:
		return fmt.Errorf("%w: --cpu-limit %q: want percentile, burst, none or keep", errUsage, *cpuLimit)
	}
	if *selector != "" {
		if _, err := fleet.ParseSelector(*selector); err != nil {
			return fmt.Errorf("%w: --selector: %v", errUsage, err)
		}
	}
	var codes []string
	for _, c := range strings.Split(*failOn, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if !slices.Contains(fleet.Codes(), c) {
			return fmt.Errorf("%w: --fail-on %q: %q is not a finding code (%s)", errUsage, *failOn, c, strings.Join(fleet.Codes(), ", "))
		}
		codes = append(codes, c)
	}
	to := time.Now()
	if *end != "" {
		var err error
		if to, err = time.Parse(time.RFC3339, *end); err != nil {
			return fmt.Errorf("%w: --end: %v", errUsage, err)
		}
	}
	to = to.Truncate(step)
	pc, err := pf.raw(0) // promclient's default: a week's range queries take a while
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	in, err := fleet.Fetch(ctx, pc, fleet.Query{
		From: to.Add(-since), To: to, Step: step, Namespace: *ns, Selector: *selector, Cluster: *cluster,
		ClusterLabel: *clusterLabel, MaxContainers: *maxContainers, Concurrency: *concurrency,
		Found:    func(_, steps int) { fitHeap(steps, *concurrency) },
		CPUBurst: *cpuLimit == fleet.CPULimitBurst,
	})
	if err != nil {
		return err
	}
	res := fleet.Analyze(in, fleet.Options{MinSpan: minSpan, MinSamples: *minSamples, CPURequestPercentile: *cpuReqQ,
		CPULimitPercentile: *cpuLimQ, MemoryPercentile: *memQ, CPULimit: *cpuLimit, AllowHPA: *allowHPA})
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
	} else {
		fleet.WriteTable(stdout, res)
	}
	if *out != "" {
		files, skipped, err := fleet.WriteFiles(*out, res)
		if err != nil {
			return err
		}
		w := stdout
		if *asJSON {
			w = stderr
		}
		fmt.Fprintf(w, "wrote %d files into %s (results.json, report.html, patches/, kustomize/)\n", len(files), *out)
		for _, s := range skipped {
			fmt.Fprintf(w, "patches: %s\n", s)
		}
	}
	if bad := fleet.Failing(res, codes); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintf(stderr, "gofit fleet: --fail-on %s: %s\n", *failOn, b)
		}
		return exitError{exitFleetFailOn}
	}
	return nil
}

// fitHeap bounds gofit fleet's own heap to what the fleet's series need
// (fleet.HeapGoal), unless GOMEMLIMIT says otherwise or a lower limit is
// already set (gofit's own fit, in a container): the tool fits itself,
// as it asks of the services it reads.
func fitHeap(steps, inFlight int) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if goal := fleet.HeapGoal(steps, inFlight); goal < debug.SetMemoryLimit(-1) {
		debug.SetMemoryLimit(goal)
	}
}

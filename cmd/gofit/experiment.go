//go:build !nokube

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/experiment"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/kube/admission"
)

// exitFailOn is the exit status of a report whose verdicts hit --fail-on.
const exitFailOn = 3

// runExperiment is `gofit experiment`: report, guard or load.
func runExperiment(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(stderr, "Usage: gofit experiment report [flags]\n       gofit experiment guard [flags]\n       gofit experiment load [flags] URL...\n\nreport judges the arms of an experiment on live traffic from Prometheus (docs/experiment.md);\nguard judges every running experiment every --interval and stops a harmful arm;\nload sends steady traffic to a workload's pods where there is none (a test cluster).\nRun 'gofit experiment report -h', 'gofit experiment guard -h' or 'gofit experiment load -h' for their flags.")
		return flag.ErrHelp
	}
	if len(args) > 0 && args[0] == "load" {
		return runExperimentLoad(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "guard" {
		return runExperimentGuard(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "report" {
		return fmt.Errorf("%w: want `gofit experiment report [flags]`, `gofit experiment guard [flags]` or `gofit experiment load [flags] URL...`", errUsage)
	}
	return runExperimentReport(args[1:], stdout, stderr)
}

// reportFlags are `gofit experiment report`'s flags.
type reportFlags struct {
	fs                              *flag.FlagSet
	prom                            *promFlags
	match                           *matchFlag
	ns, name, workload              string
	since                           time.Duration
	from, to                        string
	window                          time.Duration
	latency, errMatch, control, out string
	kubeconfig                      string
	noKube                          bool
	failOn                          string
	resamples                       int
	seed                            int64
	warmUp, lookEvery, planned      time.Duration
	alpha                           float64
}

func newReportFlags(stderr io.Writer) *reportFlags {
	fs := newFlags("experiment report", stderr)
	f := &reportFlags{fs: fs, prom: addPromFlags(fs), match: addMatchFlag(fs)}
	fs.StringVar(&f.ns, "namespace", "", "the experiment's `NAMESPACE` (required)")
	fs.StringVar(&f.name, "name", "", "the experiment's `NAME` (its spec's name; required)")
	fs.StringVar(&f.workload, "workload", "", "the experiment's `WORKLOAD` (Deployment/web, StatefulSet/db; \"<none>\" for pods without a controller); needed only when several workloads in the namespace run an experiment of this name")
	fs.DurationVar(&f.since, "since", 0, "report on the last `DURATION`, a span that slides (default: from the experiment's start, its Lease's run start, so that the verdicts hold however often the report is run)")
	fs.StringVar(&f.from, "from", "", "start `TIME` (RFC 3339), with --to")
	fs.StringVar(&f.to, "to", "", "end `TIME` (RFC 3339), with --from")
	fs.DurationVar(&f.window, "window", time.Minute, "length of the paired windows: at least 2 scrape intervals")
	fs.StringVar(&f.latency, "latency", "http_request_duration_seconds", "the service's latency histogram `METRIC` (seconds; classic or native)")
	fs.StringVar(&f.errMatch, "errors", `code=~"5.."`, "PromQL label `MATCHER` that selects failed requests among the histogram's series")
	fs.StringVar(&f.control, "control", "", "the control `ARM` (default: the spec's control, else the first arm)")
	fs.StringVar(&f.out, "out", "", "write report.html and results.json into `DIR`")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig `FILE` for the live pods (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
	fs.BoolVar(&f.noKube, "no-kube", false, "do not ask the API server: pods only from Prometheus's kube_pod_labels")
	fs.StringVar(&f.failOn, "fail-on", "", "exit 3 when a verdict is one of these `KINDS` (comma-separated: harmful, worse, undecided, better, same)")
	fs.IntVar(&f.resamples, "resamples", 2000, "bootstrap resamples per interval")
	fs.Int64Var(&f.seed, "seed", 1, "bootstrap seed")
	fs.DurationVar(&f.warmUp, "warm-up", time.Minute, "leave out each pod's first `DURATION` after it started (caches, connection pools, the heap growing)")
	fs.DurationVar(&f.lookEvery, "look-every", 5*time.Minute, "the looks' spacing, for counting them (the verdicts hold at any number of looks)")
	fs.DurationVar(&f.planned, "planned", 2*time.Hour, "the experiment's planned `DURATION` (its maxDuration): where the anytime-valid intervals are tightest")
	fs.Float64Var(&f.alpha, "alpha", 0.05, "chance of any false quality verdict at any look, over every metric and arm")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit experiment report --prometheus URL --namespace NS --name NAME [flags]\n\nJudges each arm of an experiment (pods the webhook gave arms with the gofit.dev/experiment\nannotation) against its control, from Prometheus over paired time windows. See docs/experiment.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	return f
}

// check checks the flags together; it gives the --fail-on kinds and the
// sequential plan of the looks.
func (f *reportFlags) check() ([]string, *experiment.Sequential, error) {
	if f.fs.NArg() > 0 {
		return nil, nil, fmt.Errorf("%w: unexpected argument %q", errUsage, f.fs.Arg(0))
	}
	switch {
	case f.prom.url == "":
		return nil, nil, fmt.Errorf("%w: --prometheus is required", errUsage)
	case f.ns == "" || f.name == "":
		return nil, nil, fmt.Errorf("%w: --namespace and --name are required", errUsage)
	case f.window < time.Second:
		return nil, nil, fmt.Errorf("%w: --window %v: want at least 1s", errUsage, f.window)
	case f.resamples < 100:
		return nil, nil, fmt.Errorf("%w: --resamples %d: want at least 100", errUsage, f.resamples)
	case f.warmUp < 0:
		return nil, nil, fmt.Errorf("%w: --warm-up %v: want 0 or more", errUsage, f.warmUp)
	case f.since < 0:
		return nil, nil, fmt.Errorf("%w: --since %v: want more than 0 (or leave it out: from the experiment's start)", errUsage, f.since)
	case f.since > 0 && f.from != "":
		return nil, nil, fmt.Errorf("%w: --since and --from: give one span", errUsage)
	case f.noKube && f.since == 0 && f.from == "":
		return nil, nil, fmt.Errorf("%w: --no-kube: the experiment's start is read from the API server; give --since, or --from and --to", errUsage)
	case (f.from == "") != (f.to == ""):
		return nil, nil, fmt.Errorf("%w: --from and --to go together", errUsage)
	}
	if w := f.workload; w != "" && w != experiment.NoController {
		if kind, n, ok := strings.Cut(w, "/"); !ok || kind == "" || n == "" || strings.Contains(n, "/") {
			return nil, nil, fmt.Errorf("%w: --workload %q: want KIND/NAME, such as Deployment/web, or %q", errUsage, w, experiment.NoController)
		}
	}
	var kinds []string
	for _, k := range strings.Split(f.failOn, ",") {
		switch k = strings.TrimSpace(k); k {
		case "":
		case experiment.Harmful, "worse", "better", "same", "undecided":
			kinds = append(kinds, k)
		default:
			return nil, nil, fmt.Errorf("%w: --fail-on %q: %q is not harmful, worse, better, same or undecided", errUsage, f.failOn, k)
		}
	}
	seq, err := experiment.NewSequential(experiment.Looks{Every: f.lookEvery, Planned: f.planned, Alpha: f.alpha})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --look-every, --planned or --alpha: %v", errUsage, err)
	}
	return kinds, seq, nil
}

// span is the report's span from the flags, and the note that says what
// its verdicts hold over; a zero start is the experiment's, from the API
// server. The anytime-valid intervals hold over every report whose span
// begins at one fixed start, however often they are run.
func (f *reportFlags) span() (start, end time.Time, note string, err error) {
	end = time.Now().Truncate(f.window)
	switch {
	case f.from != "":
		if start, err = time.Parse(time.RFC3339, f.from); err != nil {
			return start, end, "", fmt.Errorf("%w: --from: %v", errUsage, err)
		}
		if end, err = time.Parse(time.RFC3339, f.to); err != nil {
			return start, end, "", fmt.Errorf("%w: --to: %v", errUsage, err)
		}
		note = "span from --from: the verdicts of every report with this --from hold together, at any look"
	case f.since > 0:
		start = end.Add(-f.since)
		note = fmt.Sprintf("span of the last %v, which slides: this report is one look at its own span, valid read once; reports over sliding spans are not one sequence (leave out --since to count from the experiment's start)", f.since)
	}
	return start, end, note, nil
}

// runExperimentReport is `gofit experiment report`: the experiment's
// pods and series over its span, judged, written, and checked against
// --fail-on.
func runExperimentReport(args []string, stdout, stderr io.Writer) error {
	f := newReportFlags(stderr)
	if err := parseFlags(f.fs, args); err != nil {
		return err
	}
	kinds, seq, err := f.check()
	if err != nil {
		return err
	}
	start, end, spanNote, err := f.span()
	if err != nil {
		return err
	}
	pc, err := f.prom.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var pods experiment.PodSource
	var api experiment.APIServer
	if !f.noKube {
		cs, err := kubeClient(f.kubeconfig)
		if err != nil {
			return fmt.Errorf("%w (or --no-kube)", err)
		}
		api = experiment.APIServer{Client: cs}
		pods = api
	}
	if start.IsZero() {
		s, how, err := api.Start(ctx, f.ns, f.name, f.workload)
		if err != nil {
			return err
		}
		start = s.Truncate(time.Second)
		spanNote = "span from the experiment's start, " + how + ": its verdicts hold however often the report is run"
	}
	if !end.After(start) {
		return fmt.Errorf("%w: the span from %v to %v is empty", errUsage, start, end)
	}
	in, err := experiment.Fetch(ctx, pc, pods, experiment.Query{
		Namespace: f.ns, Name: f.name, Workload: f.workload, From: start, To: end, Window: f.window, Latency: f.latency,
		ErrorMatcher: f.errMatch, Control: f.control, Resamples: f.resamples, Seed: f.seed, Matchers: *f.match, WarmUp: f.warmUp,
	})
	if err != nil {
		return err
	}
	if in.Seq, err = f.specPlan(seq, in.Planned); err != nil {
		return err
	}
	in.Notes = append(in.Notes, spanNote)
	res, err := experiment.Analyze(in)
	if err != nil {
		return err
	}
	return f.write(res, kinds, stdout, stderr)
}

// specPlan is the looks' plan with the spec's maxDuration (planned) as
// the planned length, unless --planned says otherwise.
func (f *reportFlags) specPlan(seq *experiment.Sequential, planned time.Duration) (*experiment.Sequential, error) {
	plannedSet := false
	f.fs.Visit(func(fl *flag.Flag) { plannedSet = plannedSet || fl.Name == "planned" })
	if plannedSet || planned <= 0 || planned == f.planned {
		return seq, nil
	}
	seq, err := experiment.NewSequential(experiment.Looks{Every: f.lookEvery, Planned: max(planned, f.lookEvery), Alpha: f.alpha})
	if err != nil {
		return nil, fmt.Errorf("maxDuration %v of experiment %s: %w", planned, f.name, err)
	}
	return seq, nil
}

// write prints the summary, writes the files to --out, and fails with
// exitFailOn where a verdict is one of --fail-on's kinds.
func (f *reportFlags) write(res *experiment.Results, kinds []string, stdout, stderr io.Writer) error {
	experiment.WriteSummary(stdout, res)
	if f.out != "" {
		files, err := experiment.WriteFiles(f.out, res)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", strings.Join(files, ", "))
	}
	if bad := experiment.Failing(res, kinds); len(bad) > 0 {
		for _, v := range bad {
			fmt.Fprintf(stderr, "gofit experiment report: --fail-on %s: arm %s %s is %s\n", f.failOn, v.Arm, v.Metric, v.Verdict)
		}
		return exitError{exitFailOn}
	}
	return nil
}

// runExperimentLoad sends an open-loop load, spread evenly over the URLs
// (a workload's pods, by address), and prints one line per --every: the
// traffic an experiment needs where there is no real traffic, such as a
// test cluster (the e2e node's experiment runs it in a pod).
func runExperimentLoad(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("experiment load", stderr)
	rps := fs.Float64("rps", 20, "requests per `SECOND` in all, spread evenly over the URLs")
	duration := fs.Duration("duration", 0, "stop after `DURATION` (0: run until interrupted or terminated)")
	every := fs.Duration("every", 30*time.Second, "print a line of figures every `INTERVAL`")
	seed := fs.Int64("seed", 1, "seed of the order requests go to the URLs in")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit experiment load [flags] URL...\n\nSends GET requests at a fixed rate (open loop), spread evenly over the URLs (an experiment's\npods), and prints requests, errors, rate and latency every --every. See docs/experiment.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return fmt.Errorf("%w: want at least one URL to load", errUsage)
	case !(*rps > 0) || *rps > 100000:
		return fmt.Errorf("%w: --rps %v: want more than 0 and at most 100000", errUsage, *rps)
	case *duration < 0:
		return fmt.Errorf("%w: --duration %v: want 0 (until stopped) or more", errUsage, *duration)
	case *every < 100*time.Millisecond:
		return fmt.Errorf("%w: --every %v: want at least 100ms", errUsage, *every)
	}
	var targets []load.Target
	for _, a := range fs.Args() {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: URL %q: want http:// or https:// and a host", errUsage, a)
		}
		targets = append(targets, load.Get(a, nil)...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	l := load.NewLoader(load.MaxOpenInFlight, nil)
	defer l.Close()
	mix := load.NewMix(targets, *seed)
	fmt.Fprintf(stdout, "gofit experiment load: %g requests/s over %d URLs\n", *rps, len(targets))
	for ctx.Err() == nil {
		r := l.Open(ctx, mix, *rps, *every)
		line := fmt.Sprintf("%s requests %d errors %d rps %.1f p50 %.1fms p99 %.1fms",
			time.Now().UTC().Format(time.RFC3339), r.Requests, r.Errors-r.Cancelled, r.RPS, r.P50, r.P99)
		if s := r.ErrorSummary(); s != "" {
			line += " (" + s + ")"
		}
		fmt.Fprintln(stdout, line)
	}
	return nil
}

// addMatchFlag is --match: label matchers added to every series.
func addMatchFlag(fs *flag.FlagSet) *matchFlag {
	m := &matchFlag{}
	fs.Var(m, "match", "add the label matcher `LABEL=VALUE` to every series (repeatable; cluster=prod)")
	return m
}

// matchFlag is a repeatable label matcher, kept as PromQL.
type matchFlag []string

func (m *matchFlag) String() string { return strings.Join(*m, ",") }

var matcherRE = regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)(=~|!=|!~|=)(.*)$`)

func (m *matchFlag) Set(s string) error {
	g := matcherRE.FindStringSubmatch(strings.TrimSpace(s))
	if g == nil {
		return errors.New("want LABEL=VALUE (or !=, =~, !~), such as cluster=prod")
	}
	if strings.HasPrefix(g[1], "__") {
		return fmt.Errorf("label %s: reserved", g[1])
	}
	v := g[3]
	if uq, err := strconv.Unquote(v); err == nil {
		v = uq
	}
	*m = append(*m, fmt.Sprintf("%s%s%q", g[1], g[2], v))
	return nil
}

// runExperimentGuard is `gofit experiment guard`: the leader of its
// replicas judges every running experiment every --interval.
func runExperimentGuard(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("experiment guard", stderr)
	pf := addPromFlags(fs)
	match := addMatchFlag(fs)
	interval := fs.Duration("interval", 5*time.Minute, "judge every running experiment every `DURATION` (the planned looks' spacing)")
	planned := fs.Duration("planned", 2*time.Hour, "planned `DURATION` of an experiment without maxDuration: the looks the error is held over")
	alpha := fs.Float64("alpha", 0.05, "chance of stopping an arm falsely, over every look, metric and arm of an experiment")
	window := fs.Duration("window", time.Minute, "length of the paired windows: at least 2 scrape intervals")
	latency := fs.String("latency", "http_request_duration_seconds", "the services' latency histogram `METRIC` (seconds; classic or native)")
	errMatch := fs.String("errors", `code=~"5.."`, "PromQL label `MATCHER` that selects failed requests among the histogram's series")
	harmRate := fs.Float64("harm-rate", 0.5, "harmful: restarts, OOM kills or error share beyond (1+`MARGIN`) times the control's")
	harmLatency := fs.Float64("harm-latency", 0.25, "harmful: latency p99 beyond (1+`MARGIN`) times the control's")
	harmUnready := fs.Float64("harm-unready", 0.01, "harmful: pods not ready more of the time than (1+--harm-rate) times the control's share plus this `SHARE` (a stalled pod answers nothing)")
	resamples := fs.Int("resamples", 1000, "bootstrap resamples per interval")
	warmUp := fs.Duration("warm-up", time.Minute, "leave out each pod's first `DURATION` after it started (caches, connection pools, the heap growing)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `FILE` (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
	leaderNS := fs.String("leader-election-namespace", os.Getenv("POD_NAMESPACE"), "`NAMESPACE` of the leader election Lease (default $POD_NAMESPACE; empty: no leader election, for one replica)")
	metricsAddr := fs.String("metrics-addr", ":9090", "serve /metrics on `ADDR` (empty: none)")
	once := fs.Bool("once", false, "look once and exit (no leader election)")
	namespaces := fs.String("namespaces", "", "the comma-separated `NAMESPACES` experiments run in, where the guard's account has its Role; empty: every namespace (cluster-wide rights)")
	verdictStale := fs.Duration("verdict-stale", 0, "GET /v1/experiments/NS/NAME on --metrics-addr says \"unknown\" once the last judgement on data is older than `DURATION` (default 3 --interval)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit experiment guard --prometheus URL [flags]\n\nJudges every running experiment every --interval and stops an arm that is harmful relative to its\ncontrol: new pods no longer get it, its pods are evicted (PodDisruptionBudgets hold), and an Event\nsays why. It never promotes an arm. See docs/experiment.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case pf.url == "":
		return fmt.Errorf("%w: --prometheus is required", errUsage)
	case *window < time.Second:
		return fmt.Errorf("%w: --window %v: want at least 1s", errUsage, *window)
	case *warmUp < 0:
		return fmt.Errorf("%w: --warm-up %v: want 0 or more", errUsage, *warmUp)
	case *interval < *window:
		return fmt.Errorf("%w: --interval %v: want at least --window %v", errUsage, *interval, *window)
	case *resamples < 100:
		return fmt.Errorf("%w: --resamples %d: want at least 100", errUsage, *resamples)
	case !(*harmRate >= 0) || !(*harmLatency > 0):
		return fmt.Errorf("%w: --harm-rate %v, --harm-latency %v: want at least 0 and more than 0", errUsage, *harmRate, *harmLatency)
	case !(*harmUnready > 0 && *harmUnready < 1):
		return fmt.Errorf("%w: --harm-unready %v: want a share more than 0 and less than 1", errUsage, *harmUnready)
	case *verdictStale < 0 || *verdictStale > 0 && *verdictStale < *interval:
		return fmt.Errorf("%w: --verdict-stale %v: want at least --interval %v (0: 3 intervals)", errUsage, *verdictStale, *interval)
	}
	if *verdictStale == 0 {
		*verdictStale = 3 * *interval
	}
	nss, err := namespaceList("namespaces", *namespaces)
	if err != nil {
		return err
	}
	looks := experiment.Looks{Every: *interval, Planned: *planned, Alpha: *alpha}
	if _, err := experiment.NewSequential(looks); err != nil {
		return fmt.Errorf("%w: --interval, --planned or --alpha: %v", errUsage, err)
	}
	prom, err := pf.client()
	if err != nil {
		return err
	}
	cs, err := kubeClient(*kubeconfig)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	id, _ := os.Hostname()
	reg := prometheus.NewRegistry()
	pods := experiment.APIServer{Client: cs}
	g := &experiment.Guard{Client: cs, Looks: looks, Metrics: experiment.NewGuardMetrics(reg), Log: log, Identity: id, Namespaces: nss,
		Judge: experiment.PromJudge{
			Fetch: func(ctx context.Context, q experiment.Query) (experiment.Input, error) {
				return experiment.Fetch(ctx, prom, pods, q)
			},
			Query: experiment.Query{Window: *window, Latency: *latency, ErrorMatcher: *errMatch, Matchers: *match, Resamples: *resamples, Seed: 1, WarmUp: *warmUp},
			Harm:  experiment.Harm{Rate: *harmRate, ErrorShare: 0.001, Latency: *harmLatency, Unready: *harmUnready},
		}.Judge}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *once {
		return g.Once(ctx)
	}
	// Every replica answers canary tools from the Leases the leader
	// writes (docs/experiment.md, Argo Rollouts), through a client of
	// its own: its rate limit is not the leader election's.
	vcs, err := kubeClient(*kubeconfig)
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(*metricsAddr, reg, map[string]http.Handler{
		"GET /v1/experiments/": experiment.VerdictHandler(vcs, nss, *verdictStale, nil)})
	if err != nil {
		return err
	}
	defer stopMetrics()
	fmt.Fprintf(stdout, "gofit experiment guard: every %v, %g over %v planned\n", *interval, *alpha, *planned)
	if *leaderNS == "" {
		return g.Run(ctx)
	}
	// A replica that loses the Lease exits (the Deployment starts it
	// again as a follower): it never acts beside the new leader.
	return experiment.Lead(ctx, cs, experiment.Election{Namespace: *leaderNS, Name: admission.GuardLeaderLease, Identity: id}, log,
		func(ctx context.Context) { g.Run(ctx) })
}

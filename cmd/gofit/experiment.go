//go:build !nokube

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/experiment"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// exitFailOn is the exit status of a report whose verdicts hit --fail-on.
const exitFailOn = 3

func runExperiment(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprintln(stderr, "Usage: gofit experiment report [flags]\n       gofit experiment load [flags] URL...\n\nreport judges the arms of an experiment on live traffic from Prometheus (docs/experiment.md);\nload sends steady traffic to a workload's pods where there is none (a test cluster).\nRun 'gofit experiment report -h' or 'gofit experiment load -h' for their flags.")
		return flag.ErrHelp
	}
	if len(args) > 0 && args[0] == "load" {
		return runExperimentLoad(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "report" {
		return fmt.Errorf("%w: want `gofit experiment report [flags]` or `gofit experiment load [flags] URL...`", errUsage)
	}
	fs := newFlags("experiment report", stderr)
	promURL := fs.String("prometheus", "", "Prometheus `URL` (required)")
	ns := fs.String("namespace", "", "the experiment's `NAMESPACE` (required)")
	name := fs.String("name", "", "the experiment's `NAME` (its spec's name; required)")
	since := fs.Duration("since", time.Hour, "report on the last `DURATION` (unless --from and --to are given)")
	from := fs.String("from", "", "start `TIME` (RFC 3339), with --to")
	to := fs.String("to", "", "end `TIME` (RFC 3339), with --from")
	window := fs.Duration("window", time.Minute, "length of the paired windows: at least 2 scrape intervals")
	latency := fs.String("latency", "http_request_duration_seconds", "the service's latency histogram `METRIC` (seconds; classic or native)")
	errMatch := fs.String("errors", `code=~"5.."`, "PromQL label `MATCHER` that selects failed requests among the histogram's series")
	control := fs.String("control", "", "the control `ARM` (default: the spec's control, else the first arm)")
	out := fs.String("out", "", "write report.html and results.json into `DIR`")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `FILE` for the live pods (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
	noKube := fs.Bool("no-kube", false, "do not ask the API server: pods only from Prometheus's kube_pod_labels")
	failOn := fs.String("fail-on", "", "exit 3 when a verdict is one of these `KINDS` (comma-separated: harmful, worse, undecided, better, same)")
	resamples := fs.Int("resamples", 2000, "bootstrap resamples per interval")
	seed := fs.Int64("seed", 1, "bootstrap seed")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit experiment report --prometheus URL --namespace NS --name NAME [flags]\n\nJudges each arm of an experiment (pods the webhook gave arms with the gofit.dev/experiment\nannotation) against its control, from Prometheus over paired time windows. See docs/experiment.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	switch {
	case *promURL == "":
		return fmt.Errorf("%w: --prometheus is required", errUsage)
	case *ns == "" || *name == "":
		return fmt.Errorf("%w: --namespace and --name are required", errUsage)
	case *window < time.Second:
		return fmt.Errorf("%w: --window %v: want at least 1s", errUsage, *window)
	case *resamples < 100:
		return fmt.Errorf("%w: --resamples %d: want at least 100", errUsage, *resamples)
	case (*from == "") != (*to == ""):
		return fmt.Errorf("%w: --from and --to go together", errUsage)
	}
	var kinds []string
	for _, k := range strings.Split(*failOn, ",") {
		switch k = strings.TrimSpace(k); k {
		case "":
		case experiment.Harmful, "worse", "better", "same", "undecided":
			kinds = append(kinds, k)
		default:
			return fmt.Errorf("%w: --fail-on %q: %q is not harmful, worse, better, same or undecided", errUsage, *failOn, k)
		}
	}
	end := time.Now().Truncate(*window)
	start := end.Add(-*since)
	if *from != "" {
		var err error
		if start, err = time.Parse(time.RFC3339, *from); err != nil {
			return fmt.Errorf("%w: --from: %v", errUsage, err)
		}
		if end, err = time.Parse(time.RFC3339, *to); err != nil {
			return fmt.Errorf("%w: --to: %v", errUsage, err)
		}
	}
	if !end.After(start) {
		return fmt.Errorf("%w: the span from %v to %v is empty", errUsage, start, end)
	}
	pc, err := api.NewClient(api.Config{Address: *promURL, Client: &http.Client{Timeout: time.Minute}})
	if err != nil {
		return fmt.Errorf("%w: --prometheus %q: %v", errUsage, *promURL, err)
	}
	var pods experiment.PodSource
	if !*noKube {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = *kubeconfig
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return fmt.Errorf("the API server (or --no-kube): %w", err)
		}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("the API server: %w", err)
		}
		pods = experiment.APIServer{Client: cs}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	in, err := experiment.Fetch(ctx, v1.NewAPI(pc), pods, experiment.Query{
		Namespace: *ns, Name: *name, From: start, To: end, Window: *window, Latency: *latency,
		ErrorMatcher: *errMatch, Control: *control, Resamples: *resamples, Seed: *seed,
	})
	if err != nil {
		return err
	}
	res, err := experiment.Analyze(in)
	if err != nil {
		return err
	}
	experiment.WriteSummary(stdout, res)
	if *out != "" {
		files, err := experiment.WriteFiles(*out, res)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", strings.Join(files, ", "))
	}
	if bad := experiment.Failing(res, kinds); len(bad) > 0 {
		for _, v := range bad {
			fmt.Fprintf(stderr, "gofit experiment report: --fail-on %s: arm %s %s is %s\n", *failOn, v.Arm, v.Metric, v.Verdict)
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

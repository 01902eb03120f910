//go:build !nokube

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/api"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/experiment"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/fleet"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/rightsize"
)

// rightsizeLease is the leader election Lease of the rightsize
// controller's replicas.
const rightsizeLease = "gofit-rightsize"

// runRightsize is `gofit rightsize`: for every Deployment that opts in,
// fleet's plan, tried on a few live pods beside their siblings, judged,
// then promoted (docs/rightsize.md).
func runRightsize(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rightsize", stderr)
	pf := addPromFlags(fs)
	match := addMatchFlag(fs)
	pol := rightsize.DefaultPolicy()
	interval := fs.Duration("interval", 10*time.Minute, "look at every opted-in workload every `DURATION`")
	since, step, minSpan := 7*24*time.Hour, 5*time.Minute, 24*time.Hour
	fs.Var(promDuration{&since}, "since", "plan from the last `DURATION` of each workload's series (7d, 36h, ...)")
	fs.Var(promDuration{&step}, "step", "resolution of the plan's series: at least two scrape intervals (`DURATION`)")
	fs.Var(promDuration{&minSpan}, "min-span", "the least `DURATION` of history a plan rests on")
	minSamples := fs.Int("min-samples", 60, "the least samples (pod-steps) a plan rests on")
	fs.Float64Var(&pol.Share, "share", pol.Share, "a trial takes at most this `SHARE` of the workload's ready pods (and at least --min-pods)")
	fs.IntVar(&pol.MinPods, "min-pods", pol.MinPods, "a trial takes at least `N` pods, and as many again stay the control")
	fs.Float64Var(&pol.Saving, "saving", pol.Saving, "a plan that fixes no finding is tried only if it gives back this `SHARE` of the requested CPU or memory")
	fs.DurationVar(&pol.Duration, "trial-duration", pol.Duration, "a trial runs `DURATION` before it is judged for promotion (harm stops it at any look)")
	fs.DurationVar(&pol.Backoff, "backoff", pol.Backoff, "a plan stopped for harm or not promoted is not tried again for `DURATION`")
	fs.IntVar(&pol.PerNamespace, "max-trials-per-namespace", pol.PerNamespace, "at most `N` trials at once in a namespace")
	fs.IntVar(&pol.PerCluster, "max-trials", pol.PerCluster, "at most `N` trials at once in the cluster")
	fs.BoolVar(&pol.Paused, "paused", false, "the kill switch: start no trial, roll back running ones, promote nothing")
	window := fs.Duration("window", time.Minute, "length of the trial's paired windows: at least 2 scrape intervals")
	latency := fs.String("latency", "http_request_duration_seconds", "the services' latency histogram `METRIC` (seconds; classic or native)")
	errMatch := fs.String("errors", `code=~"5.."`, "PromQL label `MATCHER` that selects failed requests among the histogram's series")
	resamples := fs.Int("resamples", 1000, "bootstrap resamples per interval")
	out := fs.String("out", "", "write each recommendation and promotion into `DIR` as a patch (kubectl patch --patch-file)")
	promote := fs.String("promote", "patch", "how mode auto promotes: `HOW` patch (the Deployment's template) or file (into --out only, for GitOps)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `FILE` (default: $KUBECONFIG, ~/.kube/config or in-cluster)")
	namespaces := fs.String("namespaces", "", "the comma-separated `NAMESPACES` to look in, where the controller's account has its Role; empty: every namespace")
	leaderNS := fs.String("leader-election-namespace", os.Getenv("POD_NAMESPACE"), "`NAMESPACE` of the leader election Lease (default $POD_NAMESPACE; empty: none, for one replica)")
	metricsAddr := fs.String("metrics-addr", ":9090", "serve /metrics on `ADDR` (empty: none)")
	once := fs.Bool("once", false, "look once, print what was done and exit (no leader election)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit rightsize --prometheus URL [flags]\n\nFor every Deployment that opts in (gofit.dev/rightsize: recommend, trial or auto on it or its\nnamespace): gofit fleet's plan, tried in place on a few of its pods beside the rest, judged by\nthe guard's rules, then promoted (auto) or written down (trial). See docs/rightsize.md.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := pf.parse(fs, args); err != nil {
		return err
	}
	if *interval <= 0 {
		return fmt.Errorf("%w: --interval %v: want more than 0", errUsage, *interval)
	}
	if err := checkStep(since, step); err != nil {
		return err
	}
	switch {
	case *minSamples < 1:
		return fmt.Errorf("%w: --min-samples %d: want at least 1", errUsage, *minSamples)
	case *window < time.Second:
		return fmt.Errorf("%w: --window %v: want at least 1s", errUsage, *window)
	case *resamples < 100:
		return fmt.Errorf("%w: --resamples %d: want at least 100", errUsage, *resamples)
	case *promote != "patch" && *promote != "file":
		return fmt.Errorf("%w: --promote %q: want patch or file", errUsage, *promote)
	case *promote == "file" && *out == "":
		return fmt.Errorf("%w: --promote file needs --out DIR", errUsage)
	}
	if err := pol.Check(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	nss, err := namespaceList("namespaces", *namespaces)
	if err != nil {
		return err
	}
	raw, err := pf.raw(time.Minute)
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
	fopt := fleet.Options{MinSpan: minSpan, MinSamples: *minSamples}
	jq := experiment.Query{Window: *window, Latency: *latency, ErrorMatcher: *errMatch, Matchers: *match, Resamples: *resamples, Seed: 1, Control: rightsize.ArmControl}
	c := &rightsize.Controller{Client: cs, Policy: pol, Namespaces: nss, Files: *out, PromoteByFile: *promote == "file",
		Identity: id, Log: log, Metrics: rightsize.NewMetrics(reg),
		Plan: func(ctx context.Context, d *appsv1.Deployment, floor float64) (rightsize.Plan, error) {
			return planFromPrometheus(ctx, raw, d, floor, since, step, fopt)
		},
		Judge: func(ctx context.Context, d *appsv1.Deployment, st rightsize.Status) (*rightsize.Judgement, error) {
			return judgeFromPrometheus(ctx, raw, experiment.APIServer{Client: cs}, d, st, jq)
		},
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *once {
		outs, err := c.Once(ctx)
		if err != nil {
			return err
		}
		failed := 0
		for _, o := range outs {
			if o.Err != nil {
				failed++
				fmt.Fprintf(stdout, "%s: %s failed: %v\n", o.Workload, o.Action.Kind, o.Err)
				continue
			}
			fmt.Fprintf(stdout, "%s: %s: %s\n", o.Workload, o.Action.Kind, o.Action.Why)
		}
		if len(outs) == 0 {
			fmt.Fprintln(stdout, "no Deployment opts in (gofit.dev/rightsize on it or its namespace)")
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d workloads failed", failed, len(outs))
		}
		return nil
	}
	stopMetrics, err := serveMetrics(*metricsAddr, reg, nil)
	if err != nil {
		return err
	}
	defer stopMetrics()
	fmt.Fprintf(stdout, "gofit rightsize: every %v, trials of %v on at most %.0f%% of a workload's pods\n", *interval, pol.Duration, 100*pol.Share)
	if *leaderNS == "" {
		c.Run(ctx, *interval)
		return nil
	}
	return experiment.Lead(ctx, cs, experiment.Election{Namespace: *leaderNS, Name: rightsizeLease, Identity: id}, log,
		func(ctx context.Context) { c.Run(ctx, *interval) })
}

// planFromPrometheus is fleet's analysis of one Deployment's pods over
// since, as its plan.
func planFromPrometheus(ctx context.Context, prom api.Client, d *appsv1.Deployment, floor float64, since, step time.Duration, opt fleet.Options) (rightsize.Plan, error) {
	sel, err := rightsize.SelectorOf(d)
	if err != nil {
		return rightsize.Plan{}, err
	}
	to := time.Now().Truncate(step)
	in, err := fleet.Fetch(ctx, prom, fleet.Query{From: to.Add(-since), To: to, Step: step, Namespace: d.Namespace, Selector: sel, MaxContainers: 1000})
	if err != nil {
		return rightsize.Plan{}, err
	}
	res := fleet.Analyze(in, opt)
	return rightsize.PlanFrom(fleet.Workload{Namespace: d.Namespace, Kind: "Deployment", Name: d.Name}, res.Containers, floor), nil
}

// judgeFromPrometheus is the trial's standing: the experiment analysis of
// its two arms from the trial's start, with the guard's harm rules.
func judgeFromPrometheus(ctx context.Context, prom api.Client, pods experiment.PodSource, d *appsv1.Deployment, st rightsize.Status, q experiment.Query) (*rightsize.Judgement, error) {
	q.Namespace, q.Name, q.Workload = d.Namespace, rightsize.Experiment, "Deployment/"+d.Name
	q.To = time.Now().Truncate(q.Window)
	q.From = st.Since.Truncate(q.Window)
	if q.To.Sub(q.From) < q.Window {
		return nil, nil // not one whole window yet
	}
	in, err := experiment.Fetch(ctx, prom, pods, q)
	if err != nil {
		return nil, err
	}
	in.Harm = experiment.DefaultHarm()
	res, err := experiment.Analyze(in)
	if err != nil {
		return nil, err
	}
	j, err := rightsize.Judge(res, rightsize.ArmPlan)
	if err != nil {
		return nil, err
	}
	return &j, nil
}

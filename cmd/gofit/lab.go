package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/buildinfo"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/local"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/pods"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
)

func runLab(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lab", stderr)
	var o lab.Options
	var ko pods.Options
	fs.BoolVar(&o.Quick, "quick", false, "a reduced study: one quota, within 4 minutes on 2 cores")
	fs.StringVar(&o.Cmd, "cmd", "", "your service's command; {port} is replaced by a free port (no shell quoting: use sh -c '...' for that)")
	fs.StringVar(&o.Image, "image", "", "an OCI image to study instead of --cmd: oci:DIR, oci-archive:FILE, docker-archive:FILE or a registry reference (docker config credentials); run as its entrypoint, cmd, env, working directory and user, with $PORT set to {port}")
	fs.StringVar(&o.Args, "args", "", "with --image: replaces the image's cmd; {port} is replaced by a free port")
	fs.StringVar(&o.URL, "url", "", "URL to load, e.g. http://127.0.0.1:{port}/api; readiness is polled here")
	fs.StringVar(&o.Out, "out", "gofit-lab", "directory for report.html and results.json")
	fs.BoolVar(&o.JSON, "json", false, "print results.json to stdout instead of the summary")
	fs.StringVar(&o.Quotas, "quotas", "", "CPU quotas in cores, comma-separated (default 0.25,0.5,1,<CPUs>; --quick 0.25)")
	fs.IntVar(&o.Repeats, "repeats", 0, "repeats of each CPU cell before adaptive ones (default 3, the runs a side a verdict needs)")
	fs.IntVar(&o.MaxRepeats, "max-repeats", 0, "adaptive repeats stop here (default 5; --quick 4)")
	fs.IntVar(&o.Requests, "requests", 0, "closed loop: requests per window instead of 50 CFS periods of time (overrides the minimum)")
	fs.IntVar(&o.Concurrency, "concurrency", 0, "closed-loop workers (default 16)")
	fs.Float64Var(&o.OpenFraction, "open-fraction", 0, "open-loop rate as a share of the lower closed-loop capacity of gofit and go-default at the quota (default 0.6)")
	fs.DurationVar(&o.OpenDuration, "open-duration", 0, "open loop: fixed window per run (overrides the 5000-latency minimum)")
	fs.IntVar(&o.MemRequests, "mem-requests", 0, "requests per memory trial (default 1200; --quick 800)")
	fs.DurationVar(&o.Budget, "budget", 0, "wall time the study must fit in: the memory study's minimum is kept back first, the CPU study gets at most half (default 15m; --quick 4m)")
	fs.Float64Var(&o.TargetRPS, "target-rps", 0, "recommend the cheapest quota × setting that serves this many requests/s (open loop at this rate)")
	fs.DurationVar(&o.SLOP99, "slo-p99", 0, "with --target-rps: the p99 latency the recommendation must meet, e.g. 50ms")
	fs.StringVar(&o.Targets, "targets", "", "request mix instead of --url: a file in vegeta's format (METHOD URL [weight=N], header lines, @body-file, a blank line between targets); {port} works here too")
	fs.Func("header", "with --url: a header for every request, \"Name: value\" (repeatable)", func(v string) error {
		o.Headers = append(o.Headers, v)
		return nil
	})
	fs.Int64Var(&o.Seed, "seed", 1, "seed of the random order of cells, requests and resamples; the same seed replays a run")
	fs.StringVar(&o.Replay, "replay", "", "analyse an earlier run's records.json in `DIR` again (results.json and report.html into --out); runs nothing")
	fs.StringVar(&o.ReadyURL, "ready-url", "", "URL polled until the service is ready (default: --url, or the first GET target); 503 means still starting")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 0, "how long the service may take to become ready (default 30s)")
	fs.BoolVar(&o.Kube, "kube", false, "run the trials as pods through the API server (one trial per node at a time; the load from a pod; counters from the gofit node agent): --image must be a registry reference, or none for the sample")
	fs.StringVar(&ko.Kubeconfig, "kubeconfig", "", "with --kube: the kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&ko.Context, "context", "", "with --kube: the kubeconfig context (default: its current one)")
	fs.StringVar(&ko.Namespace, "namespace", "", "with --kube: the namespace of the run's pods (default gofit-lab, the one deploy/lab makes)")
	fs.StringVar(&ko.NodeSelector, "node-selector", "", "with --kube: key=value[,key=value] of the nodes trials may run on")
	fs.StringVar(&ko.AgentNamespace, "agent-namespace", "", "with --kube: the gofit node agent's namespace (default: gofit-node, then gofit-system)")
	fs.StringVar(&ko.AgentAccount, "agent-account", "", "with --kube: the ServiceAccount in --namespace whose short-lived token reads a node agent that serves --metrics-secure, as deploy/node and the chart run it (default gofit-lab, the one deploy/lab makes and binds)")
	fs.StringVar(&ko.Image, "kube-image", defaultKubeImage(), "with --kube: the gofit image the load pod (and the sample) runs")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	o.Given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.Given[f.Name] = true })
	ctx, stop := cleanupContext()
	defer stop()
	// The trials run in the sandbox on this machine, or with --kube as
	// pods on a cluster's nodes.
	var op trial.Opener = local.New()
	if o.Kube {
		op = pods.New(ko)
	}
	err := lab.Main(ctx, o, op, stdout, stderr)
	switch {
	case errors.Is(err, lab.ErrInterrupted):
		return exitError{130} // the shell's code for SIGINT; lab.Main said the rest
	case errors.Is(err, lab.ErrUsage):
		return usageError{err}
	}
	return err
}

// usageError marks a lab error as bad command-line input (exit 2); its
// text already says "usage".
type usageError struct{ error }

func (e usageError) Is(target error) bool { return target == errUsage }
func (e usageError) Unwrap() error        { return e.error }

func runLabSample(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: gofit %s ADDR", errUsage, lab.SampleCommand)
	}
	return lab.ServeSample(args[0])
}

func runLabLoad(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: gofit %s ADDR", errUsage, pods.LoadCommand)
	}
	return pods.ServeLoad(args[0])
}

// defaultKubeImage is this release's image, "" for a build without a
// release version (--kube then needs --kube-image).
func defaultKubeImage() string {
	v := buildinfo.Read().Version
	if !strings.HasPrefix(v, "v") || strings.Contains(v, "devel") {
		return ""
	}
	return "ghcr.io/gofit-dev/gofit:" + v
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

func runLab(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lab", stderr)
	quick := fs.Bool("quick", false, "a reduced study: one quota, within 4 minutes on 2 cores")
	cmdFlag := fs.String("cmd", "", "your service's command; {port} is replaced by a free port (no shell quoting: use sh -c '...' for that)")
	urlFlag := fs.String("url", "", "URL to load, e.g. http://127.0.0.1:{port}/api; readiness is polled here")
	out := fs.String("out", "gofit-lab", "directory for report.html and results.json")
	asJSON := fs.Bool("json", false, "print results.json to stdout instead of the summary")
	quotas := fs.String("quotas", "", "CPU quotas in cores, comma-separated (default 0.25,0.5,1,<CPUs>; --quick 0.25)")
	repeats := fs.Int("repeats", 0, "repeats of each CPU cell before adaptive ones (default 2)")
	maxRepeats := fs.Int("max-repeats", 0, "adaptive repeats stop here (default 5; --quick 3)")
	requests := fs.Int("requests", 0, "closed loop: requests per window instead of 50 CFS periods of time (overrides the minimum)")
	conc := fs.Int("concurrency", 0, "closed-loop workers (default 16)")
	openFrac := fs.Float64("open-fraction", 0, "open-loop rate as a share of the quota's median closed-loop capacity (default 0.6)")
	openDur := fs.Duration("open-duration", 0, "open loop: fixed window per run (overrides the 5000-latency minimum)")
	memReq := fs.Int("mem-requests", 0, "requests per memory trial (default 1200; --quick 800)")
	budget := fs.Duration("budget", 0, "wall time the adaptive repeats must fit in (default 15m; --quick 4m)")
	targetRPS := fs.Float64("target-rps", 0, "recommend the cheapest quota × setting that serves this many requests/s (open loop at this rate)")
	slo := fs.Duration("slo-p99", 0, "with --target-rps: the p99 latency the recommendation must meet, e.g. 50ms")
	targetsFile := fs.String("targets", "", "request mix instead of --url: a file in vegeta's format (METHOD URL [weight=N], header lines, @body-file, a blank line between targets); {port} works here too")
	var headers []string
	fs.Func("header", "with --url: a header for every request, \"Name: value\" (repeatable)", func(v string) error {
		if _, _, err := load.ParseHeader(v); err != nil {
			return err
		}
		headers = append(headers, v)
		return nil
	})
	seed := fs.Int64("seed", 1, "seed of the random order of cells, requests and resamples; the same seed replays a run")
	readyURL := fs.String("ready-url", "", "URL polled until the service is ready (default: --url, or the first GET target); 503 means still starting")
	readyTimeout := fs.Duration("ready-timeout", 0, "how long the service may take to become ready (default 30s)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg := lab.DefaultConfig(*quick)
	if set["quotas"] {
		cfg.Quotas = nil
		for _, s := range strings.Split(*quotas, ",") {
			q, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || q < 0.01 || q > 1024 || math.IsNaN(q) {
				return fmt.Errorf("%w: --quotas: %q is not a number of cores between 0.01 and 1024", errUsage, s)
			}
			cfg.Quotas = append(cfg.Quotas, q)
		}
	}
	// A count the user typed must be a count: 0 or less is a mistake, not
	// a request for the default.
	for _, c := range []struct {
		name string
		v    int
		dst  *int
	}{{"repeats", *repeats, &cfg.MinRepeats}, {"max-repeats", *maxRepeats, &cfg.MaxRepeats}, {"requests", *requests, &cfg.Requests},
		{"concurrency", *conc, &cfg.Concurrency}, {"mem-requests", *memReq, &cfg.MemRequests}} {
		if !set[c.name] {
			continue
		}
		if c.v <= 0 {
			return fmt.Errorf("%w: --%s %d: must be at least 1", errUsage, c.name, c.v)
		}
		*c.dst = c.v
	}
	if set["repeats"] && !set["max-repeats"] {
		cfg.MaxRepeats = max(cfg.MaxRepeats, cfg.MinRepeats)
	}
	if cfg.MaxRepeats < cfg.MinRepeats {
		return fmt.Errorf("%w: --max-repeats %d is under --repeats %d", errUsage, cfg.MaxRepeats, cfg.MinRepeats)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		dst  *time.Duration
	}{{"open-duration", *openDur, &cfg.OpenDuration}, {"budget", *budget, &cfg.Budget}, {"slo-p99", *slo, &cfg.SLOP99}} {
		if !set[d.name] {
			continue
		}
		if d.v <= 0 {
			return fmt.Errorf("%w: --%s %v: must be positive", errUsage, d.name, d.v)
		}
		*d.dst = d.v
	}
	if set["open-fraction"] {
		if !(*openFrac > 0 && *openFrac <= 1) {
			return fmt.Errorf("%w: --open-fraction %g: must be above 0 and at most 1", errUsage, *openFrac)
		}
		cfg.OpenFraction = *openFrac
	}
	if set["target-rps"] {
		if !(*targetRPS > 0 && *targetRPS <= 1e6) {
			return fmt.Errorf("%w: --target-rps %g: must be above 0 and at most 1e6", errUsage, *targetRPS)
		}
		cfg.TargetRPS = *targetRPS
	}
	if set["slo-p99"] && !set["target-rps"] {
		return fmt.Errorf("%w: --slo-p99 needs --target-rps", errUsage)
	}
	if set["requests"] {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("--requests %d overrides the closed-loop minimum of 50 CFS periods per window; short windows make throughput and CPU efficiency noisy (see periods per cell)", cfg.Requests))
	}
	if set["open-duration"] {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("--open-duration %v overrides the minimum of 5000 latencies per open-loop cell; p99 may rest on fewer (see samples per cell)", cfg.OpenDuration))
	}
	if set["open-fraction"] && set["target-rps"] {
		cfg.Warnings = append(cfg.Warnings, "--target-rps sets the open-loop rate; --open-fraction is ignored")
	}
	if set["url"] && set["targets"] {
		return fmt.Errorf("%w: --url and --targets: give one", errUsage)
	}
	if (*cmdFlag == "") != (*urlFlag == "" && *targetsFile == "") {
		return fmt.Errorf("%w: --cmd goes with --url or --targets", errUsage)
	}
	if len(headers) > 0 && !set["url"] {
		return fmt.Errorf("%w: --header goes with --url (put headers in the --targets file)", errUsage)
	}
	for _, f := range []string{"ready-url", "ready-timeout"} {
		if set[f] && !set["cmd"] {
			return fmt.Errorf("%w: --%s goes with --cmd", errUsage, f)
		}
	}
	if set["ready-timeout"] && *readyTimeout <= 0 {
		return fmt.Errorf("%w: --ready-timeout %v: must be positive", errUsage, *readyTimeout)
	}
	cfg.Seed = *seed
	var words []string
	var mix []load.Target
	if set["cmd"] {
		words = strings.Fields(*cmdFlag)
		if len(words) == 0 {
			return fmt.Errorf("%w: --cmd %q: no command", errUsage, *cmdFlag)
		}
		if set["url"] {
			if err := load.CheckURL(*urlFlag); err != nil {
				return fmt.Errorf("%w: --url %v", errUsage, err)
			}
		}
		if set["targets"] {
			ts, err := load.ReadTargets(*targetsFile)
			if err != nil {
				return fmt.Errorf("%w: %v", errUsage, err)
			}
			mix = ts
		}
		if set["ready-url"] {
			if err := load.CheckURL(*readyURL); err != nil {
				return fmt.Errorf("%w: --ready-url %v", errUsage, err)
			}
		}
	}
	// Before any minute is spent: can the results be written at all?
	undoOut, err := lab.CheckOut(*out)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	// A run that ends before writing anything leaves no new directory.
	defer undoOut()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if words != nil {
		path, err := exec.LookPath(words[0])
		if err != nil {
			return fmt.Errorf("--cmd: %w", err)
		}
		if !strings.Contains(*cmdFlag, "{port}") {
			fmt.Fprintln(stderr, "gofit lab: note: --cmd does not contain {port}; every trial will use the same port")
		}
		var h http.Header
		for _, v := range headers {
			k, val, _ := load.ParseHeader(v)
			if h == nil {
				h = http.Header{}
			}
			h.Add(k, val)
		}
		cfg.Target = lab.Target{Path: path, Args: words[1:], URL: *urlFlag, Header: h, Requests: mix, ReadyURL: *readyURL, ReadyTimeout: *readyTimeout}
		if cfg.Target.Ready() == "" {
			return fmt.Errorf("%w: --targets %s has no GET target to poll for readiness; give --ready-url", errUsage, *targetsFile)
		}
	}

	sb, err := lab.NewSandbox()
	if err != nil {
		if errors.Is(err, iofs.ErrPermission) {
			return fmt.Errorf("%w; the lab needs root on Linux with cgroupfs mounted writable (try: sudo gofit lab)", err)
		}
		return err
	}
	defer func() {
		// A trial group that would not go away is left behind: say so,
		// naming it, rather than exit as if all was clean.
		if err := sb.Close(); err != nil {
			fmt.Fprintf(stderr, "gofit lab: warning: cleanup: %v\n", err)
		}
	}()
	if words == nil {
		// The embedded sample: this very binary, copied so its page cache
		// can be evicted before each trial without touching the running
		// lab. The directory is named for this process, so a later lab
		// sweeps it if this one is killed.
		dir, err := lab.TempDir()
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		path, err := copySelf(dir)
		if err != nil {
			return err
		}
		cfg.Target = lab.Target{Path: path, Args: []string{lab.SampleCommand, "127.0.0.1:{port}"}, URL: "http://127.0.0.1:{port}/work"}
		cfg.Sample = true
	}
	cfg.Progress = stderr
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "gofit lab: warning: %s\n", w)
	}

	start := time.Now()
	res, runErr := lab.Run(ctx, sb, cfg)
	interrupted := ctx.Err() != nil
	paths, werr := lab.WriteFiles(*out, res)
	if werr != nil && interrupted {
		// Still one line and the shell's code for SIGINT.
		fmt.Fprintf(stderr, "gofit lab: interrupted after %v; could not write partial results: %v\n", time.Since(start).Round(time.Second), werr)
		return exitError{130}
	}
	if werr != nil {
		return errors.Join(runErr, fmt.Errorf("write results: %w", werr))
	}
	if interrupted {
		// One line, and the shell's code for SIGINT.
		fmt.Fprintf(stderr, "gofit lab: interrupted after %v; partial results in %s\n", time.Since(start).Round(time.Second), strings.Join(paths, ", "))
		return exitError{130}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		lab.WriteSummary(stdout, res)
		fmt.Fprintf(stdout, "written: %s\n", strings.Join(paths, ", "))
	}
	if runErr != nil {
		return fmt.Errorf("%w (results: %s)", runErr, strings.Join(paths, ", "))
	}
	return nil
}

func copySelf(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	src, err := os.Open(self)
	if err != nil {
		return "", err
	}
	defer src.Close()
	path := filepath.Join(dir, "gofit-sample")
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return "", err
	}
	// Flush, so the page cache of the copy can be dropped before each trial.
	if err := dst.Sync(); err != nil {
		dst.Close()
		return "", err
	}
	return path, dst.Close()
}

func runLabSample(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: gofit %s ADDR", errUsage, lab.SampleCommand)
	}
	return lab.ServeSample(args[0])
}

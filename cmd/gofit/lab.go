package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit/lab"
)

func runLab(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("lab", stderr)
	quick := fs.Bool("quick", false, "a reduced study that finishes within 3 minutes on 2 cores")
	cmdFlag := fs.String("cmd", "", "your service's command; {port} is replaced by a free port (no shell quoting: use sh -c '...' for that)")
	urlFlag := fs.String("url", "", "URL to load, e.g. http://127.0.0.1:{port}/api; readiness is polled here")
	out := fs.String("out", "gofit-lab", "directory for report.html and results.json")
	asJSON := fs.Bool("json", false, "print results.json to stdout instead of the summary")
	quotas := fs.String("quotas", "", "CPU quotas in cores, comma-separated (default 0.25,0.5,1,<CPUs>; --quick 0.25)")
	repeats := fs.Int("repeats", 0, "repeats of each CPU configuration (default 3; --quick 2)")
	requests := fs.Int("requests", 0, "closed-loop requests per CPU trial (default 600; --quick 300)")
	conc := fs.Int("concurrency", 0, "closed-loop concurrency (default 16)")
	openFrac := fs.Float64("open-fraction", 0, "open-loop rate as a share of measured capacity (default 0.6)")
	openDur := fs.Duration("open-duration", 0, "open-loop duration per CPU trial (default 3s; --quick 2s)")
	memReq := fs.Int("mem-requests", 0, "requests per memory trial (default 1500)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg := lab.DefaultConfig(*quick)
	if *quotas != "" {
		cfg.Quotas = nil
		for _, s := range strings.Split(*quotas, ",") {
			q, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || q < 0.01 || q > 1024 {
				return fmt.Errorf("%w: --quotas: %q is not a number of cores between 0.01 and 1024", errUsage, s)
			}
			cfg.Quotas = append(cfg.Quotas, q)
		}
	}
	for _, c := range []struct {
		name string
		v    int
		dst  *int
	}{{"--repeats", *repeats, &cfg.Repeats}, {"--requests", *requests, &cfg.Requests}, {"--concurrency", *conc, &cfg.Concurrency}, {"--mem-requests", *memReq, &cfg.MemRequests}} {
		if c.v < 0 {
			return fmt.Errorf("%w: %s %d: must be positive", errUsage, c.name, c.v)
		}
		if c.v > 0 {
			*c.dst = c.v
		}
	}
	if *openFrac < 0 || *openFrac > 1 {
		return fmt.Errorf("%w: --open-fraction %g: must be between 0 and 1", errUsage, *openFrac)
	}
	if *openFrac > 0 {
		cfg.OpenFraction = *openFrac
	}
	if *openDur < 0 {
		return fmt.Errorf("%w: --open-duration %v: must be positive", errUsage, *openDur)
	}
	if *openDur > 0 {
		cfg.OpenDuration = *openDur
	}
	if (*cmdFlag == "") != (*urlFlag == "") {
		return fmt.Errorf("%w: --cmd and --url go together", errUsage)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *cmdFlag != "" {
		words := strings.Fields(*cmdFlag)
		path, err := exec.LookPath(words[0])
		if err != nil {
			return fmt.Errorf("--cmd: %w", err)
		}
		if !strings.Contains(*urlFlag, "{port}") && !strings.Contains(*cmdFlag, "{port}") {
			fmt.Fprintln(stderr, "gofit lab: note: neither --cmd nor --url contains {port}; every trial will use the same port")
		}
		cfg.Target = lab.Target{Path: path, Args: words[1:], URL: *urlFlag}
	} else {
		// The embedded sample: this very binary, copied so its page cache
		// can be evicted before each trial without touching the running lab.
		dir, err := os.MkdirTemp("", "gofit-lab-")
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

	sb, err := lab.NewSandbox()
	if err != nil {
		return fmt.Errorf("%v; the lab needs root on Linux with cgroupfs mounted writable (try: sudo gofit lab)", err)
	}
	defer sb.Close()

	start := time.Now()
	res, runErr := lab.Run(ctx, sb, cfg)
	if errors.Is(runErr, context.Canceled) {
		fmt.Fprintf(stderr, "gofit lab: interrupted after %v; writing what was measured\n", time.Since(start).Round(time.Second))
	}
	if err := lab.WriteFiles(*out, res); err != nil {
		return errors.Join(runErr, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		lab.WriteSummary(stdout, res)
		fmt.Fprintf(stdout, "report: %s\nresults: %s\n", filepath.Join(*out, "report.html"), filepath.Join(*out, "results.json"))
	}
	return runErr
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

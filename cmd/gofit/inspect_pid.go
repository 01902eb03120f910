package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/target"
)

// pidFlags are inspect's flags for a running process.
type pidFlags struct {
	pid     int
	window  time.Duration
	metrics string
}

func (p *pidFlags) register(fs interface {
	IntVar(*int, string, int, string)
	DurationVar(*time.Duration, string, time.Duration, string)
	StringVar(*string, string, string, string)
}) {
	fs.IntVar(&p.pid, "pid", 0, "measure the non-Go memory of running process PID (this container's, or from the node any container's)\nand print the GOMEMLIMIT that fits it and the declaration to add")
	fs.DurationVar(&p.window, "window", 0, "with --pid: clear the process's referenced bits, wait this long, and count the file pages used since\nas hot (default 0: every file page referenced since the kernel last aged them, an upper bound)")
	fs.StringVar(&p.metrics, "metrics-url", "", "with --pid: the service's /metrics or /debug/vars, for a cross-check against its runtime's own figures")
}

func (p pidFlags) set() bool { return p.pid != 0 || p.window != 0 || p.metrics != "" }

// pidReport is `gofit inspect --pid`'s output.
type pidReport struct {
	PID         int    `json:"pid"`
	Executable  string `json:"executable"`
	GoVersion   string `json:"go_version"`
	MemoryGroup string `json:"memory_cgroup"`
	// MemoryLimitBytes is the process's effective memory limit (0: none).
	MemoryLimitBytes int64             `json:"memory_limit_bytes"`
	NonGo            nongo.Measurement `json:"non_go"`
	// GOMEMLIMIT is what fits the process with its non-Go memory declared;
	// RatioGOMEMLIMIT what the memory ratio alone gives. 0: no limit.
	GOMEMLIMIT       int64  `json:"gomemlimit_bytes"`
	GOMEMLIMITReason string `json:"gomemlimit_reason"`
	RatioGOMEMLIMIT  int64  `json:"ratio_gomemlimit_bytes"`
	// Declare is what to add, by where the service is started: "env" for
	// `gofit run`, "annotation" for the webhook. Empty when nothing needs
	// declaring.
	Declare     map[string]string `json:"declare"`
	Declaration string            `json:"declaration"`
}

func runInspectPID(root string, pf pidFlags, cpus int, policy fit.Policy, asJSON bool, stdout io.Writer) error {
	if pf.pid <= 0 {
		return fmt.Errorf("%w: --window and --metrics-url need --pid; --pid %d: want a process ID", errUsage, pf.pid)
	}
	if pf.window < 0 {
		return fmt.Errorf("%w: --window %v: must not be negative", errUsage, pf.window)
	}
	r, err := inspectPID(context.Background(), root, pf, cpus, policy)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.writeText(stdout)
}

// inspectPID measures process pid from outside and plans for it.
func inspectPID(ctx context.Context, root string, pf pidFlags, cpus int, policy fit.Policy) (pidReport, error) {
	r := pidReport{PID: pf.pid}
	if pf.window > 0 {
		if err := nongo.ClearRefs(root, pf.pid); err != nil {
			return r, err
		}
		select {
		case <-time.After(pf.window):
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	ev, err := nongo.ReadProcess(root, pf.pid)
	if err != nil {
		return r, err
	}
	// The window of the anonymous memory is the process's life so far;
	// --window only says which file pages are hot.
	ev.ClearedRefs = pf.window > 0
	if pf.metrics != "" {
		rt, err := nongo.FetchRuntime(ctx, pf.metrics)
		if err != nil {
			return r, fmt.Errorf("--metrics-url: %w", err)
		}
		ev.Runtime = &rt
	}
	cg, err := cgroup.NewFS(root).Observe(pf.pid)
	if err != nil {
		return r, err
	}
	defer cg.Close()
	l, err := cg.Limits()
	if err != nil {
		return r, err
	}
	if ms, err := cg.MemoryStats(); err == nil {
		ev.KernelBytes = int64(min(ms.Kernel, 1<<60))
	}
	if cg.Memory != nil {
		r.MemoryGroup = cg.Memory.Path
		if procs, _, err := cgroup.ReadBounded(filepath.Join(cg.Memory.Dir, "cgroup.procs"), 1<<20); err == nil {
			ev.CgroupProcs = len(strings.Fields(procs))
		}
	}
	r.MemoryLimitBytes = l.Memory.Effective()
	r.Executable, _ = os.Readlink(filepath.Join(root, "proc", strconv.Itoa(pf.pid), "exe"))
	r.GoVersion = ev.GoVersion
	m, err := nongo.Estimate(ev)
	if err != nil {
		return r, fmt.Errorf("process %d: %w", pf.pid, err)
	}
	r.NonGo = m
	// An unreadable executable gets an unknown Go version.
	b, _ := target.Read(filepath.Join(root, "proc", strconv.Itoa(pf.pid), "exe"))
	in := b.Input(l, cpus, nil, fit.NonGo{})
	r.RatioGOMEMLIMIT = policy.Plan(in).GOMEMLIMIT
	in.NonGo = m.NonGo()
	p := policy.Plan(in)
	r.GOMEMLIMIT = p.GOMEMLIMIT
	for _, n := range p.Reasons {
		if n.Var == "GOMEMLIMIT" {
			// "GOMEMLIMIT=44.9MiB: why": the figure is printed beside it.
			_, why, ok := strings.Cut(n.Text, ": ")
			if !ok {
				why = n.Text
			}
			r.GOMEMLIMITReason = why
		}
	}
	r.Declaration = m.Declaration()
	r.Declare = map[string]string{}
	if m.Bytes > 0 {
		q := nongo.Quantity(m.Bytes)
		r.Declare["env"] = NonGoVar + "=" + q
		r.Declare["annotation"] = "gofit.dev/non-go-memory: NAME=" + q
	}
	return r, nil
}

func (r pidReport) writeText(w io.Writer) error {
	m := r.NonGo
	var b strings.Builder
	exe, goVer := r.Executable, r.GoVersion
	if exe == "" {
		exe = "executable not readable"
	}
	if goVer == "" {
		goVer = "no Go build info"
	}
	fmt.Fprintf(&b, "process %d: %s (%s)\n", r.PID, exe, goVer)
	gcs := "collections unknown"
	if m.GCs >= 0 {
		gcs = fmt.Sprintf("%d collections", m.GCs)
	}
	fmt.Fprintf(&b, "observed:  %v, %s\n", time.Duration(m.WindowSeconds*float64(time.Second)).Round(time.Second), gcs)
	fmt.Fprintf(&b, "Go heap:   %s resident (%s, %d × 64 MiB arenas)\n", fit.FormatBytes(m.GoBytes), m.Method, m.Split.Arenas)
	fmt.Fprintf(&b, "non-Go:    %s anonymous outside the Go heap, %s kernel, %s hot file pages\n",
		fit.FormatBytes(m.AnonBytes), fit.FormatBytes(m.KernelBytes), fit.FormatBytes(m.HotFile))
	if m.MetricsAnonBytes != nil {
		fmt.Fprintf(&b, "           by the service's own metrics: %s anonymous outside the Go runtime\n", fit.FormatBytes(*m.MetricsAnonBytes))
	}
	if !m.Trusted {
		b.WriteString("           NOT TRUSTED: measure again later, under load\n")
	}
	for _, c := range m.Caveats {
		fmt.Fprintf(&b, "           - %s\n", c)
	}
	if r.MemoryLimitBytes > 0 {
		fmt.Fprintf(&b, "memory:    limit %s on %s\n", fit.FormatBytes(r.MemoryLimitBytes), r.MemoryGroup)
		fmt.Fprintf(&b, "GOMEMLIMIT that fits: %s (%s); the memory ratio alone: %s\n", fit.FormatBytes(r.GOMEMLIMIT), r.GOMEMLIMITReason, fit.FormatBytes(r.RatioGOMEMLIMIT))
	} else {
		fmt.Fprintf(&b, "memory:    no limit on %s: no GOMEMLIMIT to fit; declare the figure so one set later leaves room for it\n", r.MemoryGroup)
	}
	fmt.Fprintf(&b, "declare:   %s\n", r.Declaration)
	_, err := io.WriteString(w, b.String())
	return err
}

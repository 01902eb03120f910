package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/image"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
)

// ErrInterrupted means ctx ended the study; partial results were written
// (or could not be) and one line on stderr said which.
var ErrInterrupted = errors.New("interrupted")

// Main is `gofit lab`: it checks the options, runs the study in a fresh
// sandbox, writes results.json and report.html into o.Out and prints the
// summary (or, with o.JSON, results.json) to stdout. Errors from bad
// options wrap ErrUsage; an interrupted study returns ErrInterrupted.
func Main(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if o.Replay != "" {
		return replay(o, stdout)
	}
	cfg, err := o.Config()
	if err != nil {
		return err
	}
	// Before any minute is spent: can the results be written at all?
	undoOut, err := checkOut(o.Out)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	// A run that ends before writing anything leaves no new directory.
	defer undoOut()

	if o.Kube {
		if cfg.ImageRef == "" {
			cfg.Sample = true
			cfg.Target = sandbox.Target{URL: "http://127.0.0.1:{port}/work", ReadyTimeout: cfg.Target.ReadyTimeout}
		}
		cfg.Image = cfg.ImageRef
		start := time.Now()
		cfg.Progress = stderr
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stderr, "gofit lab: warning: %s\n", w)
		}
		res, rec, runErr := runPodStudy(ctx, cfg, o.KubeOptions, stderr)
		return finish(ctx, o, cfg, res, rec, runErr, start, stdout, stderr)
	}
	if cfg.Target.Path != "" {
		path, err := exec.LookPath(cfg.Target.Path)
		if err != nil {
			return fmt.Errorf("--cmd: %w", err)
		}
		if !strings.Contains(o.URL, "{port}") && !strings.Contains(o.Cmd, "{port}") {
			fmt.Fprintln(stderr, "gofit lab: note: neither --cmd nor --url contains {port}; every trial will use the same port")
		}
		cfg.Target.Path = path
	}

	sb, err := sandbox.New()
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
	// A temporary directory named for this process, so a later lab sweeps
	// it if this one is killed: the sample's binary and the reference's
	// copy live there.
	dir, err := sandbox.TempDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cfg.ImageRef != "" {
		if err := fromImage(ctx, &cfg, dir); err != nil {
			return err
		}
	}
	if cfg.Target.Path == "" {
		// The embedded sample: this very binary, copied so its page cache
		// can be evicted before each trial without touching the running
		// lab.
		self, err := os.Executable()
		if err != nil {
			return err
		}
		path := filepath.Join(dir, "gofit-sample")
		if err := copyFile(self, path); err != nil {
			return err
		}
		cfg.Target = sandbox.Target{Path: path, Args: []string{SampleCommand, "127.0.0.1:{port}"}, URL: "http://127.0.0.1:{port}/work"}
		cfg.Sample = true
	}
	// The health trials' reference runs beside the limited target: from
	// its own copy, so neither is charged for the other's page cache.
	cfg.RefTarget = cfg.Target
	cfg.RefTarget.Path = filepath.Join(dir, "reference-"+filepath.Base(cfg.Target.Path))
	if cfg.Target.Root != nil {
		// Inside the image's root, beside the original.
		cfg.RefTarget.Path = filepath.Join(filepath.Dir(cfg.Target.Path), ".gofit-reference-"+filepath.Base(cfg.Target.Path))
	}
	if err := copyFile(cfg.Target.Path, cfg.RefTarget.Path); err != nil {
		cfg.RefTarget = sandbox.Target{}
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("the health trials' reference shares %s with the limited run (%v): page cache one faults in is charged to the other", cfg.Target.Path, err))
	}
	cfg.Progress = stderr
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "gofit lab: warning: %s\n", w)
	}

	start := time.Now()
	res, rec, runErr := runStudy(ctx, sb, cfg)
	return finish(ctx, o, cfg, res, rec, runErr, start, stdout, stderr)
}

// finish writes what a study measured (partial when ctx ended it) and
// prints the summary or results.json.
func finish(ctx context.Context, o Options, cfg Config, res *result.Results, rec *Records, runErr error, start time.Time, stdout, stderr io.Writer) error {
	interrupted := ctx.Err() != nil
	paths, werr := report.Write(o.Out, res)
	if werr == nil && !res.Empty() {
		var p string
		p, werr = writeRecords(o.Out, cfg, rec)
		paths = append(paths, p)
	}
	if werr != nil && interrupted {
		// Still one line and the shell's code for SIGINT.
		fmt.Fprintf(stderr, "gofit lab: interrupted after %v; could not write partial results: %v\n", time.Since(start).Round(time.Second), werr)
		return ErrInterrupted
	}
	if werr != nil {
		return errors.Join(runErr, fmt.Errorf("write results: %w", werr))
	}
	if interrupted {
		fmt.Fprintf(stderr, "gofit lab: interrupted after %v; partial results in %s\n", time.Since(start).Round(time.Second), strings.Join(paths, ", "))
		return ErrInterrupted
	}
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		report.Summary(stdout, res)
		fmt.Fprintf(stdout, "written: %s\n", strings.Join(paths, ", "))
	}
	if runErr != nil {
		return fmt.Errorf("%w (results: %s)", runErr, strings.Join(paths, ", "))
	}
	return nil
}

// maxCopy bounds the executable copied for the reference.
const maxCopy = 1 << 30

// copyFile copies the executable src to dst, flushed so that dst's page
// cache can be dropped before each trial.
// replay is `gofit lab --replay DIR`: the records.json of an earlier run
// analysed again, by this gofit, into results.json and report.html in
// o.Out. Nothing runs: no sandbox, no root.
func replay(o Options, stdout io.Writer) error {
	for name := range o.Given {
		switch name {
		case "replay", "out", "json":
		default:
			return usagef("--replay %s: --%s has no effect on a replay (the records carry the study's configuration)", o.Replay, name)
		}
	}
	path := filepath.Join(o.Replay, "records.json")
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		if _, gzErr := os.Stat(path + ".gz"); gzErr == nil {
			path += ".gz"
		}
	}
	cfg, rec, err := readRecords(path)
	if err != nil {
		return fmt.Errorf("--replay: %w", err)
	}
	undoOut, err := checkOut(o.Out)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	defer undoOut()
	res := analyse(cfg, rec)
	paths, err := report.Write(o.Out, &res)
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	report.Summary(stdout, &res)
	fmt.Fprintf(stdout, "written: %s\n", strings.Join(paths, ", "))
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil {
		return err
	} else if !st.Mode().IsRegular() || st.Size() > maxCopy {
		return fmt.Errorf("%s: not a regular file of at most %d bytes", src, maxCopy)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// checkOut makes sure results can be written to dir before a study
// spends minutes: it creates dir if needed and writes and removes a file
// there. undo removes the directories it created while they are still
// empty, so a run that fails before writing results leaves nothing behind.
func checkOut(dir string) (undo func(), err error) {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("--out %s: not a directory", dir)
	}
	// The directories MkdirAll is about to create, deepest last, so that
	// undo can take them away again if the run writes nothing into them.
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		made = append([]string{d}, made...)
	}
	undo = func() {
		for i := len(made) - 1; i >= 0; i-- {
			if os.Remove(made[i]) != nil { // not empty: results are there
				return
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		undo()
		return nil, fmt.Errorf("--out: %w", err)
	}
	f, err := os.CreateTemp(dir, ".gofit-check-*")
	if err != nil {
		undo()
		return nil, fmt.Errorf("--out %s: cannot write there: %w", dir, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		undo()
		return nil, err
	}
	return undo, nil
}

// fromImage opens --image, unpacks it into dir and makes it the target:
// its entrypoint and cmd (or --args), env with PORT={port}, working
// directory and user, run in its root filesystem. Every check is made
// before any trial starts.
func fromImage(ctx context.Context, cfg *Config, dir string) error {
	im, err := image.Load(ctx, cfg.ImageRef, filepath.Join(dir, "rootfs"), dir)
	if err != nil {
		return err
	}
	argv := im.Command(cfg.ImageArgs)
	if len(argv) == 0 {
		return fmt.Errorf("%w: --image %s: --args is empty and the image has no entrypoint: nothing to run", ErrUsage, cfg.ImageRef)
	}
	_, onHost, err := im.Resolve(argv[0])
	if err != nil {
		return fmt.Errorf("--image %s: its command %q: %w", cfg.ImageRef, strings.Join(argv, " "), err)
	}
	env, dropped := load.WithoutRuntimeVars(im.Env)
	if len(dropped) > 0 {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("the image sets %s: left out, since each trial sets its own (the baseline none)", strings.Join(dropped, ", ")))
	}
	env = append(env, "PORT={port}")
	cfg.Target.Path, cfg.Target.Args, cfg.Target.Env = onHost, argv[1:], env
	cfg.Target.Root = &sandbox.Root{Dir: im.Root, Cwd: im.WorkingDir, UID: im.UID, GID: im.GID}
	cfg.Image = fmt.Sprintf("%s (%s, %s)", cfg.ImageRef, im.Digest, im.Platform)
	return nil
}

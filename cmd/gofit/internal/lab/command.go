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

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/report"
)

// ErrInterrupted means ctx ended the study; partial results were written
// (or could not be) and one line on stderr said which.
var ErrInterrupted = errors.New("interrupted")

// Main is `gofit lab`: it checks the options, runs the study on the
// runner op opens (the sandbox on this machine, or pods on a cluster's
// nodes: the command chooses), writes results.json and report.html into
// o.Out and prints the summary (or, with o.JSON, results.json) to stdout.
// Errors from bad options wrap ErrUsage; an interrupted study returns
// ErrInterrupted.
func Main(ctx context.Context, o Options, op trial.Opener, stdout, stderr io.Writer) error {
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
	cfg.Progress = stderr
	if err := op.Prepare(ctx, &cfg.Study); err != nil {
		return errors.Join(err, op.Close())
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stderr, "gofit lab: warning: %s\n", w)
	}

	start := time.Now()
	res, rec, runErr := runStudy(ctx, &cfg, op)
	if err := op.Close(); err != nil {
		runErr = errors.Join(runErr, err)
	}
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

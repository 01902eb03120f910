package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"syscall"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/target"
)

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	root := fs.String("root", "/", "read /proc and /sys under this directory")
	dry := fs.Bool("dry-run", false, "print the environment gofit would set, and why, instead of running CMD")
	asJSON := fs.Bool("json", false, "with --dry-run, print JSON (an error without --dry-run)")
	var pf planFlags
	pf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit run [flags] -- CMD [ARGS...]\n\nSets GOMAXPROCS and GOMEMLIMIT (and GOGC with --gogc) for CMD from the container's limits,\nunless the user already set them, then execs CMD in place (same PID, signals and exit status).\nValues it sets replace any invalid or empty ones and are recorded in "+fit.MarkerVar+".\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cmdArgs := fs.Args()
	if len(cmdArgs) == 0 {
		return fmt.Errorf("%w: missing CMD (gofit run [flags] -- CMD [ARGS...])", errUsage)
	}
	if *asJSON && !*dry {
		return fmt.Errorf("%w: --json needs --dry-run: gofit run prints nothing of its own when it runs CMD", errUsage)
	}
	policy, err := pf.policy()
	if err != nil {
		return err
	}
	path, err := exec.LookPath(cmdArgs[0])
	if err != nil {
		return fmt.Errorf("command %q: %w", cmdArgs[0], err)
	}
	nonGo, err := pf.declaredNonGo(os.LookupEnv)
	if err != nil {
		return err
	}
	p, err := runPlan(*root, path, pf.cpus, policy, nonGo, os.LookupEnv)
	if err != nil {
		return err
	}
	if *dry {
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"command": path, "export": p.Export, "unset": nonNil(p.Unset),
				"reasons": nonNil(p.Reasons), "warnings": nonNil(p.Warnings)})
		}
		keys := make([]string, 0, len(p.Export))
		for k := range p.Export {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(stdout, "%s=%s\n", k, p.Export[k])
		}
		for _, k := range p.Unset {
			fmt.Fprintf(stdout, "# unset %s: a value an earlier gofit exported that this plan does not want\n", k)
		}
		for _, r := range p.Reasons {
			fmt.Fprintf(stdout, "# %s\n", r.Text)
		}
		for _, w := range p.Warnings {
			fmt.Fprintf(stdout, "# warning: %s\n", w.Text)
		}
		return nil
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(stderr, "gofit run: warning: %s\n", w.Text)
	}
	err = syscall.Exec(path, cmdArgs, p.Environ(os.Environ()))
	return fmt.Errorf("exec %s: %w", path, err)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// runPlan is the plan for the binary at path about to run in this
// process's container, with the environment lookup gives and the non-Go
// memory the user declares (none: the plan is the ratio; nothing is
// measured before the process runs). Outside any cgroup it changes nothing.
// The declaration is not exported: gofit's library inside the process
// measures its non-Go memory itself, and what it measures wins.
func runPlan(root, path string, cpus int, policy fit.Policy, nonGo fit.NonGo, lookup func(string) (string, bool)) (fit.Plan, error) {
	c, err := cgroup.NewFS(root).Self()
	if errors.Is(err, cgroup.ErrNoCgroup) {
		return fit.Plan{Export: map[string]string{}, Reasons: []fit.Note{{Var: "GOMAXPROCS", Code: string(fit.ReasonNoLimit), Text: "no cgroup found: nothing to set"}}}, nil
	}
	if err != nil {
		return fit.Plan{}, err
	}
	defer c.Close()
	l, err := c.Limits()
	if err != nil {
		return fit.Plan{}, err
	}
	b, err := target.Read(path)
	if err != nil && !errors.Is(err, target.ErrNotELF) {
		return fit.Plan{}, err
	}
	// A script gets an unknown Go version.
	return policy.Plan(b.Input(l, cpus, lookupVars(lookup), nonGo)), nil
}

// lookupVars reads the Go runtime variables the policy looks at.
func lookupVars(lookup func(string) (string, bool)) map[string]string {
	vars := map[string]string{}
	for _, k := range fit.VarNames() {
		if v, ok := lookup(k); ok {
			vars[k] = v
		}
	}
	return vars
}

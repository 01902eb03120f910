package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"syscall"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	root := fs.String("root", "/", "read /proc and /sys under this directory")
	dry := fs.Bool("dry-run", false, "print the environment gofit would set, and why, instead of running CMD")
	asJSON := fs.Bool("json", false, "with --dry-run, print JSON")
	var pf planFlags
	pf.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit run [flags] -- CMD [ARGS...]\n\nSets GOMAXPROCS and GOMEMLIMIT (and GOGC with --gogc) for CMD from the container's limits,\nunless already set, then execs CMD in place (same PID, signals and exit status).\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cmdArgs := fs.Args()
	if len(cmdArgs) == 0 {
		return fmt.Errorf("%w: missing CMD (gofit run [flags] -- CMD [ARGS...])", errUsage)
	}
	opts, err := pf.options()
	if err != nil {
		return err
	}
	path, err := exec.LookPath(cmdArgs[0])
	if err != nil {
		return fmt.Errorf("command %q: %w", cmdArgs[0], err)
	}
	env, p, err := runEnv(*root, path, pf.cpus, opts)
	if err != nil {
		return err
	}
	if *dry {
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"command": path, "env": env, "reasons": nonNil(p.Reasons), "warnings": nonNil(p.Warnings)})
		}
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(stdout, "%s=%s\n", k, env[k])
		}
		for _, r := range p.Reasons {
			fmt.Fprintf(stdout, "# %s\n", r)
		}
		for _, w := range p.Warnings {
			fmt.Fprintf(stdout, "# warning: %s\n", w)
		}
		return nil
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(stderr, "gofit run: warning: %s\n", w)
	}
	environ := os.Environ()
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	err = syscall.Exec(path, cmdArgs, environ)
	return fmt.Errorf("exec %s: %w", path, err)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runEnv computes the variables to add for the target binary at path.
// Outside any cgroup it adds nothing.
func runEnv(root, path string, cpus int, opts fit.Options) (map[string]string, fit.Plan, error) {
	c, err := cgroup.NewFS(root).Self()
	if errors.Is(err, cgroup.ErrNoCgroup) {
		return map[string]string{}, fit.Plan{Reasons: []string{"no cgroup found: nothing to set"}}, nil
	}
	if err != nil {
		return nil, fit.Plan{}, err
	}
	l, err := c.Limits()
	if err != nil {
		return nil, fit.Plan{}, err
	}
	in := gofit.SelfInput(l)
	if cpus > 0 {
		in.CPUs = cpus
	}
	env, p := gofit.TargetEnv(in, path, opts)
	return env, p, nil
}

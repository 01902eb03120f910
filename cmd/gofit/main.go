// Command gofit makes Go services fit their containers.
//
//	gofit inspect [--root DIR] [--json]     what the container allows, uses, and the plan
//	gofit inspect --pid PID [--window D]    a running Go process's non-Go memory and the GOMEMLIMIT that fits it
//	gofit run [flags] -- CMD [ARGS...]      set GOMAXPROCS/GOMEMLIMIT for any Go binary, then exec it
//	gofit lab [flags]                       measure a service under real cgroup limits
//	gofit webhook --cert-file F --key-file F  admission webhook: fit pods at creation
//	gofit node [plan|experiment] [flags]    node memory-QoS agent, its plan mode and experiment
//	gofit experiment report [flags]         judge experiment arms on live traffic (Prometheus)
//	gofit fleet --prometheus URL [flags]    Go-aware plans for every Go container from Prometheus
//	gofit version [--json]                  version, commit, Go version, policy defaults
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/pods"
)

// errUsage marks errors that come from bad command-line input (exit 2).
var errUsage = errors.New("usage")

type command struct {
	name, args, summary string
	run                 func(args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"inspect", "[--root DIR] [--json] [--pid PID]", "show the container's limits, usage and the plan; --pid: a running process's non-Go memory", runInspect},
		{"run", "[flags] -- CMD [ARGS...]", "set GOMAXPROCS/GOMEMLIMIT for a Go binary, then exec it", runRun},
		{"lab", "[flags]", "measure a service under real cgroup limits and recommend settings", runLab},
		{"webhook", "[flags]", "serve the admission webhook that fits pods at creation (deploy/webhook)", runWebhook},
		{"node", "[plan|experiment] [flags]", "node agent: memory QoS for pod cgroups (DaemonSet)", runNode},
		{"experiment", "report [flags]", "judge an experiment's arms on live traffic from Prometheus", runExperiment},
		{"fleet", "--prometheus URL [flags]", "Go-aware requests, limits and Go settings for every Go container, from Prometheus", runFleet},
		{"rightsize", "--prometheus URL [flags]", "try fleet's plan on a few live pods of opted-in workloads, judge it, promote it", runRightsize},
		{"version", "[--json]", "print the version, commit, Go version and policy defaults", runVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "gofit makes Go services fit their containers.\n\nUsage:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  gofit %-10s %-26s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'gofit COMMAND -h' for a command's flags.")
}

func main() {
	sandbox.MaybeExec() // the lab's image helper (gofit lab --image): never returns when asked for
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs gofit with args and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	// Hidden: the lab's sample service, and its load pod's server
	// (gofit lab --kube).
	cmds := append(commands(), command{name: lab.SampleCommand, run: runLabSample}, command{name: pods.LoadCommand, run: runLabLoad})
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "gofit %s: %v\n", c.name, err)
			return 2
		}
		var ex exitError
		if errors.As(err, &ex) {
			return ex.code
		}
		fmt.Fprintf(stderr, "gofit %s: %v\n", c.name, err)
		return 1
	}
	fmt.Fprintf(stderr, "gofit: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// exitError carries a child's exit status through Main without a message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gofit "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/report"
	"github.com/gofit-dev/gofit/target"
)

// planFlags are the flags shared by inspect and run: the policy's own
// (fit.BindFlags) and what they know of the process.
type planFlags struct {
	policyFlags *fit.Flags
	cpus        int
	nonGo       string // --non-go, or GOFIT_NON_GO when the flag is not given
}

// NonGoVar declares non-Go memory for `gofit run` and `gofit inspect`, as
// the --non-go flag does (the flag wins).
const NonGoVar = nongo.EnvVar

func (p *planFlags) register(fs *flag.FlagSet) {
	p.policyFlags = fit.BindFlags(fs)
	fs.IntVar(&p.cpus, "cpus", 0, "CPUs the process may use (default: this process's affinity mask)")
	fs.StringVar(&p.nonGo, "non-go", "", "memory the process's cgroup is charged that GOMEMLIMIT does not bound and cannot be reclaimed\n(off-heap caches, cgo), e.g. 48Mi, 64MiB or bytes; GOMEMLIMIT leaves room for it (default: "+NonGoVar+", else none: the ratio)")
}

// declaredNonGo is the non-Go memory the user declares: --non-go, else
// lookup's GOFIT_NON_GO, else none.
func (p *planFlags) declaredNonGo(lookup func(string) (string, bool)) (fit.NonGo, error) {
	name, v := "--non-go", p.nonGo
	if v == "" {
		var ok bool
		if v, ok = lookup(NonGoVar); !ok || v == "" {
			return fit.NonGo{}, nil
		}
		name = NonGoVar
	}
	n, err := parseSize(v)
	if err != nil {
		return fit.NonGo{}, fmt.Errorf("%w: %s %q: %v", errUsage, name, v, err)
	}
	// Declared memory is taken as anonymous: it cannot be reclaimed.
	return fit.NonGo{Anon: n}, nil
}

// parseSize reads a byte count as GOMEMLIMIT writes one (64MiB, 1GiB,
// 50331648) or as Kubernetes quantities do in binary units (48Mi, 1Gi).
func parseSize(s string) (int64, error) {
	for _, u := range []string{"Ki", "Mi", "Gi", "Ti"} {
		if strings.HasSuffix(s, u) {
			s += "B"
			break
		}
	}
	n, err := fit.ParseMemLimit(s)
	if s == "off" || err != nil {
		return 0, errors.New("want a size such as 48Mi, 64MiB or 50331648")
	}
	return n, nil
}

// policy is the policy the flags ask for.
func (p *planFlags) policy() (fit.Policy, error) {
	if p.cpus < 0 {
		return fit.Policy{}, fmt.Errorf("%w: --cpus %d: must be positive", errUsage, p.cpus)
	}
	o, err := p.policyFlags.Options()
	if err != nil {
		return fit.Policy{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	pol, err := fit.New(o)
	if err != nil {
		return fit.Policy{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return pol, nil
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	root := fs.String("root", "/", "read /proc and /sys under this directory (for fixture trees)")
	asJSON := fs.Bool("json", false, "print JSON")
	var pf planFlags
	pf.register(fs)
	var pidf pidFlags
	pidf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	policy, err := pf.policy()
	if err != nil {
		return err
	}
	if pidf.set() {
		return runInspectPID(*root, pidf, pf.cpus, policy, *asJSON, stdout)
	}
	nonGo, err := pf.declaredNonGo(os.LookupEnv)
	if err != nil {
		return err
	}
	r, err := inspect(*root, pf.cpus, policy, nonGo)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteText(stdout)
}

// inspect reports on this process's container, with the plan for a Go
// binary like gofit itself started in it (as `gofit run` would plan).
func inspect(root string, cpus int, policy fit.Policy, nonGo fit.NonGo) (report.Report, error) {
	c, err := cgroup.NewFS(root).Self()
	if err != nil {
		return report.Report{}, err
	}
	defer c.Close()
	l, err := c.Limits()
	if err != nil {
		return report.Report{}, err
	}
	s, err := c.Stats()
	if err != nil {
		return report.Report{}, err
	}
	in := target.Self().Input(l, cpus, lookupVars(os.LookupEnv), nonGo)
	return report.New(c, l, s, in, policy.Plan(in)), nil
}

package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/fit"
)

// planFlags are the policy flags shared by inspect and run.
type planFlags struct {
	ratio float64
	ceil  bool
	gogc  string
	cpus  int
}

func (p *planFlags) register(fs interface {
	Float64Var(*float64, string, float64, string)
	BoolVar(*bool, string, bool, string)
	StringVar(*string, string, string, string)
	IntVar(*int, string, int, string)
}) {
	fs.Float64Var(&p.ratio, "memory-ratio", fit.DefaultMemoryRatio, "share of the memory limit for GOMEMLIMIT, in (0,1)")
	fs.BoolVar(&p.ceil, "ceil", false, "round a fractional CPU limit up instead of down")
	fs.StringVar(&p.gogc, "gogc", "", "also set GOGC (e.g. off or 200) with GOMEMLIMIT: use the memory you pay for")
	fs.IntVar(&p.cpus, "cpus", 0, "CPUs the process may use (default: this process's affinity mask)")
}

func (p *planFlags) options() (fit.Options, error) {
	if p.ratio <= 0 || p.ratio >= 1 {
		return fit.Options{}, fmt.Errorf("%w: --memory-ratio %g: must be between 0 and 1", errUsage, p.ratio)
	}
	if p.cpus < 0 {
		return fit.Options{}, fmt.Errorf("%w: --cpus %d: must be positive", errUsage, p.cpus)
	}
	if p.gogc != "" && p.gogc != "off" {
		var n int
		if _, err := fmt.Sscanf(p.gogc, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != p.gogc {
			return fit.Options{}, fmt.Errorf("%w: --gogc %q: want off or a positive integer", errUsage, p.gogc)
		}
	}
	o := fit.Options{MemoryRatio: p.ratio, GOGC: p.gogc}
	if p.ceil {
		o.Rounding = fit.Ceil
	}
	return o, nil
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	root := fs.String("root", "/", "read /proc and /sys under this directory (for fixture trees)")
	asJSON := fs.Bool("json", false, "print JSON")
	var pf planFlags
	pf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	opts, err := pf.options()
	if err != nil {
		return err
	}
	r, err := inspect(*root, pf.cpus, opts)
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

func inspect(root string, cpus int, opts fit.Options) (gofit.Report, error) {
	c, err := cgroup.NewFS(root).Self()
	if err != nil {
		return gofit.Report{}, err
	}
	l, err := c.Limits()
	if err != nil {
		return gofit.Report{}, err
	}
	s, err := c.Stats()
	if err != nil {
		return gofit.Report{}, err
	}
	in := gofit.SelfInput(l)
	if cpus > 0 {
		in.CPUs = cpus
	}
	return gofit.NewReport(c, l, s, in, fit.Compute(in, opts)), nil
}

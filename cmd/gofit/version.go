package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/buildinfo"
	"github.com/gofit-dev/gofit/fit"
)

// versionReport is `gofit version --json`.
type versionReport struct {
	buildinfo.Info
	Policy policyDefaults `json:"policy"`
}

// policyDefaults are the options every surface starts from when no flag
// or variable sets them (fit.Policy's zero value, defaults filled in).
type policyDefaults struct {
	MemoryRatio      float64 `json:"memory_ratio"`
	Rounding         string  `json:"rounding"`
	CPURequestFactor float64 `json:"cpu_request_factor"`
	CPURequestMin    int     `json:"cpu_request_min"`
	GOGC             string  `json:"gogc"`
}

func defaults() policyDefaults {
	o := fit.Policy{}.Options()
	r := "floor"
	if o.Rounding == fit.Ceil {
		r = "ceil"
	}
	return policyDefaults{MemoryRatio: o.MemoryRatio, Rounding: r, CPURequestFactor: o.CPURequestFactor,
		CPURequestMin: o.CPURequestMin, GOGC: o.GOGC}
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	asJSON := fs.Bool("json", false, "print JSON, with the Go modules linked in")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	info := buildinfo.Read()
	rep := versionReport{Info: info, Policy: defaults()}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	commit := info.Commit
	if commit == "" {
		commit = "unknown"
	}
	if info.CommitTime != "" {
		commit += " (" + info.CommitTime + ")"
	}
	if info.Modified {
		commit += ", modified"
	}
	p := rep.Policy
	gogc, factor := p.GOGC, fmt.Sprint(p.CPURequestFactor)
	if gogc == "" {
		gogc = "left alone"
	}
	if p.CPURequestFactor == 0 {
		factor = "off"
	}
	_, err := fmt.Fprintf(stdout, "gofit %s\ncommit:  %s\ngo:      %s %s\npolicy defaults: memory ratio %g, rounding %s, CPU request factor %s, CPU request minimum %d, GOGC %s\n",
		info.Version, commit, info.GoVersion, info.Platform, p.MemoryRatio, p.Rounding, factor, p.CPURequestMin, gogc)
	return err
}

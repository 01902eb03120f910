// Package envconfig turns the GOFIT_* environment variables into options
// for the runtime library, for the auto package (which has no other way to
// be configured). GOFIT itself (on or off) is read by the library.
package envconfig

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/fit"
)

// Config is what the GOFIT_* variables ask for.
//
//	GOFIT_REFRESH=1s          how often limits are re-read (at least gofit.MinRefresh)
//	GOFIT_MEMORY_RATIO=0.9    share of the memory limit for GOMEMLIMIT
//	GOFIT_CPU_ROUNDING=floor  floor or ceil for a fractional CPU limit
//	GOFIT_GOGC=off            opt in: set GOGC (off or a percentage) with GOMEMLIMIT
//	GOFIT_CPU_REQUEST_FACTOR=1  opt in: without a CPU limit, GOMAXPROCS = ceil(request × factor)
//	GOFIT_CPU_REQUEST_MIN=2   the least GOMAXPROCS from a request (1 or 2)
//	GOFIT_LOG=warn            log level on stderr (debug, info, warn, error, off)
type Config struct {
	Options  []gofit.Option
	LogLevel slog.Level
	LogOff   bool
	// Errors name each variable with a bad value; the others still apply.
	Errors []error
}

// Read reads the variables through lookup (os.LookupEnv when nil).
func Read(lookup func(string) (string, bool)) Config {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := Config{LogLevel: slog.LevelWarn}
	bad := func(name, v string, err error) {
		c.Errors = append(c.Errors, fmt.Errorf("%s=%q: %w", name, v, err))
	}
	if v, ok := lookup("GOFIT_REFRESH"); ok {
		d, err := time.ParseDuration(v)
		if err == nil {
			err = gofit.ValidRefresh(d)
		}
		if err != nil {
			bad("GOFIT_REFRESH", v, err)
		} else {
			c.Options = append(c.Options, gofit.WithRefresh(d))
		}
	}
	// number reads a float variable, validated by the policy's own check.
	number := func(name string, valid func(float64) error, option func(float64) gofit.Option) {
		v, ok := lookup(name)
		if !ok {
			return
		}
		f, err := strconv.ParseFloat(v, 64)
		if err == nil {
			err = valid(f)
		}
		if err != nil {
			bad(name, v, err)
		} else {
			c.Options = append(c.Options, option(f))
		}
	}
	number("GOFIT_MEMORY_RATIO", fit.ValidMemoryRatio, gofit.WithMemoryRatio)
	if v, ok := lookup("GOFIT_CPU_ROUNDING"); ok {
		switch v {
		case "floor":
			c.Options = append(c.Options, gofit.WithRounding(fit.Floor))
		case "ceil":
			c.Options = append(c.Options, gofit.WithRounding(fit.Ceil))
		default:
			bad("GOFIT_CPU_ROUNDING", v, fmt.Errorf("want floor or ceil"))
		}
	}
	if v, ok := lookup("GOFIT_GOGC"); ok {
		if err := fit.ValidGOGC(v); err != nil {
			bad("GOFIT_GOGC", v, err)
		} else {
			c.Options = append(c.Options, gofit.WithGOGC(v))
		}
	}
	number("GOFIT_CPU_REQUEST_FACTOR", fit.ValidCPURequestFactor, gofit.WithCPURequestFactor)
	if v, ok := lookup("GOFIT_CPU_REQUEST_MIN"); ok {
		switch v {
		case "1", "2":
			c.Options = append(c.Options, gofit.WithCPURequestMin(int(v[0]-'0')))
		default:
			bad("GOFIT_CPU_REQUEST_MIN", v, fmt.Errorf("want 1 or 2"))
		}
	}
	if v, ok := lookup("GOFIT_LOG"); ok && v != "" {
		if strings.EqualFold(v, "off") {
			c.LogOff = true
		} else if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			c.LogLevel = slog.LevelWarn
			bad("GOFIT_LOG", v, fmt.Errorf("want debug, info, warn, error or off"))
		}
	}
	return c
}

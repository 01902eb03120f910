// Package envconfig turns the GOFIT_* environment variables into settings
// for the auto package (which has no other way to be configured). GOFIT
// itself (on or off) is read by the library. It knows nothing of the
// library: auto, which imports both, turns the settings into options.
package envconfig

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/fit"
)

// Config is what the GOFIT_* variables ask for: the policy's options
// (fit.ReadEnv reads them) and
//
//	GOFIT_REFRESH=1s          how often limits are re-read (checked by Read's caller)
//	GOFIT_LOG=warn            log level on stderr (debug, info, warn, error, off)
type Config struct {
	Policy fit.Options // for gofit.WithPolicy
	// Refresh is GOFIT_REFRESH (for gofit.WithRefresh); 0 when unset or bad.
	Refresh  time.Duration
	LogLevel slog.Level
	LogOff   bool
	// Errors name each variable with a bad value; the others still apply.
	Errors []error
}

// Read reads the variables through lookup (os.LookupEnv when nil).
// validRefresh checks GOFIT_REFRESH's interval (gofit.ValidRefresh: the
// library owns its bounds).
func Read(lookup func(string) (string, bool), validRefresh func(time.Duration) error) Config {
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
			err = validRefresh(d)
		}
		if err != nil {
			bad("GOFIT_REFRESH", v, err)
		} else {
			c.Refresh = d
		}
	}
	var errs []error
	c.Policy, errs = fit.ReadEnv(lookup)
	c.Errors = append(c.Errors, errs...)
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

package gofit

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gofit-dev/gofit/fit"
)

// EnvOptions turns the GOFIT_* environment variables into options. Each
// problem names the variable; options for the valid ones are still returned.
//
//	GOFIT=off                 disable gofit entirely (Start returns ErrDisabled)
//	GOFIT_REFRESH=1s          how often limits are re-read
//	GOFIT_MEMORY_RATIO=0.9    share of the memory limit for GOMEMLIMIT
//	GOFIT_CPU_ROUNDING=floor  floor or ceil for a fractional CPU limit
//	GOFIT_GOGC=off            opt in: set GOGC (off or a percentage) with GOMEMLIMIT
//	GOFIT_LOG=warn            auto only: log level on stderr (debug, info, warn, error, off)
func EnvOptions(lookup func(string) (string, bool)) ([]Option, []error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var opts []Option
	var errs []error
	if v, ok := lookup("GOFIT_REFRESH"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("GOFIT_REFRESH=%q: want a positive duration such as 1s or 500ms", v))
		} else {
			opts = append(opts, WithRefresh(d))
		}
	}
	if v, ok := lookup("GOFIT_MEMORY_RATIO"); ok {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r >= 1 {
			errs = append(errs, fmt.Errorf("GOFIT_MEMORY_RATIO=%q: want a number between 0 and 1, such as 0.9", v))
		} else {
			opts = append(opts, WithMemoryRatio(r))
		}
	}
	if v, ok := lookup("GOFIT_CPU_ROUNDING"); ok {
		switch v {
		case "floor":
			opts = append(opts, WithRounding(fit.Floor))
		case "ceil":
			opts = append(opts, WithRounding(fit.Ceil))
		default:
			errs = append(errs, fmt.Errorf("GOFIT_CPU_ROUNDING=%q: want floor or ceil", v))
		}
	}
	if v, ok := lookup("GOFIT_GOGC"); ok {
		if err := ValidGOGC(v); err != nil {
			errs = append(errs, fmt.Errorf("GOFIT_GOGC=%q: %v", v, err))
		} else {
			opts = append(opts, WithGOGC(v))
		}
	}
	return opts, errs
}

// ValidGOGC accepts "off" or a positive integer percentage.
func ValidGOGC(v string) error {
	if v == "off" {
		return nil
	}
	if n, err := strconv.Atoi(v); err != nil || n <= 0 {
		return fmt.Errorf("want off or a positive integer such as 200")
	}
	return nil
}

// EnvLogLevel reads GOFIT_LOG; ok is false for "off".
func EnvLogLevel(lookup func(string) (string, bool)) (level slog.Level, ok bool, err error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, set := lookup("GOFIT_LOG")
	if !set || v == "" {
		return slog.LevelWarn, true, nil
	}
	if strings.EqualFold(v, "off") {
		return 0, false, nil
	}
	if err := level.UnmarshalText([]byte(v)); err != nil {
		return slog.LevelWarn, true, fmt.Errorf("GOFIT_LOG=%q: want debug, info, warn, error or off", v)
	}
	return level, true, nil
}

// Package auto fits the process to its container at init, before main, and
// keeps it fitted:
//
//	import _ "github.com/gofit-dev/gofit/auto"
//
// It is configured by environment variables (see gofit.EnvOptions) and logs
// warnings to stderr (GOFIT_LOG=off silences it). Outside a container, or
// with GOFIT=off, it does nothing.
package auto

import (
	"context"
	"expvar"
	"log/slog"
	"os"

	"github.com/gofit-dev/gofit"
)

var fitter *gofit.Fitter

func init() {
	level, on, lerr := gofit.EnvLogLevel(nil)
	var logger *slog.Logger
	if on {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	}
	opts, errs := gofit.EnvOptions(nil)
	if lerr != nil {
		errs = append(errs, lerr)
	}
	for _, err := range errs {
		if logger != nil {
			logger.Warn("gofit: ignoring setting", "err", err)
		}
	}
	if logger != nil {
		opts = append(opts, gofit.WithLogger(logger))
	}
	f, err := gofit.Start(context.Background(), opts...)
	if err != nil {
		if logger != nil && err != gofit.ErrDisabled {
			logger.Debug("gofit: not active", "err", err)
		}
		return
	}
	fitter = f
	expvar.Publish("gofit", expvar.Func(func() any {
		r, err := f.Report()
		if err != nil {
			return map[string]string{"error": err.Error()}
		}
		return r
	}))
}

// Fitter is the running Fitter, or nil when gofit is not active (no
// cgroup, or GOFIT=off). Pass it to metrics.NewCollector.
func Fitter() *gofit.Fitter { return fitter }

// Package auto fits the process to its container at init, before main, and
// keeps it fitted:
//
//	import _ "github.com/gofit-dev/gofit/auto"
//
// It is configured by environment variables (GOFIT, GOFIT_REFRESH,
// GOFIT_MEMORY_RATIO, GOFIT_CPU_ROUNDING, GOFIT_GOGC,
// GOFIT_CPU_REQUEST_FACTOR, GOFIT_CPU_REQUEST_MIN, GOFIT_LOG; see
// docs/library.md) and logs to stderr at warn level by default (GOFIT_LOG=off
// silences it). When it cannot fit the process (no cgroup, unreadable
// limits, a bad GOFIT value) it logs "gofit not active" with the reason
// and changes nothing. It registers nothing: no HTTP handler, no expvar,
// no metrics (see packages debugvars and metrics to opt in).
package auto

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/auto/internal/envconfig"
)

var fitter *gofit.Fitter

func init() {
	fitter = start(context.Background(), os.LookupEnv, os.Stderr)
}

// start reads the configuration through lookup, logs to w and starts a
// Fitter; nil when gofit is not active. extra options come last (tests).
func start(ctx context.Context, lookup func(string) (string, bool), w io.Writer, extra ...gofit.Option) *gofit.Fitter {
	cfg := envconfig.Read(lookup, gofit.ValidRefresh)
	logger := slog.New(slog.DiscardHandler)
	if !cfg.LogOff {
		logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: cfg.LogLevel}))
	}
	for _, err := range cfg.Errors {
		logger.Warn("gofit: ignoring setting", "err", err)
	}
	// The environment gofit reads (GOFIT, GOMAXPROCS, ...) comes through the
	// same lookup as the configuration.
	opts := []gofit.Option{gofit.WithPolicy(cfg.Policy), gofit.WithLogger(logger), gofit.WithLookupEnv(lookup)}
	if cfg.Refresh != 0 {
		opts = append(opts, gofit.WithRefresh(cfg.Refresh))
	}
	f, err := gofit.Start(ctx, append(opts, extra...)...)
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, gofit.ErrDisabled) {
			level = slog.LevelInfo // asked for: not worth a warning
		}
		logger.Log(ctx, level, "gofit not active", "why", err)
		return nil
	}
	return f
}

// Fitter is the running Fitter, or nil when gofit is not active (no
// cgroup, or GOFIT=off). Pass it to metrics.NewCollector or
// debugvars.Publish.
func Fitter() *gofit.Fitter { return fitter }

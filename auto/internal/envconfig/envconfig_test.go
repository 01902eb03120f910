package envconfig

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/fit"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// atLeast100ms stands in for gofit.ValidRefresh, which this package does
// not import.
func atLeast100ms(d time.Duration) error {
	if d < 100*time.Millisecond {
		return fmt.Errorf("refresh interval %v: want at least 100ms", d)
	}
	return nil
}

func read(lookup func(string) (string, bool)) Config { return Read(lookup, atLeast100ms) }

func TestRead(t *testing.T) {
	c := read(env("GOFIT_REFRESH", "250ms", "GOFIT_MEMORY_RATIO", "0.8", "GOFIT_CPU_ROUNDING", "ceil", "GOFIT_GOGC", "200", "GOFIT_LOG", "info"))
	if c.Refresh != 250*time.Millisecond || len(c.Errors) != 0 || c.LogLevel != slog.LevelInfo || c.LogOff {
		t.Fatalf("refresh %v, level %v off %v, errors %v", c.Refresh, c.LogLevel, c.LogOff, c.Errors)
	}
	if want := (fit.Options{MemoryRatio: 0.8, Rounding: fit.Ceil, GOGC: "200"}); c.Policy != want {
		t.Errorf("policy %+v, want %+v", c.Policy, want)
	}
	c = read(env("GOFIT_CPU_REQUEST_FACTOR", "1.5", "GOFIT_CPU_REQUEST_MIN", "1"))
	if want := (fit.Options{CPURequestFactor: 1.5, CPURequestMin: 1}); c.Policy != want || len(c.Errors) != 0 {
		t.Errorf("request factor and minimum: policy %+v, errors %v", c.Policy, c.Errors)
	}
	// 0 is the factor's off, as in fit.Options and --cpu-request-factor.
	if c := read(env("GOFIT_CPU_REQUEST_FACTOR", "0")); c.Policy != (fit.Options{}) || len(c.Errors) != 0 {
		t.Errorf("factor 0: policy %+v, errors %v", c.Policy, c.Errors)
	}
	if c := read(env("GOFIT_LOG", "OFF")); !c.LogOff {
		t.Error("GOFIT_LOG=OFF does not silence")
	}
	if c := read(env()); c.LogLevel != slog.LevelWarn || c.LogOff || c.Refresh != 0 || c.Policy != (fit.Options{}) {
		t.Errorf("defaults: %+v", c)
	}
}

func TestReadRejects(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"GOFIT_REFRESH", "soon"}, {"GOFIT_REFRESH", "1ns"}, {"GOFIT_REFRESH", "0s"}, {"GOFIT_REFRESH", "-1s"},
		{"GOFIT_MEMORY_RATIO", "90"}, {"GOFIT_MEMORY_RATIO", "NaN"}, {"GOFIT_MEMORY_RATIO", "Inf"}, {"GOFIT_MEMORY_RATIO", "-Inf"},
		{"GOFIT_MEMORY_RATIO", "1e400"}, {"GOFIT_MEMORY_RATIO", "0"}, {"GOFIT_MEMORY_RATIO", ""},
		{"GOFIT_CPU_ROUNDING", "up"},
		{"GOFIT_GOGC", "-5"}, {"GOFIT_GOGC", "lots"},
		{"GOFIT_LOG", "loud"},
		{"GOFIT_CPU_REQUEST_FACTOR", "-1"}, {"GOFIT_CPU_REQUEST_FACTOR", "NaN"}, {"GOFIT_CPU_REQUEST_FACTOR", "+Inf"},
		{"GOFIT_CPU_REQUEST_FACTOR", "-Inf"}, {"GOFIT_CPU_REQUEST_FACTOR", "100"},
		{"GOFIT_CPU_REQUEST_MIN", "0"}, {"GOFIT_CPU_REQUEST_MIN", "3"},
	} {
		c := read(env(tc.name, tc.value))
		if c.Refresh != 0 || c.Policy != (fit.Options{}) || len(c.Errors) != 1 || !strings.Contains(c.Errors[0].Error(), tc.name) {
			t.Errorf("%s=%s: refresh %v, errors %v; want one error naming the variable", tc.name, tc.value, c.Refresh, c.Errors)
		}
	}
}

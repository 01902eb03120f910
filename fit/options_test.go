package fit

import (
	"errors"
	"flag"
	"io"
	"math"
	"strings"
	"testing"
)

// parseFlags binds every option on a fresh flag set and parses args.
func parseFlags(t *testing.T, args ...string) (Options, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return f.Options()
}

// Every option reads the same from a flag and from its variable, and a
// bad value fails the same way on both, naming where it came from.
func TestFlagsAndEnvAgree(t *testing.T) {
	for _, tc := range []struct {
		flag, env, value string
		want             Options
		bad              string // the error's text; "" for none
	}{
		{"memory-ratio", "GOFIT_MEMORY_RATIO", "0.75", Options{MemoryRatio: 0.75}, ""},
		{"gogc", "GOFIT_GOGC", "off", Options{GOGC: "off"}, ""},
		{"cpu-request-factor", "GOFIT_CPU_REQUEST_FACTOR", "1.5", Options{CPURequestFactor: 1.5}, ""},
		{"cpu-request-factor", "GOFIT_CPU_REQUEST_FACTOR", "0", Options{}, ""},
		{"cpu-request-min", "GOFIT_CPU_REQUEST_MIN", "1", Options{CPURequestMin: 1}, ""},
		{"memory-ratio", "GOFIT_MEMORY_RATIO", "0", Options{}, "memory ratio 0: want a number between 0 and 1"},
		{"memory-ratio", "GOFIT_MEMORY_RATIO", "1", Options{}, "memory ratio 1:"},
		{"memory-ratio", "GOFIT_MEMORY_RATIO", "lots", Options{}, `"lots" is not a number`},
		{"gogc", "GOFIT_GOGC", "-5", Options{}, `GOGC "-5"`},
		{"cpu-request-factor", "GOFIT_CPU_REQUEST_FACTOR", "17", Options{}, "CPU request factor 17"},
		{"cpu-request-min", "GOFIT_CPU_REQUEST_MIN", "3", Options{}, "CPU request minimum 3: want 1 or 2"},
		{"cpu-request-min", "GOFIT_CPU_REQUEST_MIN", "0", Options{}, "CPU request minimum 0: want 1 or 2"},
		{"cpu-request-min", "GOFIT_CPU_REQUEST_MIN", "two", Options{}, `CPU request minimum "two": want 1 or 2`},
	} {
		fo, ferr := parseFlags(t, "--"+tc.flag+"="+tc.value)
		eo, errs := ReadEnv(func(k string) (string, bool) { return tc.value, k == tc.env })
		var eerr error
		if len(errs) > 0 {
			eerr = errs[0]
		}
		if tc.bad == "" {
			if ferr != nil || eerr != nil || fo != tc.want || eo != tc.want {
				t.Errorf("%s: flag %+v %v, env %+v %v; want %+v", tc.value, fo, ferr, eo, errs, tc.want)
			}
			continue
		}
		if ferr == nil || !errors.Is(ferr, ErrBadOption) || !strings.Contains(ferr.Error(), "--"+tc.flag+": ") || !strings.Contains(ferr.Error(), tc.bad) {
			t.Errorf("--%s=%s: %v; want an error naming the flag and saying %q", tc.flag, tc.value, ferr, tc.bad)
		}
		if len(errs) != 1 || !errors.Is(eerr, ErrBadOption) || !strings.Contains(eerr.Error(), tc.env+"=") || !strings.Contains(eerr.Error(), tc.bad) || eo != (Options{}) {
			t.Errorf("%s=%s: %+v %v; want one error naming the variable and saying %q", tc.env, tc.value, eo, errs, tc.bad)
		}
	}
}

// NaN and the infinities are refused by every way in: a flag, a variable
// and New.
func TestNonFiniteOptionsRefused(t *testing.T) {
	for _, s := range []struct{ flag, env string }{{"memory-ratio", "GOFIT_MEMORY_RATIO"}, {"cpu-request-factor", "GOFIT_CPU_REQUEST_FACTOR"}} {
		for _, v := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "infinity", "1e400", "-1e400"} {
			if o, err := parseFlags(t, "--"+s.flag, v); err == nil {
				t.Errorf("--%s %s accepted: %+v", s.flag, v, o)
			}
			if o, errs := ReadEnv(func(k string) (string, bool) { return v, k == s.env }); len(errs) != 1 || o != (Options{}) {
				t.Errorf("%s=%s: %+v, errors %v", s.env, v, o, errs)
			}
		}
	}
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := New(Options{MemoryRatio: x}); err == nil {
			t.Errorf("New accepts memory ratio %g", x)
		}
		if _, err := New(Options{CPURequestFactor: x}); err == nil {
			t.Errorf("New accepts CPU request factor %g", x)
		}
	}
}

func TestFlagsRounding(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want Rounding
	}{{nil, Floor}, {[]string{"--ceil"}, Ceil}, {[]string{"--ceil=false"}, Floor}, {[]string{"--ceil", "--ceil=0"}, Floor}} {
		if o, err := parseFlags(t, tc.args...); err != nil || o.Rounding != tc.want {
			t.Errorf("%v: %+v %v, want rounding %d", tc.args, o, err, tc.want)
		}
	}
	if _, err := parseFlags(t, "--ceil=maybe"); err == nil || !strings.Contains(err.Error(), "--ceil") {
		t.Errorf("--ceil=maybe: %v", err)
	}
	for v, want := range map[string]Rounding{"floor": Floor, "ceil": Ceil} {
		if o, errs := ReadEnv(func(k string) (string, bool) { return v, k == "GOFIT_CPU_ROUNDING" }); len(errs) != 0 || o.Rounding != want {
			t.Errorf("GOFIT_CPU_ROUNDING=%s: %+v %v", v, o, errs)
		}
	}
	if _, errs := ReadEnv(func(k string) (string, bool) { return "up", k == "GOFIT_CPU_ROUNDING" }); len(errs) != 1 || !strings.Contains(errs[0].Error(), "want floor or ceil") {
		t.Errorf("GOFIT_CPU_ROUNDING=up: %v", errs)
	}
}

// BindFlags binds only the options named, and the help shows the defaults
// the policy fills in.
func TestBindFlagsNamed(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	BindFlags(fs, "memory-ratio", "cpu-request-min")
	if fs.Lookup("gogc") != nil || fs.Lookup("ceil") != nil {
		t.Error("unnamed options bound")
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if h := help.String(); !strings.Contains(h, "(default 0.9)") || !strings.Contains(h, "(default 2)") || !strings.Contains(h, "-memory-ratio RATIO") {
		t.Errorf("help:\n%s", h)
	}
	if err := fs.Parse([]string{"--gogc", "off"}); err == nil {
		t.Error("--gogc parsed though not bound")
	}
}

// Set reads one option by its variable's name, as ReadEnv does, and leaves
// the options as they were when the value is bad.
func TestOptionsSet(t *testing.T) {
	o := Options{MemoryRatio: 0.8}
	if err := o.Set("GOFIT_CPU_REQUEST_FACTOR", "1.5"); err != nil || o != (Options{MemoryRatio: 0.8, CPURequestFactor: 1.5}) {
		t.Errorf("factor 1.5: %+v, %v", o, err)
	}
	for _, v := range []string{"lots", "100", "NaN", "-1"} {
		if err := o.Set("GOFIT_CPU_REQUEST_FACTOR", v); !errors.Is(err, ErrBadOption) || o.CPURequestFactor != 1.5 {
			t.Errorf("factor %q: %+v, %v; want ErrBadOption and the options unchanged", v, o, err)
		}
	}
	if err := o.Set("GOFIT_CPU_REQUEST_FACTOR", "0"); err != nil || o.CPURequestFactor != 0 {
		t.Errorf("factor 0 (off): %+v, %v", o, err)
	}
	if err := o.Set("GOFIT_NOTHING", "1"); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "GOFIT_NOTHING") {
		t.Errorf("unknown variable: %v", err)
	}
}

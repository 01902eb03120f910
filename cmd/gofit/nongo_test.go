package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/gofit-dev/gofit/fit"
)

// --non-go and GOFIT_NON_GO declare non-Go memory; the flag wins, and a
// bad value is an error naming where it came from and the value.
func TestDeclaredNonGo(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == NonGoVar && v != "" {
				return v, true
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		flag, env string
		want      int64
		err       string
	}{
		{want: 0},
		{flag: "48Mi", want: 48 << 20},
		{flag: "64MiB", want: 64 << 20},
		{flag: "50331648", want: 50331648},
		{env: "1Gi", want: 1 << 30},
		{flag: "48Mi", env: "1Gi", want: 48 << 20},
		{flag: "48M", err: `--non-go "48M"`},
		{flag: "off", err: `--non-go "off"`},
		{flag: "-1", err: `--non-go "-1"`},
		{env: "lots", err: `GOFIT_NON_GO "lots"`},
	} {
		pf := planFlags{nonGo: tc.flag}
		n, err := pf.declaredNonGo(env(tc.env))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errUsage) {
				t.Errorf("flag %q env %q: error %v, want one naming %s", tc.flag, tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || n != (fit.NonGo{Anon: tc.want}) {
			t.Errorf("flag %q env %q: %+v, %v; want %d", tc.flag, tc.env, n, err, tc.want)
		}
	}
}

//go:build !nokube

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExperimentReportFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"experiment"}, 2, "want `gofit experiment report [flags]`"},
		{[]string{"experiment", "report"}, 2, "--prometheus is required"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--name", "x"}, 2, "--namespace and --name are required"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--fail-on", "harmful,wrose"}, 2, `"wrose" is not harmful`},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--from", "2026-01-01T00:00:00Z"}, 2, "--from and --to go together"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--window", "10ms"}, 2, "--window 10ms"},
		{[]string{"experiment", "report", "--prometheus", "http://p:9090", "--namespace", "n", "--name", "x", "--from", "yesterday", "--to", "now"}, 2, "--from"},
	} {
		var out, errb bytes.Buffer
		code := Main(c.args, &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("gofit %s: exit %d, stderr %q; want %d and %q", strings.Join(c.args, " "), code, errb.String(), c.code, c.want)
		}
	}
}

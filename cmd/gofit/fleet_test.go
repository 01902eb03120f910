package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFleetFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--prometheus is required"},
		{[]string{"--prometheus", "http://p", "--since", "3x"}, "-since: want a duration such as 7d"},
		{[]string{"--prometheus", "http://p", "--step", "8d"}, "--step 8d: want at least 1s and at most --since 1w"},
		{[]string{"--prometheus", "http://p", "--since", "30d", "--step", "10s"}, "want at most 100000 (raise --step)"},
		{[]string{"--prometheus", "http://p", "--fail-on", "gomaxprocs_above_limit,slow"}, `"slow" is not a finding code`},
		{[]string{"--prometheus", "http://p", "--selector", "app in (a,b)"}, "--selector: selector term"},
		{[]string{"--prometheus", "http://p", "--header", "novalue"}, "-header: want NAME=VALUE"},
		{[]string{"--prometheus", "localhost:9090"}, `prometheus URL "localhost:9090"`},
		{[]string{"--prometheus", "http://p", "--bearer-token-file", "/nonexistent/token"}, "prometheus bearer token file: open /nonexistent/token"},
		{[]string{"--prometheus", "http://p", "--end", "yesterday"}, "--end:"},
	} {
		var o, e bytes.Buffer
		code := Main(append([]string{"fleet"}, tc.args...), &o, &e)
		if code != 2 || !strings.Contains(e.String(), tc.want) {
			t.Errorf("gofit fleet %q: exit %d, stderr %q; want 2 and %q", tc.args, code, e.String(), tc.want)
		}
	}
}

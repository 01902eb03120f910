//go:build !nokube

package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRightsizeFlags(t *testing.T) {
	p := []string{"rightsize", "--prometheus", "http://p:9090"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rightsize"}, "--prometheus is required"},
		{append(p, "extra"), `unexpected argument "extra"`},
		{append(p, "--share", "0.9"), "--share 0.9"},
		{append(p, "--min-pods", "0"), "--min-pods 0"},
		{append(p, "--saving", "1.5"), "--saving 1.5"},
		{append(p, "--trial-duration", "0s"), "--trial-duration 0s"},
		{append(p, "--max-trials", "0"), "--max-trials"},
		{append(p, "--interval", "0s"), "--interval 0s"},
		{append(p, "--step", "10d"), "--step 10d"},
		{append(p, "--window", "10ms"), "--window 10ms"},
		{append(p, "--promote", "apply"), `--promote "apply"`},
		{append(p, "--promote", "file"), "--promote file needs --out"},
		{append(p, "--namespaces", "shop,Web"), `--namespaces: "Web" is not a namespace name`},
		{append(p, "--match", "cluster"), "want LABEL=VALUE"},
	} {
		var out, errb bytes.Buffer
		code := Main(c.args, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("gofit %s: exit %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
}

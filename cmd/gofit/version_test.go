package main

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("gofit version: exit %d: %s", code, errb.String())
	}
	text := out.String()
	for _, want := range []string{"gofit ", "go:      " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		"policy defaults: memory ratio 0.9, rounding floor, CPU request factor off, CPU request minimum 2, GOGC left alone"} {
		if !strings.Contains(text, want) {
			t.Errorf("gofit version does not say %q:\n%s", want, text)
		}
	}

	out.Reset()
	if code := Main([]string{"version", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("gofit version --json: exit %d: %s", code, errb.String())
	}
	var rep versionReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("gofit version --json: %v\n%s", err, out.String())
	}
	if rep.GoVersion != runtime.Version() || rep.Version == "" || rep.Policy.MemoryRatio != 0.9 || rep.Policy.CPURequestMin != 2 {
		t.Errorf("gofit version --json: %+v", rep)
	}
	found := false
	for _, m := range rep.Modules {
		found = found || (m.Path == "github.com/prometheus/client_golang" && strings.HasPrefix(m.Version, "v1."))
	}
	if !found {
		t.Errorf("gofit version --json lists no github.com/prometheus/client_golang among %d modules", len(rep.Modules))
	}

	if code := Main([]string{"version", "extra"}, &out, &errb); code != 2 {
		t.Errorf("gofit version extra: exit %d, want 2", code)
	}
}

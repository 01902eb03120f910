package debugvars

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"os"
	"path/filepath"
	"testing"

	"github.com/gofit-dev/gofit"
)

func fitter(t *testing.T) *gofit.Fitter {
	root := t.TempDir()
	for rel, content := range map[string]string{
		"proc/self/cgroup":                 "0::/ctr\n",
		"proc/self/mountinfo":              "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/ctr/cpu.max":        "max 100000\n",
		"sys/fs/cgroup/ctr/memory.current": "1048576\n",
		"sys/fs/cgroup/ctr/memory.stat":    "anon 1048576\n",
		"sys/fs/cgroup/ctr/cpu.stat":       "usage_usec 1500000\nnr_periods 0\n",
	} {
		p := filepath.Join(root, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := gofit.Start(context.Background(), gofit.WithRoot(root), gofit.WithLookupEnv(func(string) (string, bool) { return "", false }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

func TestPublish(t *testing.T) {
	f := fitter(t)
	if err := Publish(f); err != nil {
		t.Fatal(err)
	}
	var r struct {
		CgroupVersion int `json:"cgroup_version"`
		CPU           struct {
			UsageSeconds float64 `json:"usage_seconds"`
		} `json:"cpu"`
	}
	if err := json.Unmarshal([]byte(expvar.Get(Name).String()), &r); err != nil || r.CgroupVersion != 2 || r.CPU.UsageSeconds != 1.5 {
		t.Errorf("published %s (%v)", expvar.Get(Name).String(), err)
	}
	// A second Publish, where expvar.Publish would panic.
	if err := Publish(f); !errors.Is(err, ErrTaken) {
		t.Errorf("second Publish: %v, want ErrTaken", err)
	}
	if err := Publish(nil); err == nil {
		t.Error("Publish(nil) succeeded")
	}
}

package debugvars

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"testing"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/cgroup/cgrouptest"
)

func fitter(t *testing.T) *gofit.Fitter {
	tr := cgrouptest.NewV2(t, "/ctr")
	tr.Set("cpu.max", "max 100000")
	tr.Set("memory.current", "1048576")
	tr.Set("memory.stat", "anon 1048576")
	tr.Set("cpu.stat", "usage_usec 1500000\nnr_periods 0")
	f, err := gofit.Start(context.Background(), gofit.WithRoot(tr.Root), gofit.WithLookupEnv(func(string) (string, bool) { return "", false }))
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

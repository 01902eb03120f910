package metrics

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gofit-dev/gofit"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/internal/seam"
)

type tree string

func (tr tree) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(string(tr), rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func newTree(t *testing.T) tree {
	tr := tree(t.TempDir())
	tr.write(t, "proc/self/cgroup", "0::/ctr\n")
	tr.write(t, "proc/self/mountinfo", "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	tr.write(t, "proc/self/smaps_rollup", "Rss: 1024 kB\n")
	tr.write(t, "sys/fs/cgroup/ctr/cpu.max", "50000 100000\n")
	tr.write(t, "sys/fs/cgroup/ctr/cpu.stat", "usage_usec 2000000\nnr_periods 40\nnr_throttled 10\nthrottled_usec 500000\n")
	tr.write(t, "sys/fs/cgroup/ctr/memory.max", "134217728\n")
	tr.write(t, "sys/fs/cgroup/ctr/memory.current", "33554432\n")
	tr.write(t, "sys/fs/cgroup/ctr/memory.stat", "anon 16777216\nfile 16777216\ninactive_file 8388608\npgmajfault 7\n")
	tr.write(t, "sys/fs/cgroup/ctr/memory.events", "high 5\nmax 3\noom_kill 1\n")
	tr.write(t, "sys/fs/cgroup/ctr/cpu.weight", "4\n")
	return tr
}

// gather returns every sample of the registry as "name{labels}" -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += fmt.Sprintf(",%s=%s", l.GetName(), l.GetValue())
			}
			switch {
			case m.Gauge != nil:
				out[key] = m.GetGauge().GetValue()
			case m.Counter != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func TestCollector(t *testing.T) {
	tr := newTree(t)
	f, err := gofit.Start(context.Background(), seam.Option(seam.Seams{Root: string(tr), LookupEnv: func(string) (string, bool) { return "", false }}).(gofit.Option))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(f))
	got := gather(t, reg)
	for key, want := range map[string]float64{
		"gofit_cpu_limit_cores":                                 0.5,
		"gofit_cpu_usage_seconds_total":                         2,
		"gofit_cpu_periods_total":                               40,
		"gofit_cpu_throttled_periods_total":                     10,
		"gofit_cpu_throttled_seconds_total":                     0.5,
		"gofit_memory_limit_bytes":                              128 << 20,
		"gofit_memory_usage_bytes":                              32 << 20,
		"gofit_memory_working_set_bytes":                        24 << 20,
		"gofit_memory_major_faults_total":                       7,
		"gofit_oom_kills_total":                                 1,
		"gofit_memory_limit_hits_total":                         3,
		"gofit_memory_high_hits_total":                          5,
		"gofit_cpu_request_cores":                               f.Limits().CPU.RequestCores(),
		"gofit_plan_gomaxprocs":                                 1,
		"gofit_plan_gomemlimit_bytes":                           float64(f.Plan().GOMEMLIMIT),
		"gofit_plan_reason,reason=cpu_limit,setting=gomaxprocs": 1,
		"gofit_read_errors_total":                               0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	if _, ok := got["gofit_gomaxprocs"]; !ok {
		t.Error("gofit_gomaxprocs missing")
	}
	if f.Plan().GOMEMLIMIT <= 0 {
		t.Errorf("no GOMEMLIMIT planned: %+v", f.Plan())
	}

	if r := f.Limits().CPU.RequestCores(); r <= 0 {
		t.Errorf("cpu.weight 4 read as request %v cores", r)
	}

	// Without a Fitter, only the runtime's own values.
	reg = prometheus.NewRegistry()
	reg.MustRegister(NewCollector(nil))
	got = gather(t, reg)
	for key := range got {
		if key != "gofit_gomaxprocs" && key != "gofit_gomemlimit_bytes" && !strings.HasPrefix(key, "gofit_go_") {
			t.Errorf("nil Fitter: %s reported", key)
		}
	}
	if _, ok := got["gofit_go_memory_bytes"]; !ok {
		t.Errorf("nil Fitter: no gofit_go_memory_bytes in %v", got)
	}
}

// Every label value comes from a fixed set, whatever the limits: a plan
// that moves by a megabyte must not make a new series.
func TestPlanLabelsAreBounded(t *testing.T) {
	tr := newTree(t)
	f, err := gofit.New(seam.Option(seam.Seams{Root: string(tr), LookupEnv: func(string) (string, bool) { return "", false }}).(gofit.Option))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(f))
	allowed := map[string]bool{"gc": true, "gc_idle": true, "scavenge": true, "user": true, "idle": true, "gomaxprocs": true, "gomemlimit": true, "cpu": true, "memory": true, "some": true, "full": true, "anon": true, "kernel": true, "hot_file": true}
	for _, r := range fit.Reasons() {
		allowed[string(r)] = true
	}
	for _, w := range fit.Warnings() {
		allowed[string(w)] = true
	}
	series := map[string]bool{}
	for mib := 1; mib <= 64; mib += 3 {
		tr.write(t, "sys/fs/cgroup/ctr/memory.max", fmt.Sprintf("%d\n", mib<<20))
		tr.write(t, "proc/self/smaps_rollup", fmt.Sprintf("Rss: %d kB\n", mib*100))
		if err := f.Refresh(); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				key := mf.GetName()
				for _, l := range m.GetLabel() {
					if !allowed[l.GetValue()] {
						t.Fatalf("%s has label %s=%q, not from a fixed set", mf.GetName(), l.GetName(), l.GetValue())
					}
					key += "," + l.GetName() + "=" + l.GetValue()
				}
				series[key] = true
			}
		}
	}
	// 2: unmanaged has three parts; 4: the Go CPU time has five classes.
	if max := len(all) + 2 + len(runtimeDescs) + 4 + len(fit.Reasons()) + len(fit.Warnings()); len(series) > max {
		keys := make([]string, 0, len(series))
		for k := range series {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Errorf("%d series, more than the %d possible: %v", len(series), max, keys)
	}
}

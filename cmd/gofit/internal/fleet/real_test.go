package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/tools/promtest"
)

// TestRealFleet: a real Go process that links client_golang but not
// gofit (testdata/plainsvc) runs in a real cgroup at 250m and 128 MiB with
// GOMAXPROCS=4 and no GOMEMLIMIT, scraped by a real Prometheus; a small
// exporter beside it serves its container series as cAdvisor would (read
// from its cgroup) and its spec and owners as kube-state-metrics would,
// plus one non-Go sidecar. gofit fleet must list the service as Go, flag
// it, and plan GOMAXPROCS=1 and a GOMEMLIMIT through fit. About 75 s.
func TestRealFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short (a 75-second real Prometheus run)")
	}
	bins := promtest.Need(t)
	g := cgtest.NewGroup(t)
	const cpu, mem = 0.25, 128 << 20
	if err := g.SetCPU(cpu, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := g.SetCPURequest(64); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMemoryMax(mem); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "plainsvc")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", exe, "./testdata/plainsvc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/plainsvc: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := g.Command(exe, "-addr", addr)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "GOMAXPROCS=4"}
	logf, err := os.Create(filepath.Join(t.TempDir(), "plainsvc.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("plainsvc log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plainsvc not answering: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Read once the service answers: on cgroup v1 a shell moves itself
	// into the group and then execs the service.
	cg, err := cgroup.NewFS("/").Process(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		st, err := cg.Stats()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		app := `namespace="shop",pod="plain-5d8f-x2x9k",container="app"`
		side := `namespace="shop",pod="plain-5d8f-x2x9k",container="envoy"`
		fmt.Fprintf(w, "container_cpu_usage_seconds_total{%s} %g\n", app, st.CPU.Usage.Seconds())
		fmt.Fprintf(w, "container_cpu_usage_seconds_total{%s} 0\n", side)
		fmt.Fprintf(w, "container_cpu_cfs_periods_total{%s} %d\n", app, st.CPU.Periods)
		fmt.Fprintf(w, "container_cpu_cfs_throttled_periods_total{%s} %d\n", app, st.CPU.ThrottledPeriods)
		fmt.Fprintf(w, "container_memory_working_set_bytes{%s} %d\n", app, st.Memory.WorkingSet)
		fmt.Fprintf(w, "container_oom_events_total{%s} %d\n", app, st.Memory.OOMKills)
		for _, kind := range []string{"requests", "limits"} {
			fmt.Fprintf(w, "kube_pod_container_resource_%s{%s,resource=\"cpu\",unit=\"core\"} %g\n", kind, app, cpu)
			fmt.Fprintf(w, "kube_pod_container_resource_%s{%s,resource=\"memory\",unit=\"byte\"} %d\n", kind, app, mem)
		}
		fmt.Fprintf(w, "kube_pod_container_status_restarts_total{%s} 0\n", app)
		fmt.Fprintf(w, "kube_pod_owner{namespace=\"shop\",pod=\"plain-5d8f-x2x9k\",owner_kind=\"ReplicaSet\",owner_name=\"plain-5d8f\",owner_is_controller=\"true\"} 1\n")
		fmt.Fprintf(w, "kube_replicaset_owner{namespace=\"shop\",replicaset=\"plain-5d8f\",owner_kind=\"Deployment\",owner_name=\"plain\",owner_is_controller=\"true\"} 1\n")
		fmt.Fprintf(w, "kube_pod_labels{namespace=\"shop\",pod=\"plain-5d8f-x2x9k\",label_app=\"plain\"} 1\n")
	}))
	defer exporter.Close()
	prom := promtest.Start(t, bins, promtest.Config{Interval: time.Second, Targets: []promtest.Target{
		{Job: "plain", Addr: addr, Labels: map[string]string{"namespace": "shop", "pod": "plain-5d8f-x2x9k", "container": "app"}},
		{Job: "cadvisor-ksm", Addr: strings.TrimPrefix(exporter.URL, "http://")},
	}})
	from := time.Now().Truncate(5 * time.Second)
	time.Sleep(65 * time.Second)
	pc, err := api.NewClient(api.Config{Address: prom.URL})
	if err != nil {
		t.Fatal(err)
	}
	in, err := Fetch(context.Background(), pc, Query{From: from, To: from.Add(60 * time.Second), Step: 5 * time.Second, Namespace: "shop", Selector: "app=plain"})
	if err != nil {
		t.Fatal(err)
	}
	r := Analyze(in, Options{MinSpan: 30 * time.Second, MinSamples: 6})
	var sum strings.Builder
	WriteTable(&sum, r)
	t.Logf("gofit fleet:\n%s", sum.String())
	if dir := os.Getenv("GOFIT_FLEET_OUT"); dir != "" {
		if _, _, err := WriteFiles(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	if len(r.Containers) != 1 || r.NonGo != 1 {
		t.Fatalf("%d Go workload containers and %d others, want 1 and 1 (sources %v)", len(r.Containers), r.NonGo, r.Sources)
	}
	c := r.Containers[0]
	if c.Workload != (Workload{Namespace: "shop", Kind: "Deployment", Name: "plain"}) || c.Container != "app" {
		t.Errorf("workload %v container %s", c.Workload, c.Container)
	}
	got := codes(c)
	for _, want := range []string{CodeGOMAXPROCSAboveLimit, CodeGOMEMLIMITUnset, CodeThrottledByGOMAXPROCS} {
		if !slices.Contains(got, want) {
			t.Errorf("findings %q: want %s", got, want)
		}
	}
	o := c.Observed
	if float64(o.GOMAXPROCS) != 4 || o.GOMEMLIMIT != 0 || o.Limits != (Resources{cpu, mem}) || !o.CPU.P95.Valid() || !o.LiveHeap.Max.Valid() || !o.NonHeap.Valid() {
		t.Errorf("observed %+v", o)
	}
	// The 32 MiB the service keeps live is the live heap's floor.
	if float64(o.LiveHeap.Max) < 32<<20 {
		t.Errorf("live heap max %s, want at least the 32MiB kept", fmtBytes(float64(o.LiveHeap.Max)))
	}
	if !c.Gofit.Enough() || c.Gofit.GOMAXPROCS != 1 || c.Gofit.GOMEMLIMIT <= 0 || c.Gofit.GOMEMLIMIT >= int64(c.Gofit.Memory) {
		t.Errorf("gofit: %+v", c.Gofit)
	}
}

package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cgroup/manage"
)

// The test binary doubles as the service, so it can run inside a cgroup.
func TestMain(m *testing.M) {
	if os.Getenv("GOFIT_EXAMPLE_SERVE") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type service struct {
	t    *testing.T
	base string
	cmd  *exec.Cmd
}

func startService(t *testing.T, g *manage.Group, env ...string) *service {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := g.Command(os.Args[0], "-addr", addr)
	cmd.Env = append(append(os.Environ(), "GOFIT_EXAMPLE_SERVE=1", "GOFIT_LOG=off"), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &service{t: t, base: "http://" + addr, cmd: cmd}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	s.waitFor("the service to come up", 10*time.Second, func(m map[string]float64) bool { return true })
	return s
}

// scrape returns the gofit_ samples of /metrics, keyed by name (labels dropped).
func (s *service) scrape() (map[string]float64, error) {
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gofit_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %v", line, err)
		}
		out[name] = v
	}
	return out, sc.Err()
}

func (s *service) waitFor(what string, limit time.Duration, ok func(map[string]float64) bool) (map[string]float64, time.Duration) {
	s.t.Helper()
	start := time.Now()
	var last map[string]float64
	var err error
	for time.Since(start) < limit {
		if last, err = s.scrape(); err == nil && ok(last) {
			return last, time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("gave up after %v waiting for %s; last metrics %v, error %v", limit, what, last, err)
	return nil, 0
}

// (b) A process that imports auto follows an in-place resize: CPU 2 -> 1
// cores (GOMAXPROCS 2 -> 1, which Go's own runtime, never below 2, would
// not do) and memory 256 -> 128 -> 256 MiB, each within about one refresh.
func TestFollowsResize(t *testing.T) {
	g := cgtest.NewGroup(t)
	if err := g.SetCPU(2, 0); err != nil {
		t.Fatal(err)
	}
	if err := g.SetMemoryMax(256 << 20); err != nil {
		t.Fatal(err)
	}
	const refresh = 200 * time.Millisecond
	// containermaxprocs=1 gives the runtime Go 1.25's container-aware
	// default, as a main module at go 1.25 or later would have.
	s := startService(t, g, "GOFIT_REFRESH="+refresh.String(), "GODEBUG=containermaxprocs=1,updatemaxprocs=1")
	m, _ := s.waitFor("GOMAXPROCS 2 at 2 cores", 5*time.Second, func(m map[string]float64) bool { return m["gofit_gomaxprocs"] == 2 })
	if m["gofit_cpu_limit_cores"] != 2 || m["gofit_memory_limit_bytes"] != 256<<20 {
		t.Fatalf("limits seen: %v", m)
	}
	if ml := m["gofit_gomemlimit_bytes"]; ml <= 128<<20 || ml >= 256<<20 {
		t.Errorf("GOMEMLIMIT %v at 256MiB", ml)
	}

	if err := g.SetCPU(1, 0); err != nil {
		t.Fatal(err)
	}
	_, took := s.waitFor("GOMAXPROCS 1 at 1 core", 5*time.Second, func(m map[string]float64) bool { return m["gofit_gomaxprocs"] == 1 })
	t.Logf("CPU 2 -> 1 cores: GOMAXPROCS followed in %v (refresh %v)", took.Round(time.Millisecond), refresh)

	if err := g.SetMemoryMax(128 << 20); err != nil {
		t.Fatal(err)
	}
	_, took = s.waitFor("GOMEMLIMIT below 128MiB", 5*time.Second, func(m map[string]float64) bool {
		return m["gofit_gomemlimit_bytes"] > 0 && m["gofit_gomemlimit_bytes"] < 128<<20
	})
	t.Logf("memory 256 -> 128MiB: GOMEMLIMIT followed in %v", took.Round(time.Millisecond))

	if err := g.SetMemoryMax(256 << 20); err != nil {
		t.Fatal(err)
	}
	_, took = s.waitFor("GOMEMLIMIT above 128MiB", 5*time.Second, func(m map[string]float64) bool {
		return m["gofit_gomemlimit_bytes"] > 128<<20 && m["gofit_memory_limit_bytes"] == 256<<20
	})
	t.Logf("memory 128 -> 256MiB: GOMEMLIMIT followed in %v", took.Round(time.Millisecond))
}

// (c) Throttling counters scraped from the service grow while it is throttled.
func TestThrottlingMetrics(t *testing.T) {
	g := cgtest.NewGroup(t)
	if err := g.SetCPU(0.2, 0); err != nil {
		t.Fatal(err)
	}
	// On a host busy with other work, the host rather than the quota
	// would decide how much CPU the service gets, and a starved service
	// is never throttled; a large weight lets it use its 0.2 cores.
	if err := g.SetCPURequest(64); err != nil {
		t.Fatal(err)
	}
	s := startService(t, g)
	before, err := s.scrape()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	end := time.Now().Add(1500 * time.Millisecond)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				resp, err := http.Get(s.base + "/work?n=3000")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	after, err := s.scrape()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gofit_cpu_throttled_periods_total", "gofit_cpu_throttled_seconds_total", "gofit_cpu_periods_total", "gofit_cpu_usage_seconds_total"} {
		if after[name] <= before[name] {
			t.Errorf("%s did not grow under load at 0.2 cores: %v -> %v", name, before[name], after[name])
		}
	}
	if after["gofit_cpu_limit_cores"] != 0.2 || after["gofit_gomaxprocs"] != 1 {
		t.Errorf("limit %v, GOMAXPROCS %v; want 0.2 and 1", after["gofit_cpu_limit_cores"], after["gofit_gomaxprocs"])
	}
	t.Logf("throttled periods %v -> %v, throttled seconds %.2f -> %.2f",
		before["gofit_cpu_throttled_periods_total"], after["gofit_cpu_throttled_periods_total"],
		before["gofit_cpu_throttled_seconds_total"], after["gofit_cpu_throttled_seconds_total"])
}

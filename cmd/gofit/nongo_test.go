package main

import (
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/nongo"
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

// gofit inspect --pid measures a running service from outside its cgroup,
// as from the node: a service holding 48 MiB off its heap beside a 32 MiB
// live heap (serveOffHeap, as examples/offheap) under a 256 MiB limit. The anonymous memory found is within 8 MiB of it, the
// GOMEMLIMIT that fits leaves room for what is declared, and the
// declaration is the one GOFIT_NON_GO reads.
func TestInspectPIDRealCgroup(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping under the race detector: its shadow memory is non-Go memory the service would carry too")
	}
	g := cgtest.NewGroup(t)
	if err := g.SetMemoryMax(256 << 20); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	// This test binary serves as the off-heap service (TestMain): no Go
	// toolchain is needed where it runs (the VM tests).
	svc := g.Command(os.Args[0])
	svc.Env = append(os.Environ(), "GOFIT_TEST_AS_OFFHEAP="+addr)
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		svc.Process.Kill()
		svc.Wait()
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	ready := time.Now().Add(20 * time.Second)
	for n := 0; n < 100; {
		resp, err := client.Get("http://" + addr + "/work")
		if err != nil {
			if time.Now().After(ready) {
				t.Fatalf("offheap not ready: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		resp.Body.Close()
		n++
	}
	code, out, errOut := run("inspect", "--pid", strconv.Itoa(svc.Process.Pid), "--metrics-url", "http://"+addr+"/debug/vars", "--json")
	if code != 0 {
		t.Fatalf("inspect --pid: exit %d: %s", code, errOut)
	}
	var r pidReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s: %d MiB anonymous outside the Go heap, declared %d MiB, GOMEMLIMIT %d MiB (the ratio's %d)", r.NonGo.Method, r.NonGo.AnonBytes>>20, r.NonGo.Bytes>>20, r.GOMEMLIMIT>>20, r.RatioGOMEMLIMIT>>20)
	if d := r.NonGo.AnonBytes - 48<<20; d < -8<<20 || d > 8<<20 {
		t.Errorf("anonymous outside the Go heap %d MiB, want 48 ± 8", r.NonGo.AnonBytes>>20)
	}
	if r.MemoryLimitBytes != 256<<20 || r.NonGo.GCs <= 0 {
		t.Errorf("limit %d, %d collections: want 256 MiB, and the collections from /debug/vars", r.MemoryLimitBytes, r.NonGo.GCs)
	}
	want := int64(256<<20) - r.NonGo.Bytes - (256<<20)/32
	if r.GOMEMLIMIT != want || r.GOMEMLIMIT >= r.RatioGOMEMLIMIT {
		t.Errorf("GOMEMLIMIT %d, want limit − declared − margin = %d, below the ratio's %d", r.GOMEMLIMIT, want, r.RatioGOMEMLIMIT)
	}
	if r.Declare["env"] != NonGoVar+"="+nongo.Quantity(r.NonGo.Bytes) {
		t.Errorf("declare %q", r.Declare)
	}
	// The declaration round-trips through what gofit run reads.
	pf := planFlags{}
	n, err := pf.declaredNonGo(func(k string) (string, bool) {
		return strings.TrimPrefix(r.Declare["env"], NonGoVar+"="), k == NonGoVar
	})
	if err != nil || n.Anon != r.NonGo.Bytes {
		t.Errorf("GOFIT_NON_GO from the declaration: %+v, %v", n, err)
	}
	// The text names the figure and the declaration.
	code, out, _ = run("inspect", "--pid", strconv.Itoa(svc.Process.Pid))
	if code != 0 || !strings.Contains(out, "GOMEMLIMIT that fits") || !strings.Contains(out, r.Declare["env"]) {
		t.Errorf("inspect --pid text: exit %d\n%s", code, out)
	}
}

func TestInspectPIDErrors(t *testing.T) {
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Skipf("skipping: no sleep(1): %v", err)
	}
	defer func() {
		sleep.Process.Kill()
		sleep.Wait()
	}()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--window", "1s"}, 2, "need --pid"},
		{[]string{"--pid", "-3"}, 2, "--pid -3"},
		{[]string{"--pid", "1", "--window", "-1s"}, 2, "--window -1s"},
		{[]string{"--pid", strconv.Itoa(sleep.Process.Pid)}, 1, "not a Go program"},
		{[]string{"--pid", "999999999"}, 1, "/proc/999999999/smaps"},
	} {
		code, _, errOut := run(append([]string{"inspect"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("inspect %q: exit %d, %q; want %d naming %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// serveOffHeap is the test binary as an off-heap service, like
// examples/offheap: 48 MiB mapped with mmap outside the Go heap and kept
// resident, a 32 MiB live heap that each /work request churns, and
// expvar's /debug/vars.
func serveOffHeap(addr string) int {
	const off, live, slot = 48 << 20, 32 << 20, 64 << 10
	cache, err := syscall.Mmap(-1, 0, off, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := 0; i < len(cache); i += 4096 {
		cache[i] = 1
	}
	slots := make([][]byte, live/slot)
	for i := range slots {
		slots[i] = make([]byte, slot)
	}
	var mu sync.Mutex
	next := 0
	mux := http.NewServeMux()
	mux.Handle("/debug/vars", expvar.Handler())
	mux.HandleFunc("/work", func(w http.ResponseWriter, _ *http.Request) {
		b := make([]byte, slot)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		mu.Lock()
		slots[next], next = b, (next+1)%len(slots)
		cache[next*4096%off]++
		mu.Unlock()
		fmt.Fprintln(w, "ok")
	})
	err = http.ListenAndServe(addr, mux)
	fmt.Fprintln(os.Stderr, err)
	return 1
}

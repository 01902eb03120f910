package gofit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup/cgrouptest"
	"github.com/gofit-dev/gofit/fit"
	"github.com/gofit-dev/gofit/target"
)

// newTree is a cgroup v2 fixture for one process at /pod/ctr, with no
// limits yet.
func newTree(t testing.TB) *cgrouptest.Tree {
	tr := cgrouptest.NewV2(t, "/pod/ctr")
	tr.Set("memory.current", "1048576")
	tr.Set("memory.stat", "anon 1048576\ninactive_file 0")
	tr.Write("proc/self/smaps_rollup", "Rss: 1024 kB\n")
	return tr
}

// fakeRuntime models what gofit asks of the Go runtime, and what the
// runtime does by itself: def is its own choice for the current limits,
// which it applies on a resize when it follows and GOMAXPROCS is not
// custom (set by a call or, at start, by the environment).
type fakeRuntime struct {
	mu        sync.Mutex
	procs     int
	custom    bool
	def       int
	follows   bool
	procCalls []int
	memLimit  int64
	gcPercent int
	handBacks int
}

// newFakeRuntime starts at procs, its own choice, following the cgroup.
func newFakeRuntime(procs int) *fakeRuntime {
	return &fakeRuntime{procs: procs, def: procs, follows: true, memLimit: math.MaxInt64, gcPercent: 100}
}

// resize is the cgroup's CPU limit changing: the runtime's own choice
// becomes def, and a following runtime applies it.
func (r *fakeRuntime) resize(def int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.def = def
	if r.follows && !r.custom {
		r.procs = def
	}
}

func (r *fakeRuntime) api() runtimeAPI {
	return runtimeAPI{
		gomaxprocs: func(n int) int {
			r.mu.Lock()
			defer r.mu.Unlock()
			prev := r.procs
			if n > 0 {
				r.procs, r.custom = n, true
				r.procCalls = append(r.procCalls, n)
			}
			return prev
		},
		setMemoryLimit: func(n int64) int64 {
			r.mu.Lock()
			defer r.mu.Unlock()
			prev := r.memLimit
			if n >= 0 {
				r.memLimit = n
			}
			return prev
		},
		setGCPercent: func(n int) int {
			r.mu.Lock()
			defer r.mu.Unlock()
			prev := r.gcPercent
			r.gcPercent = n
			return prev
		},
		handBack: func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.handBacks++
			r.procs, r.custom = r.def, false
		},
	}
}

func (r *fakeRuntime) state() (procs int, calls []int, mem int64, gc int, handBacks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs, append([]int(nil), r.procCalls...), r.memLimit, r.gcPercent, r.handBacks
}

func withRuntime(r *fakeRuntime) Option { return func(c *config) { c.rt = r.api() } }
func withCPUs(n int) Option             { return func(c *config) { c.cpus = func() int { return n } } }

// withGo makes the process's Go runtime version and built-in GODEBUG
// defaults what the test says, whatever toolchain builds the test.
func withGo(version, defaultGODEBUG string) Option {
	return func(c *config) { c.self = &target.Binary{GoVersion: version, DefaultGODEBUG: defaultGODEBUG} }
}

// Go versions for withGo: a runtime that reads cgroups, and one that does not.
const go126, go124 = "go1.26.1", "go1.24.3"

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// manualTicker lets a test decide when refreshes happen.
type manualTicker struct{ c chan time.Time }

func newManualTicker() *manualTicker { return &manualTicker{c: make(chan time.Time)} }
func (m *manualTicker) opt() Option {
	return withTicker(func(time.Duration) (<-chan time.Time, func()) { return m.c, func() {} })
}

// tick delivers one tick and a second one, which the loop only takes after
// finishing the refresh the first one started.
func (m *manualTicker) tick() { m.c <- time.Now(); m.c <- time.Now() }

// A lowered memory limit is followed at the memory watch's pace, without
// waiting for the refresh; a raised one waits for the refresh.
func TestMemoryWatchFollowsADecreaseAtOnce(t *testing.T) {
	tr := newTree(t)
	tr.Set("memory.max", "268435456")
	rt := newFakeRuntime(2)
	refresh, watch := newManualTicker(), newManualTicker()
	var watched time.Duration
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(2), refresh.opt(), WithLookupEnv(env()), withGo(go126, ""),
		withWatch(func(d time.Duration) (<-chan time.Time, func()) { watched = d; return watch.c, func() {} }))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if watched != MemoryWatch {
		t.Errorf("the watch ticks every %v, want %v", watched, MemoryWatch)
	}
	tr.Set("memory.max", "167772160") // 160MiB, in place
	watch.tick()
	if _, _, mem, _, _ := rt.state(); mem != 160<<20*9/10 {
		t.Errorf("after the watch saw 160MiB: memory limit %d, want 90%% of 160MiB", mem)
	}
	tr.Set("memory.max", "268435456")
	watch.tick()
	if _, _, mem, _, _ := rt.state(); mem != 160<<20*9/10 {
		t.Errorf("the watch followed a raise: memory limit %d", mem)
	}
	refresh.tick()
	if _, _, mem, _, _ := rt.state(); mem != 256<<20*9/10 {
		t.Errorf("the refresh did not follow the raise: memory limit %d", mem)
	}
}

func TestFollowsCPUAndMemoryBothWays(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "200000 100000")
	tr.Set("memory.max", "268435456")
	rt := newFakeRuntime(8)
	tk := newManualTicker()
	rt.follows = false // a runtime that does not read cgroups
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(), WithLookupEnv(env()), withGo(go124, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	procs, _, mem, _, _ := rt.state()
	if procs != 2 || mem != 256<<20*9/10 {
		t.Fatalf("after start: GOMAXPROCS %d, memory limit %d; want 2 and 90%% of 256MiB", procs, mem)
	}

	tr.Set("cpu.max", "100000 100000")
	tr.Set("memory.max", "134217728")
	tk.tick()
	procs, _, mem, _, _ = rt.state()
	if procs != 1 || mem != 128<<20*9/10 {
		t.Errorf("after shrinking: GOMAXPROCS %d, memory limit %d; want 1 and 90%% of 128MiB", procs, mem)
	}

	tr.Set("cpu.max", "400000 100000")
	tr.Set("memory.max", "268435456")
	tk.tick()
	procs, _, mem, _, _ = rt.state()
	if procs != 4 || mem != 256<<20*9/10 {
		t.Errorf("after growing: GOMAXPROCS %d, memory limit %d; want 4 and 90%% of 256MiB", procs, mem)
	}

	tr.Set("cpu.max", "max 100000")
	tr.Set("memory.max", "max")
	tk.tick()
	procs, _, mem, _, _ = rt.state()
	if procs != 8 || mem != math.MaxInt64 {
		t.Errorf("after lifting the limits: GOMAXPROCS %d, memory limit %d; want 8 and none", procs, mem)
	}

	f.Stop()
	procs, _, mem, _, _ = rt.state()
	if procs != 8 || mem != math.MaxInt64 {
		t.Errorf("after Stop: GOMAXPROCS %d, memory limit %d; want the originals", procs, mem)
	}
}

func TestTighterAncestorWins(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "400000 100000")
	tr.SetParent("cpu.max", "100000 100000")
	rt := newFakeRuntime(4) // Go's own choice: the leaf's 4 cores
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), newManualTicker().opt(), WithLookupEnv(env()), withGo(go126, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if procs, _, _, _, _ := rt.state(); procs != 1 {
		t.Errorf("GOMAXPROCS %d, want 1 from the pod's limit", procs)
	}
}

// On Go ≥ 1.25 the runtime follows the cgroup itself: gofit leaves it alone
// while it agrees, takes over when it does not (a sub-core limit, where Go
// never goes below 2), and hands back when they agree again.
func TestLeavesTheRuntimeAloneWhenItAgrees(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "200000 100000")
	rt := newFakeRuntime(2)
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(), WithLookupEnv(env()), withGo(go126, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if _, calls, _, _, _ := rt.state(); len(calls) != 0 {
		t.Fatalf("gofit set GOMAXPROCS %v although the runtime already chose 2", calls)
	}
	tr.Set("cpu.max", "50000 100000")
	rt.resize(2)
	tk.tick()
	if procs, calls, _, _, _ := rt.state(); procs != 1 || len(calls) != 1 {
		t.Errorf("at 0.5 cores: GOMAXPROCS %d (calls %v), want gofit to set 1", procs, calls)
	}
	tr.Set("cpu.max", "400000 100000")
	rt.resize(4)
	tk.tick()
	if procs, _, _, _, handBacks := rt.state(); handBacks != 1 || procs != 4 {
		t.Errorf("at 4 cores the runtime agrees again: GOMAXPROCS %d, %d hand-backs; want 4 handed back once", procs, handBacks)
	}
}

func TestExplicitEnvWins(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "50000 100000")
	tr.Set("memory.max", "104857600")
	rt := newFakeRuntime(8)
	var logs logRecorder
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), newManualTicker().opt(),
		WithLookupEnv(env("GOMAXPROCS", "8", "GOMEMLIMIT", "200MiB")), WithLogger(slog.New(&logs)), withGo(go126, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if procs, calls, mem, _, _ := rt.state(); len(calls) != 0 || procs != 8 || mem != math.MaxInt64 {
		t.Errorf("gofit changed settings the environment fixed: calls %v, memory limit %d", calls, mem)
	}
	if !logs.has(slog.LevelWarn, "GOMAXPROCS=8 from the environment is above the CPU limit") || !logs.has(slog.LevelWarn, "GOMEMLIMIT=200MiB from the environment is at or above") {
		t.Errorf("missing warnings; logged %q", logs.messages())
	}
}

func TestUseTheMemoryYouPayFor(t *testing.T) {
	tr := newTree(t)
	tr.Set("memory.max", "104857600")
	rt := newFakeRuntime(2)
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(2), tk.opt(), WithLookupEnv(env()), WithGOGC("off"), withGo(go126, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if _, _, mem, gc, _ := rt.state(); gc != -1 || mem != 100<<20*9/10 {
		t.Errorf("GOGC %d, memory limit %d; want off with 90MiB", gc, mem)
	}
	tr.Set("memory.max", "max")
	tk.tick()
	if _, _, mem, gc, _ := rt.state(); gc != 100 || mem != math.MaxInt64 {
		t.Errorf("without a memory limit: GOGC %d, memory limit %d; want both restored", gc, mem)
	}
}

func TestUnreadableKeepsSettingsAndLogsOnce(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "100000 100000")
	rt := newFakeRuntime(8)
	rt.follows = false
	tk := newManualTicker()
	var logs logRecorder
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(), WithLookupEnv(env()), WithLogger(slog.New(&logs)), withGo(go124, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	tr.Set("cpu.max", "garbage")
	tk.tick()
	tk.tick()
	if procs, _, _, _, _ := rt.state(); procs != 1 {
		t.Errorf("GOMAXPROCS %d after a malformed cpu.max, want 1 kept", procs)
	}
	if n := logs.count(slog.LevelWarn, "cannot read cgroup limits"); n != 1 {
		t.Errorf("logged the read error %d times, want once: %q", n, logs.messages())
	}
	if f.Errors() < 3 {
		t.Errorf("Errors() = %d, want at least 3", f.Errors())
	}
	tr.Set("cpu.max", "300000 100000")
	tk.tick()
	if procs, _, _, _, _ := rt.state(); procs != 3 {
		t.Errorf("GOMAXPROCS %d after the file was fixed, want 3", procs)
	}
}

func TestDisabledAndBadOptions(t *testing.T) {
	tr := newTree(t)
	for _, v := range []string{"off", "OFF", "false", "0", "No"} {
		if _, err := Start(context.Background(), WithRoot(tr.Root), WithLookupEnv(env("GOFIT", v))); !errors.Is(err, ErrDisabled) {
			t.Errorf("GOFIT=%s: %v, want ErrDisabled", v, err)
		}
	}
	for _, v := range []string{"on", "1", "true", ""} {
		f, err := New(WithRoot(tr.Root), WithLookupEnv(env("GOFIT", v)))
		if err != nil {
			t.Errorf("GOFIT=%q: %v", v, err)
			continue
		}
		f.close()
	}
	if _, err := New(WithRoot(tr.Root), WithLookupEnv(env("GOFIT", "of"))); err == nil || !strings.Contains(err.Error(), "GOFIT") {
		t.Errorf("GOFIT=of: %v, want an error naming GOFIT", err)
	}
	for _, d := range []time.Duration{0, -time.Second, time.Nanosecond, 99 * time.Millisecond} {
		if _, err := New(WithRoot(tr.Root), WithRefresh(d)); err == nil || !strings.Contains(err.Error(), "refresh") {
			t.Errorf("refresh %v: %v", d, err)
		}
	}
	for _, r := range []float64{1.2, math.NaN(), math.Inf(1), -0.5, 1} {
		if _, err := New(WithRoot(tr.Root), WithMemoryRatio(r)); err == nil || !strings.Contains(err.Error(), "memory ratio") {
			t.Errorf("ratio %g: %v", r, err)
		}
	}
	if _, err := New(WithRoot(tr.Root), WithGOGC("-5")); err == nil || !strings.Contains(err.Error(), "GOGC") {
		t.Errorf("GOGC -5: %v", err)
	}
	if _, err := New(WithRoot(t.TempDir())); err == nil {
		t.Error("no cgroup: no error")
	}
}

// A main module at go 1.24 run with GODEBUG=containermaxprocs=1: its
// built-in updatemaxprocs=0 makes the runtime size GOMAXPROCS once. After
// a resize from 2 to 4 cores it stays at 2 unless gofit sets it.
func TestFollowsWhenTheRuntimeSizesOnlyOnce(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "200000 100000")
	rt := newFakeRuntime(2)
	rt.follows = false
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(),
		WithLookupEnv(env("GODEBUG", "containermaxprocs=1")), withGo(go126, "containermaxprocs=0,updatemaxprocs=0"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if _, calls, _, _, _ := rt.state(); len(calls) != 0 {
		t.Fatalf("gofit set GOMAXPROCS %v although the runtime already had 2", calls)
	}
	tr.Set("cpu.max", "400000 100000")
	rt.resize(4) // the runtime's choice now, which it does not apply
	tk.tick()
	if procs, _, _, _, handBacks := rt.state(); procs != 4 || handBacks != 0 {
		t.Errorf("after 2 -> 4 cores: GOMAXPROCS %d (%d hand-backs), want gofit to set 4", procs, handBacks)
	}
	if a := f.Plan().GOMAXPROCSAction; a != fit.Set {
		t.Errorf("action %v, want set", a)
	}
}

// A hand-back whose result differs from the plan (the runtime knows
// something gofit does not) is undone: gofit keeps GOMAXPROCS.
func TestHandBackResultIsChecked(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "50000 100000")
	rt := newFakeRuntime(2)
	tk := newManualTicker()
	var logs logRecorder
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(), WithLookupEnv(env()), withGo(go126, ""), WithLogger(slog.New(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if procs, _, _, _, _ := rt.state(); procs != 1 {
		t.Fatalf("at 0.5 cores GOMAXPROCS %d, want 1", procs)
	}
	tr.Set("cpu.max", "400000 100000")
	rt.resize(3) // not the 4 that gofit's model of the runtime expects
	tk.tick()
	if procs, _, _, _, handBacks := rt.state(); procs != 4 || handBacks != 1 {
		t.Errorf("GOMAXPROCS %d after %d hand-backs, want 4 set by gofit after the failed hand-back", procs, handBacks)
	}
	if !logs.has(slog.LevelWarn, "chose another GOMAXPROCS") {
		t.Errorf("no warning: %q", logs.messages())
	}
	tr.Set("cpu.max", "300000 100000")
	rt.resize(3)
	tk.tick()
	if procs, _, _, _, handBacks := rt.state(); procs != 3 || handBacks != 1 {
		t.Errorf("GOMAXPROCS %d after %d hand-backs; want 3 set, no second hand-back", procs, handBacks)
	}
}

// `gofit run` exported GOMAXPROCS and GOMEMLIMIT and marked them: the
// library takes them over and follows resizes, instead of treating them as
// the user's choice.
func TestTakesOverFromGofitRun(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "200000 100000")
	tr.Set("memory.max", "268435456")
	rt := newFakeRuntime(2)
	rt.custom = true // the runtime read GOMAXPROCS from the environment
	rt.memLimit = 241591910
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(), withGo(go126, ""),
		WithLookupEnv(env("GOMAXPROCS", "2", "GOMEMLIMIT", "241591910", fit.MarkerVar, "GOMAXPROCS=2,GOMEMLIMIT=241591910")))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if procs, _, _, _, handBacks := rt.state(); procs != 2 || handBacks != 1 {
		t.Errorf("at start: GOMAXPROCS %d, %d hand-backs; want the runtime's own updates back on", procs, handBacks)
	}
	tr.Set("cpu.max", "400000 100000")
	tr.Set("memory.max", "134217728")
	rt.resize(4)
	tk.tick()
	if procs, _, mem, _, _ := rt.state(); procs != 4 || mem != 128<<20*9/10 {
		t.Errorf("after resize: GOMAXPROCS %d, memory limit %d; want 4 and 90%% of 128MiB", procs, mem)
	}
	// A value the user changed after gofit run is the user's again.
	rt2 := newFakeRuntime(3)
	rt2.custom = true
	g, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt2), withCPUs(8), newManualTicker().opt(), withGo(go126, ""),
		WithLookupEnv(env("GOMAXPROCS", "3", fit.MarkerVar, "GOMAXPROCS=2")))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if procs, calls, _, _, handBacks := rt2.state(); procs != 3 || len(calls) != 0 || handBacks != 0 {
		t.Errorf("user's GOMAXPROCS=3: now %d, calls %v, %d hand-backs; want it left alone", procs, calls, handBacks)
	}
}

// Stop restores what Start found: an explicit runtime.GOMAXPROCS(3) made
// before Start, and a memory limit set before it.
func TestStopRestoresValuesFoundAtStart(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "100000 100000")
	tr.Set("memory.max", "268435456")
	rt := newFakeRuntime(8)
	rt.gomaxprocsExplicit(3)
	rt.memLimit = 500 << 20
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(), WithLookupEnv(env()), withGo(go126, ""))
	if err != nil {
		t.Fatal(err)
	}
	if procs, _, mem, _, _ := rt.state(); procs != 1 || mem != 256<<20*9/10 {
		t.Fatalf("after Start: GOMAXPROCS %d, memory limit %d", procs, mem)
	}
	f.Stop()
	if procs, _, mem, _, handBacks := rt.state(); procs != 3 || mem != 500<<20 || handBacks != 0 {
		t.Errorf("after Stop: GOMAXPROCS %d, memory limit %d, %d hand-backs; want 3 and 500MiB restored", procs, mem, handBacks)
	}

	// GOMAXPROCS was the runtime's own, following choice: Stop hands it
	// back rather than pinning a number.
	rt = newFakeRuntime(2)
	tr.Set("cpu.max", "50000 100000")
	f, err = Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), withCPUs(8), tk.opt(), WithLookupEnv(env()), withGo(go126, ""))
	if err != nil {
		t.Fatal(err)
	}
	if procs, _, _, _, _ := rt.state(); procs != 1 {
		t.Fatalf("GOMAXPROCS %d at 0.5 cores", procs)
	}
	f.Stop()
	if procs, _, _, _, handBacks := rt.state(); procs != 2 || handBacks != 1 || rt.custom {
		t.Errorf("after Stop: GOMAXPROCS %d, %d hand-backs, custom %v; want the runtime's own 2", procs, handBacks, rt.custom)
	}
}

func (r *fakeRuntime) gomaxprocsExplicit(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.procs, r.custom = n, true
}

func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("skipping: cannot count open files: %v", err)
	}
	return len(ents)
}

// A first refresh that fails leaves nothing open.
func TestStartFailureLeaksNothing(t *testing.T) {
	tr := newTree(t)
	tr.Set("cpu.max", "garbage")
	tr.Set("memory.max", "268435456")
	before := openFiles(t)
	for i := 0; i < 5; i++ {
		if _, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(newFakeRuntime(2)), WithLookupEnv(env())); err == nil {
			t.Fatal("Start succeeded on a malformed cpu.max")
		}
	}
	if after := openFiles(t); after != before {
		t.Errorf("%d files open before five failed Starts, %d after", before, after)
	}
}

// The affinity mask is re-read at every refresh, not only when the
// limits change.
func TestAffinityReadEachRefresh(t *testing.T) {
	tr := newTree(t)
	rt := newFakeRuntime(4)
	rt.follows = false
	var cpus atomic.Int64
	cpus.Store(4)
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.Root), withRuntime(rt), tk.opt(), WithLookupEnv(env()), withGo(go124, ""),
		func(c *config) { c.cpus = func() int { return int(cpus.Load()) } })
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	cpus.Store(2) // taskset: the limits are unchanged
	tk.tick()
	if procs, _, _, _, _ := rt.state(); procs != 2 {
		t.Errorf("GOMAXPROCS %d after the mask shrank to 2 CPUs", procs)
	}
}

// Non-Go memory is what the process holds outside the Go runtime and the
// kernel cannot reclaim, by part: page cache the process does not map is
// not counted, however large.
func TestUnmanagedMemory(t *testing.T) {
	const mib = 1 << 20
	tr := newTree(t)
	tr.Set("memory.max", "268435456")
	tr.Set("memory.current", "629145600\n")                                                                          // 600MiB charged,
	tr.Set("memory.stat", "anon 52428800\nfile 524288000\nactive_file 524288000\ninactive_file 0\nkernel 2097152\n") // mostly active page cache
	tr.Write("proc/self/smaps_rollup", "Rss: 40960 kB\nAnonymous: 30720 kB\n")                                       // the process holds 40MiB
	rt := newFakeRuntime(2)
	f, err := New(WithRoot(tr.Root), withRuntime(rt), withCPUs(2), WithLookupEnv(env()), withGo(go126, ""),
		func(c *config) { c.goMemory = func() int64 { return 10 * mib } })
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if err := f.Refresh(); err != nil {
		t.Fatal(err)
	}
	// 30MiB anonymous - 10MiB Go = 20MiB off-heap; 2MiB kernel; 40-30 =
	// 10MiB of mapped file pages, all budgeted at first. 256MiB - 32MiB -
	// 8MiB margin.
	want := fit.NonGo{Anon: 20 * mib, Kernel: 2 * mib, HotFile: 10 * mib}
	if n, p := f.NonGo(), f.Plan(); n != want || p.GOMEMLIMIT != 216*mib || p.GOMEMLIMITReason != fit.ReasonUnmanaged {
		t.Errorf("non-Go %+v, GOMEMLIMIT %s (%s); want %+v and 216MiB", n, fit.FormatBytes(p.GOMEMLIMIT), p.GOMEMLIMITReason, want)
	}
}

// The unmanaged estimate is the largest of the last minute of wall time,
// however often the refreshes come.
func TestUnmanagedWindowIsTimeBased(t *testing.T) {
	const mib = 1 << 20
	for _, every := range []time.Duration{100 * time.Millisecond, 10 * time.Second} {
		tr := newTree(t)
		tr.Set("memory.max", "268435456")
		clock := time.Unix(1_700_000_000, 0)
		f, err := New(WithRoot(tr.Root), withRuntime(newFakeRuntime(2)), withCPUs(2), WithLookupEnv(env()), withGo(go126, ""),
			func(c *config) {
				c.goMemory = func() int64 { return 0 }
				c.now = func() time.Time { return clock }
			})
		if err != nil {
			t.Fatal(err)
		}
		refresh := func() int64 {
			t.Helper()
			if err := f.Refresh(); err != nil {
				t.Fatal(err)
			}
			return f.NonGo().Anon
		}
		tr.Write("proc/self/smaps_rollup", "Rss: 102400 kB\nAnonymous: 102400 kB\n") // a 100MiB spike
		if u := refresh(); u != 100*mib {
			t.Fatalf("every %v: spike %s", every, fit.FormatBytes(u))
		}
		tr.Write("proc/self/smaps_rollup", "Rss: 20480 kB\nAnonymous: 20480 kB\n")
		start := clock
		for clock.Add(every).Sub(start) < time.Minute {
			clock = clock.Add(every)
			if u := refresh(); u != 100*mib {
				t.Fatalf("every %v: %v after the spike the estimate is %s, want the spike's 100MiB", every, clock.Sub(start), fit.FormatBytes(u))
			}
		}
		clock = start.Add(61 * time.Second)
		if u := refresh(); u != 20*mib {
			t.Errorf("every %v: 61s after the spike the estimate is %s, want 20MiB", every, fit.FormatBytes(u))
		}
		f.close()
	}
}

// The hot-file budget gives back a step per quiet hold down to its floor,
// raising GOMEMLIMIT, and steps up again when the cgroup shows file
// refaults in two refreshes in a row.
func TestFileBudgetInProcess(t *testing.T) {
	const mib = 1 << 20
	tr := newTree(t)
	tr.Set("memory.max", "134217728")                                         // 128MiB
	tr.Write("proc/self/smaps_rollup", "Rss: 40960 kB\nAnonymous: 6144 kB\n") // 34MiB of mapped file pages (the sample's text)
	clock := time.Unix(1_700_000_000, 0)
	f, err := New(WithRoot(tr.Root), withRuntime(newFakeRuntime(2)), withCPUs(2), WithLookupEnv(env()), withGo(go126, ""),
		func(c *config) {
			c.goMemory = func() int64 { return 6 * mib }
			c.now = func() time.Time { return clock }
		})
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	refresh := func(refaults int) fit.Plan {
		t.Helper()
		tr.Set("memory.stat", fmt.Sprintf("anon 6291456\ninactive_file 0\nworkingset_refault_file %d\n", refaults))
		if err := f.Refresh(); err != nil {
			t.Fatal(err)
		}
		return f.Plan()
	}
	first := refresh(0)
	if f.NonGo().HotFile != 34*mib {
		t.Fatalf("first budget %+v, want every resident file page", f.NonGo())
	}
	prev := first.GOMEMLIMIT
	for range 40 {
		clock = clock.Add(fit.FileBudgetHold)
		p := refresh(0)
		if p.GOMEMLIMIT < prev {
			t.Fatalf("GOMEMLIMIT fell to %s while no refaults were seen", fit.FormatBytes(p.GOMEMLIMIT))
		}
		prev = p.GOMEMLIMIT
	}
	if n := f.NonGo(); n.HotFile != fit.FileBudgetFloor {
		t.Errorf("after 20 quiet minutes the budget is %s, want the floor %s", fit.FormatBytes(n.HotFile), fit.FormatBytes(fit.FileBudgetFloor))
	}
	settled := f.Plan().GOMEMLIMIT
	if settled <= first.GOMEMLIMIT {
		t.Errorf("GOMEMLIMIT %s did not rise from %s as the budget fell", fit.FormatBytes(settled), fit.FormatBytes(first.GOMEMLIMIT))
	}
	clock = clock.Add(time.Second)
	refresh(1000) // one burst: a cold path paged in
	if f.NonGo().HotFile != fit.FileBudgetFloor {
		t.Errorf("one burst moved the budget to %s", fit.FormatBytes(f.NonGo().HotFile))
	}
	clock = clock.Add(time.Second)
	if p := refresh(2000); f.NonGo().HotFile <= fit.FileBudgetFloor || p.GOMEMLIMIT >= settled {
		t.Errorf("refaults in two refreshes: budget %s, GOMEMLIMIT %s (was %s); want both to move", fit.FormatBytes(f.NonGo().HotFile), fit.FormatBytes(p.GOMEMLIMIT), fit.FormatBytes(settled))
	}
}

func BenchmarkRefresh(b *testing.B) {
	tr := newTree(b)
	tr.Set("cpu.max", "150000 100000")
	tr.Set("memory.max", "268435456")
	f, err := New(WithRoot(tr.Root), withRuntime(newFakeRuntime(2)), WithLookupEnv(env()), withGo(go126, ""))
	if err != nil {
		b.Fatal(err)
	}
	defer f.close()
	f.Refresh()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := f.Refresh(); err != nil {
			b.Fatal(err)
		}
	}
}

// logRecorder is a slog.Handler that keeps records.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) count(level slog.Level, sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.Level == level && strings.Contains(r.Message, sub) {
			n++
		}
	}
	return n
}
func (l *logRecorder) has(level slog.Level, sub string) bool { return l.count(level, sub) > 0 }
func (l *logRecorder) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		out = append(out, r.Message)
	}
	return out
}

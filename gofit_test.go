package gofit

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// tree is a writable cgroup v2 fixture for one process at /pod/ctr.
type tree struct {
	t    *testing.T
	root string
}

func newTree(t *testing.T) *tree {
	tr := &tree{t: t, root: t.TempDir()}
	tr.write("proc/self/cgroup", "0::/pod/ctr\n")
	tr.write("proc/self/mountinfo", "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	tr.write("sys/fs/cgroup/pod/ctr/memory.current", "1048576\n")
	tr.write("sys/fs/cgroup/pod/ctr/memory.stat", "anon 1048576\ninactive_file 0\n")
	return tr
}

func (tr *tree) write(rel, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	// Rewrite in place, as the kernel changes a cgroup file.
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr *tree) cpuMax(s string)    { tr.write("sys/fs/cgroup/pod/ctr/cpu.max", s+"\n") }
func (tr *tree) memMax(s string)    { tr.write("sys/fs/cgroup/pod/ctr/memory.max", s+"\n") }
func (tr *tree) podCPUMax(s string) { tr.write("sys/fs/cgroup/pod/cpu.max", s+"\n") }

// fakeRuntime records what gofit asks of the Go runtime.
type fakeRuntime struct {
	mu        sync.Mutex
	procs     int
	procCalls []int
	memLimit  int64
	gcPercent int
	handBacks int
}

func newFakeRuntime(procs int) *fakeRuntime {
	return &fakeRuntime{procs: procs, memLimit: NoMemoryLimit, gcPercent: 100}
}

func (r *fakeRuntime) api() runtimeAPI {
	return runtimeAPI{
		gomaxprocs: func(n int) int {
			r.mu.Lock()
			defer r.mu.Unlock()
			prev := r.procs
			if n > 0 {
				r.procs = n
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
		defaultProcs: func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.handBacks++
			return true
		},
	}
}

func (r *fakeRuntime) state() (procs int, calls []int, mem int64, gc int, handBacks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.procs, append([]int(nil), r.procCalls...), r.memLimit, r.gcPercent, r.handBacks
}

func withRuntime(r *fakeRuntime) Option { return func(c *config) { c.rt = r.api() } }
func withCPUs(n int) Option             { return func(c *config) { c.cpus = n } }

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
	return WithTicker(func(time.Duration) (<-chan time.Time, func()) { return m.c, func() {} })
}

// tick delivers one tick and a second one, which the loop only takes after
// finishing the refresh the first one started.
func (m *manualTicker) tick() { m.c <- time.Now(); m.c <- time.Now() }

func TestFollowsCPUAndMemoryBothWays(t *testing.T) {
	tr := newTree(t)
	tr.cpuMax("200000 100000")
	tr.memMax("268435456")
	rt := newFakeRuntime(8)
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.root), withRuntime(rt), withCPUs(8), tk.opt(), WithEnv(env()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	procs, _, mem, _, _ := rt.state()
	if procs != 2 || mem != 256<<20*9/10 {
		t.Fatalf("after start: GOMAXPROCS %d, memory limit %d; want 2 and 90%% of 256MiB", procs, mem)
	}

	tr.cpuMax("100000 100000")
	tr.memMax("134217728")
	tk.tick()
	procs, _, mem, _, _ = rt.state()
	if procs != 1 || mem != 128<<20*9/10 {
		t.Errorf("after shrinking: GOMAXPROCS %d, memory limit %d; want 1 and 90%% of 128MiB", procs, mem)
	}

	tr.cpuMax("400000 100000")
	tr.memMax("268435456")
	tk.tick()
	procs, _, mem, _, _ = rt.state()
	if procs != 4 || mem != 256<<20*9/10 {
		t.Errorf("after growing: GOMAXPROCS %d, memory limit %d; want 4 and 90%% of 256MiB", procs, mem)
	}

	tr.cpuMax("max 100000")
	tr.memMax("max")
	tk.tick()
	procs, _, mem, _, _ = rt.state()
	if procs != 8 || mem != NoMemoryLimit {
		t.Errorf("after lifting the limits: GOMAXPROCS %d, memory limit %d; want 8 and none", procs, mem)
	}

	f.Stop()
	procs, _, mem, _, _ = rt.state()
	if procs != 8 || mem != NoMemoryLimit {
		t.Errorf("after Stop: GOMAXPROCS %d, memory limit %d; want the originals", procs, mem)
	}
}

func TestTighterAncestorWins(t *testing.T) {
	tr := newTree(t)
	tr.cpuMax("400000 100000")
	tr.podCPUMax("100000 100000")
	rt := newFakeRuntime(8)
	f, err := Start(context.Background(), WithRoot(tr.root), withRuntime(rt), withCPUs(8), newManualTicker().opt(), WithEnv(env()))
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
	tr.cpuMax("200000 100000")
	rt := newFakeRuntime(2)
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.root), withRuntime(rt), withCPUs(8), tk.opt(), WithEnv(env("GODEBUG", "containermaxprocs=1")))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if _, calls, _, _, _ := rt.state(); len(calls) != 0 {
		t.Fatalf("gofit set GOMAXPROCS %v although the runtime already chose 2", calls)
	}
	tr.cpuMax("50000 100000")
	tk.tick()
	if procs, calls, _, _, _ := rt.state(); procs != 1 || len(calls) != 1 {
		t.Errorf("at 0.5 cores: GOMAXPROCS %d (calls %v), want gofit to set 1", procs, calls)
	}
	tr.cpuMax("400000 100000")
	tk.tick()
	if _, _, _, _, handBacks := rt.state(); handBacks != 1 {
		t.Errorf("at 4 cores the runtime agrees again, but gofit did not hand GOMAXPROCS back (%d)", handBacks)
	}
}

func TestExplicitEnvWins(t *testing.T) {
	tr := newTree(t)
	tr.cpuMax("50000 100000")
	tr.memMax("104857600")
	rt := newFakeRuntime(8)
	var logs logRecorder
	f, err := Start(context.Background(), WithRoot(tr.root), withRuntime(rt), withCPUs(8), newManualTicker().opt(),
		WithEnv(env("GOMAXPROCS", "8", "GOMEMLIMIT", "200MiB")), WithLogger(slog.New(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if procs, calls, mem, _, _ := rt.state(); len(calls) != 0 || procs != 8 || mem != NoMemoryLimit {
		t.Errorf("gofit changed settings the environment fixed: calls %v, memory limit %d", calls, mem)
	}
	if !logs.has(slog.LevelWarn, "GOMAXPROCS=8 from the environment is above the CPU limit") || !logs.has(slog.LevelWarn, "GOMEMLIMIT=200MiB from the environment is at or above") {
		t.Errorf("missing warnings; logged %q", logs.messages())
	}
}

func TestUseTheMemoryYouPayFor(t *testing.T) {
	tr := newTree(t)
	tr.memMax("104857600")
	rt := newFakeRuntime(2)
	tk := newManualTicker()
	f, err := Start(context.Background(), WithRoot(tr.root), withRuntime(rt), withCPUs(2), tk.opt(), WithEnv(env()), WithGOGC("off"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if _, _, mem, gc, _ := rt.state(); gc != -1 || mem != 100<<20*9/10 {
		t.Errorf("GOGC %d, memory limit %d; want off with 90MiB", gc, mem)
	}
	tr.memMax("max")
	tk.tick()
	if _, _, mem, gc, _ := rt.state(); gc != 100 || mem != NoMemoryLimit {
		t.Errorf("without a memory limit: GOGC %d, memory limit %d; want both restored", gc, mem)
	}
}

func TestUnreadableKeepsSettingsAndLogsOnce(t *testing.T) {
	tr := newTree(t)
	tr.cpuMax("100000 100000")
	rt := newFakeRuntime(8)
	tk := newManualTicker()
	var logs logRecorder
	f, err := Start(context.Background(), WithRoot(tr.root), withRuntime(rt), withCPUs(8), tk.opt(), WithEnv(env()), WithLogger(slog.New(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	tr.cpuMax("garbage")
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
	tr.cpuMax("300000 100000")
	tk.tick()
	if procs, _, _, _, _ := rt.state(); procs != 3 {
		t.Errorf("GOMAXPROCS %d after the file was fixed, want 3", procs)
	}
}

func TestDisabledAndBadOptions(t *testing.T) {
	tr := newTree(t)
	if _, err := Start(context.Background(), WithRoot(tr.root), WithEnv(env("GOFIT", "off"))); !errors.Is(err, ErrDisabled) {
		t.Errorf("GOFIT=off: %v, want ErrDisabled", err)
	}
	if _, err := New(WithRoot(tr.root), WithRefresh(0)); err == nil || !strings.Contains(err.Error(), "refresh") {
		t.Errorf("zero refresh: %v", err)
	}
	if _, err := New(WithRoot(tr.root), WithMemoryRatio(1.2)); err == nil || !strings.Contains(err.Error(), "memory ratio") {
		t.Errorf("bad ratio: %v", err)
	}
	if _, err := New(WithRoot(t.TempDir())); err == nil {
		t.Error("no cgroup: no error")
	}
}

func TestEnvOptions(t *testing.T) {
	opts, errs := EnvOptions(env("GOFIT_REFRESH", "250ms", "GOFIT_MEMORY_RATIO", "0.8", "GOFIT_CPU_ROUNDING", "ceil", "GOFIT_GOGC", "200"))
	if len(opts) != 4 || len(errs) != 0 {
		t.Fatalf("%d options, errors %v", len(opts), errs)
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.refresh != 250*time.Millisecond || c.opts.MemoryRatio != 0.8 || c.opts.Rounding != 1 || c.opts.GOGC != "200" {
		t.Errorf("config %+v", c)
	}
	_, errs = EnvOptions(env("GOFIT_REFRESH", "soon", "GOFIT_MEMORY_RATIO", "90", "GOFIT_CPU_ROUNDING", "up", "GOFIT_GOGC", "-5"))
	if len(errs) != 4 {
		t.Fatalf("errors %v, want 4", errs)
	}
	for i, name := range []string{"GOFIT_REFRESH", "GOFIT_MEMORY_RATIO", "GOFIT_CPU_ROUNDING", "GOFIT_GOGC"} {
		if !strings.Contains(errs[i].Error(), name) {
			t.Errorf("error %q does not name %s", errs[i], name)
		}
	}
}

func BenchmarkRefresh(b *testing.B) {
	tr := newTree(&testing.T{})
	defer os.RemoveAll(tr.root)
	tr.cpuMax("150000 100000")
	tr.memMax("268435456")
	f, err := New(WithRoot(tr.root), withRuntime(newFakeRuntime(2)), WithEnv(env()))
	if err != nil {
		b.Fatal(err)
	}
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

// Package sandbox is where the lab's trials run: one parent cgroup per
// lab process with a child group per trial (CPU quota and weight, memory
// limit), the target started inside it on the target's CPUs while the
// load generator keeps CPUs of its own (affinity.go), its readiness and
// its stats, and a sweep of what a killed lab left behind (cgroups,
// temporary directories). The study asks it for trials:
//
//	sb, _ := sandbox.New()
//	defer sb.Close()
//	placement, _ := sb.Isolate(need)
//	tr, _ := sb.Start(ctx, target, sandbox.TrialConfig{CPU: 0.5, Memory: 64 << 20})
//	defer tr.Stop()
//	stats, _ := tr.Stats()
//
// It decides nothing about what to run: that is the study's.
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"

	"golang.org/x/sys/unix"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
)

// ErrNoCgroups means the lab cannot create cgroups here.
var ErrNoCgroups = errors.New("cannot create cgroups")

// groupPrefix names the lab's parent cgroup, gofit-lab-<pid>; stale ones
// (whose lab process is gone) are swept at start.
const groupPrefix = "gofit-lab-"

// Target is the service under study.
type Target struct {
	Path string   // executable; its page cache is evicted for cold starts
	Args []string // arguments; "{port}" is replaced by a free port
	URL  string   // request URL when Requests is empty; "{port}" is replaced too
	// Header is sent with every request to URL (--header).
	Header http.Header
	// Requests is the request mix (--targets); "{port}" is replaced in
	// URLs and headers. Empty: GET URL.
	Requests []load.Target
	// ReadyURL is polled until the target is ready (default: URL, or the
	// mix's first GET target).
	ReadyURL     string
	ReadyTimeout time.Duration // default 30s
	Env          []string      // base environment (default: the lab's, without GO* runtime variables); "{port}" is replaced in values
	// Root, when set, runs the target in an image's root filesystem
	// (gofit lab --image): Path is then the executable on this machine,
	// inside Root.Dir, whose page cache the cold starts evict.
	Root *Root
}

// Root is an unpacked image's root filesystem and how its process runs
// there: the working directory and the user and group IDs.
type Root struct {
	Dir      string
	Cwd      string
	UID, GID int
}

// Mix is the requests the target gets, {port} not yet replaced.
func (t Target) Mix() []load.Target {
	if len(t.Requests) > 0 {
		return t.Requests
	}
	return load.Get(t.URL, t.Header)
}

// Ready is the URL polled for readiness, {port} not yet replaced; "" when
// there is none to guess (a mix without GET targets).
func (t Target) Ready() string {
	if t.ReadyURL != "" {
		return t.ReadyURL
	}
	for _, r := range t.Mix() {
		if r.Method == http.MethodGet {
			return r.URL
		}
	}
	return ""
}

// Sandbox runs trials in child cgroups of one parent group.
type Sandbox struct {
	parent *manage.Group
	mu     sync.Mutex
	seq    int
	live   map[*Trial]bool
	cpus   []int // the lab's affinity at start: what a container here sees
	place  *placement
}

// NewSandbox sweeps stale lab cgroups and temporary directories and
// creates this run's parent group.
func New() (*Sandbox, error) {
	self, err := cgroup.NewFS("/").Self()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCgroups, err)
	}
	sweep(self)
	sweepTemp(os.TempDir())
	g, err := newParentGroup(self)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCgroups, err)
	}
	return &Sandbox{parent: g, live: map[*Trial]bool{}, cpus: affinityCPUs()}, nil
}

// newParentGroup is the one place the lab creates its parent cgroup.
func newParentGroup(self *cgroup.Cgroups) (*manage.Group, error) {
	return manage.NewChild(self, groupPrefix+strconv.Itoa(os.Getpid()))
}

// Isolate pins the load generator (this process) to CPUs of its own
// where the target can do without them (it needs need CPUs to keep every
// setting's GOMAXPROCS), else to one CPU it shares with the target. Trials
// started afterwards get the target's CPUs.
func (s *Sandbox) Isolate(need int) (*result.Placement, error) {
	p := planPlacement(s.cpus, need, 1)
	if len(s.cpus) < 2 {
		p.Generator, p.Overlap = nil, len(s.cpus)
		p.Note = "not isolated: one CPU; the load generator and the target share it"
		return p.Placement, nil
	}
	if err := p.pin(); err != nil {
		p.Isolated, p.Overlap, p.Target = false, len(s.cpus), s.cpus
		p.Note = "not isolated: " + err.Error()
		return p.Placement, nil
	}
	s.place = p
	return p.Placement, nil
}

// Repin pins threads the runtime started since Isolate.
func (s *Sandbox) Repin() {
	if s.place != nil {
		s.place.pin()
	}
}

// tempPrefix names the lab's temporary directories, gofit-lab-<pid>-*.
const tempPrefix = "gofit-lab-"

// TempDir creates this run's temporary directory under os.TempDir(),
// named so that sweepTemp can remove it once this process is gone.
func TempDir() (string, error) {
	return os.MkdirTemp("", tempPrefix+strconv.Itoa(os.Getpid())+"-")
}

// sweepTemp removes the temporary directories of lab processes that no
// longer run (a SIGKILLed lab cannot clean up after itself). It returns
// the directories removed.
func sweepTemp(dir string) []string {
	var removed []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), tempPrefix)
		if !e.IsDir() || !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		p := filepath.Join(dir, e.Name())
		if err != nil || pid <= 0 || pid == os.Getpid() || labRunning(pid, p) {
			continue
		}
		if os.RemoveAll(p) == nil {
			removed = append(removed, p)
		}
	}
	return removed
}

// labRunning reports whether the lab process pid that made path is still
// running. A live process with that pid that started after path was made
// is another program that was handed a recycled pid: the lab is gone.
func labRunning(pid int, path string) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	st, err := os.Stat(path)
	if err != nil {
		return true
	}
	started, ok := processStart(pid)
	return !ok || !started.After(st.ModTime().Add(time.Second))
}

// processStart is when process pid started, from /proc: its start time in
// clock ticks after boot (field 22 of /proc/PID/stat) and the boot time.
func processStart(pid int) (time.Time, bool) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return time.Time{}, false
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return time.Time{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return time.Time{}, false
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	procStat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(procStat), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, false
			}
			// USER_HZ is 100 on every Linux ABI Go supports.
			return time.Unix(boot, 0).Add(time.Duration(ticks) * 10 * time.Millisecond), true
		}
	}
	return time.Time{}, false
}

// sweep removes lab cgroups left by lab processes that no longer run,
// killing what is still inside them. It returns the directories removed.
func sweep(self *cgroup.Cgroups) []string {
	var removed []string
	for _, n := range []*cgroup.Node{self.CPU, self.CPUAcct, self.Memory, self.Unified} {
		// On v2 a populated cgroup's processes were moved into a leaf and
		// the lab's groups sit beside it.
		if n = manage.ParentFor(n); n == nil {
			continue
		}
		entries, _ := os.ReadDir(n.Dir)
		for _, e := range entries {
			name := e.Name()
			if !e.IsDir() || !strings.HasPrefix(name, groupPrefix) {
				continue
			}
			pid, err := strconv.Atoi(strings.TrimPrefix(name, groupPrefix))
			dir := filepath.Join(n.Dir, name)
			if err != nil || pid <= 0 || pid == os.Getpid() || labRunning(pid, dir) {
				continue // not ours, or its lab is still running
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if manage.RemoveTree(ctx, dir) == nil {
				removed = append(removed, dir)
			}
			cancel()
		}
	}
	return removed
}

// Close stops any trial still running and removes the parent group.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	live := make([]*Trial, 0, len(s.live))
	for t := range s.live {
		live = append(live, t)
	}
	s.mu.Unlock()
	for _, t := range live {
		t.Stop()
	}
	s.place.unpin(s.cpus)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.parent.Remove(ctx)
}

// TrialConfig is one trial's limits and environment.
type TrialConfig struct {
	CPU    float64           // cores; 0 for none
	CPUReq float64           // cores requested: the CPU weight the kubelet gives them (cpu.shares); 0 for the default
	Memory int64             // bytes; 0 for none
	Env    map[string]string // added to the target's environment
	Warm   bool              // keep the binary's page cache (default: evict it, as in a new container)
}

// Trial is a running target in its own cgroup.
type Trial struct {
	s         *Sandbox
	g         *manage.Group
	cmd       *exec.Cmd
	exited    chan struct{}
	waitErr   error
	URL       string        // the readiness URL
	Targets   []load.Target // the request mix, ports filled in
	VarsURL   string
	Pid       int
	Resident  float64 // share of the binary in page cache just before start
	Ready     time.Duration
	output    *tail
	stopOnce  sync.Once
	final     cgroup.Stats
	finalErr  error
	stoppedAt time.Time
}

// StartError says why a trial never became ready.
type StartError struct {
	Outcome  string // "oom_killed", "stalled" or "errors"
	Detail   string
	TimedOut bool // not ready within the readiness timeout, nor refused
}

func (e *StartError) Error() string { return e.Outcome + ": " + e.Detail }

// Start starts the target in a new cgroup with cfg's limits and waits until
// its URL answers. On error nothing is left running.
func (s *Sandbox) Start(ctx context.Context, t Target, cfg TrialConfig) (*Trial, error) {
	s.mu.Lock()
	s.seq++
	name := "trial-" + strconv.Itoa(s.seq)
	s.mu.Unlock()
	g, err := manage.NewChild(s.parent.Cgroups, name)
	if err != nil {
		return nil, err
	}
	tr := &Trial{s: s, g: g, exited: make(chan struct{}), output: &tail{max: 4096}}
	fail := func(err error) (*Trial, error) {
		tr.Stop()
		return nil, err
	}
	if err := g.SetCPU(cfg.CPU, 0); err != nil {
		return fail(err)
	}
	if cfg.CPUReq > 0 {
		if err := g.SetCPURequest(cfg.CPUReq); err != nil {
			return fail(err)
		}
	}
	if err := g.SetMemoryMax(cfg.Memory); err != nil {
		return fail(err)
	}
	if !cfg.Warm {
		evict(t.Path)
	}
	tr.Resident = residentShare(t.Path)
	port, err := load.FreePort()
	if err != nil {
		return fail(err)
	}
	args := make([]string, len(t.Args))
	for i, a := range t.Args {
		args[i] = strings.ReplaceAll(a, "{port}", port)
	}
	tr.URL = strings.ReplaceAll(t.Ready(), "{port}", port)
	tr.Targets = load.WithPort(t.Mix(), port)
	if u, err := url.Parse(tr.Targets[0].URL); err == nil {
		tr.VarsURL = u.Scheme + "://" + u.Host + "/debug/vars"
	}
	var cmd *exec.Cmd
	if t.Root != nil {
		helper, err := rootCommand(t, args)
		if err != nil {
			return fail(err)
		}
		cmd = g.Command(helper[0], helper[1:]...)
	} else {
		cmd = g.Command(t.Path, args...)
	}
	env := t.Env
	if env == nil {
		env = load.CleanEnv()
	} else {
		env = slices.Clone(env)
		for i, e := range env {
			env[i] = strings.ReplaceAll(e, "{port}", port)
		}
	}
	for k, v := range cfg.Env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = tr.output, tr.output
	// Its own process group, so Ctrl-C reaches the lab, which then stops
	// the trial itself; and killed with the lab if the lab dies.
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL // add to Command's (clone into the cgroup on v2)
	s.mu.Lock()
	s.live[tr] = true
	s.mu.Unlock()
	start := time.Now()
	if err := s.place.startOnTargetCPUs(cmd.Start); err != nil {
		return fail(err)
	}
	tr.cmd = cmd
	tr.Pid = cmd.Process.Pid
	go func() {
		tr.waitErr = cmd.Wait()
		close(tr.exited)
	}()
	timeout := t.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	if err := tr.waitReady(ctx, timeout); err != nil {
		return fail(err)
	}
	tr.Ready = time.Since(start)
	return tr, nil
}

// stallWindow is how long a start may go without progress while its
// major faults or limit hits climb before it counts as stalled, not slow.
const stallWindow = 3 * time.Second

// DefaultReadyTimeout is how long a target may take to become ready.
const DefaultReadyTimeout = 30 * time.Second

// waitReady waits for the target's readiness URL. Not answering yet and
// answering 503 (warming up) are waited out until the timeout; a start
// that stops making progress while its memory thrashes is stalled.
func (tr *Trial) waitReady(ctx context.Context, timeout time.Duration) error {
	w := startWatch{window: stallWindow}
	err := load.WaitReady(ctx, load.Readiness{URL: tr.URL, Exited: tr.exited, Timeout: timeout, Check: func() error {
		if m, err := tr.g.MemoryStats(); err == nil && w.observe(time.Now(), m.MajorFaults, m.MaxHits, m.Anon) {
			return &StartError{Outcome: result.Stalled, Detail: fmt.Sprintf("not ready, and for %v no progress (resident memory flat) while major faults climb to %d and the limit was hit %d times", stallWindow, m.MajorFaults, m.MaxHits)}
		}
		return nil
	}})
	var nr *load.NotReadyError
	switch {
	case errors.Is(err, load.ErrExited):
		return tr.exitError()
	case errors.As(err, &nr) && nr.Refused:
		return &StartError{Outcome: result.Errored, Detail: nr.Error() + " (--url, --targets or --ready-url)"}
	case errors.As(err, &nr):
		return &StartError{Outcome: result.Errored, Detail: fmt.Sprintf("%v; output: %s", nr, tr.output), TimedOut: true}
	}
	return err
}

// startWatch tells a slow cold start from a stall. A start makes progress
// while its anonymous memory grows (the heap being built) or while it
// faults nothing in; it is stalled when major faults or limit hits climb
// at every look for a whole window and its memory does not grow: it is
// re-reading its own code pages, evicted as soon as they are read.
type startWatch struct {
	window       time.Duration
	started      bool
	faults, hits uint64
	anon         uint64
	lastProgress time.Time
}

func (w *startWatch) observe(now time.Time, faults, hits, anon uint64) (stalled bool) {
	if !w.started {
		w.started, w.lastProgress = true, now
		w.faults, w.hits, w.anon = faults, hits, anon
		return false
	}
	climbing := faults > w.faults || hits > w.hits
	grew := anon > w.anon+startGrowth
	if !climbing || grew {
		w.lastProgress = now
	}
	w.faults, w.hits = faults, hits
	if grew || anon < w.anon {
		w.anon = anon
	}
	return now.Sub(w.lastProgress) > w.window
}

// startGrowth is the anonymous-memory growth between looks that counts as
// progress.
const startGrowth = 64 << 10

func (tr *Trial) exitError() error {
	if m, err := tr.g.MemoryStats(); err == nil && m.OOMKills > 0 {
		return &StartError{Outcome: result.OOMKilled, Detail: fmt.Sprintf("killed by the OOM killer while starting (%v)", tr.waitErr)}
	}
	return &StartError{Outcome: result.Errored, Detail: fmt.Sprintf("exited while starting (%v); output: %s", tr.waitErr, tr.output)}
}

// Stats reads the trial's cgroup now (or, after Stop, as it was at the end).
func (tr *Trial) Stats() (cgroup.Stats, error) {
	if !tr.stoppedAt.IsZero() {
		return tr.final, tr.finalErr
	}
	return tr.g.Stats()
}

// MemoryStats reads the trial's memory cgroup now: what a load generator
// watches for a stall (major faults, limit hits).
func (tr *Trial) MemoryStats() (cgroup.MemoryStats, error) { return tr.g.MemoryStats() }

// Exited reports whether the target has exited.
func (tr *Trial) Exited() bool {
	select {
	case <-tr.exited:
		return true
	default:
		return false
	}
}

// Vars reads the target's /debug/vars, if it has one.
func (tr *Trial) Vars() (*RuntimeVars, error) {
	if tr.VarsURL == "" {
		return nil, errors.New("no /debug/vars URL")
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(tr.VarsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", tr.VarsURL, resp.Status)
	}
	return ParseVars(resp.Body, tr.VarsURL)
}

// ParseVars reads a /debug/vars document (from src, for errors): the
// sample's own variables, else the runtime's memstats.
func ParseVars(r io.Reader, src string) (*RuntimeVars, error) {
	var v struct {
		Sample   *RuntimeVars `json:"sample"`
		Memstats *struct {
			GCCPUFraction float64
			NumGC         uint32
		} `json:"memstats"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 8<<20)).Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if v.Sample != nil {
		return v.Sample, nil
	}
	if v.Memstats != nil {
		return &RuntimeVars{GCCPUFraction: v.Memstats.GCCPUFraction, NumGC: v.Memstats.NumGC}, nil
	}
	return nil, fmt.Errorf("%s: no memstats", src)
}

// Stop kills the target, reaps it, keeps the final stats and removes the
// trial's cgroup. It is safe to call more than once.
func (tr *Trial) Stop() {
	tr.stopOnce.Do(func() {
		tr.final, tr.finalErr = tr.g.Stats()
		tr.g.Kill()
		if tr.cmd != nil {
			select {
			case <-tr.exited:
			case <-time.After(10 * time.Second):
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tr.g.Remove(ctx)
		tr.stoppedAt = time.Now()
		tr.s.mu.Lock()
		delete(tr.s.live, tr)
		tr.s.mu.Unlock()
	})
}

// CPUOn is the CPU time the trial's cgroup spent on each CPU (cgroup v1
// cpuacct.usage_percpu), or nil where the kernel does not keep it.
func (tr *Trial) CPUOn() []uint64 {
	if tr.g.CPUAcct == nil {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(tr.g.CPUAcct.Dir, "cpuacct.usage_percpu"))
	if err != nil {
		return nil
	}
	var out []uint64
	for _, f := range strings.Fields(string(b)) {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// Output is the tail of what the target printed.
func (tr *Trial) Output() string { return tr.output.String() }

// evict drops the file's clean pages from the page cache, so the next start
// reads (and charges) them afresh, as a new container would.
func evict(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// residentShare is the share of the file's pages in the page cache.
func residentShare(path string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return -1
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return -1
	}
	defer unix.Munmap(data)
	page := os.Getpagesize()
	vec := make([]byte, (len(data)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return -1
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return float64(n) / float64(len(vec))
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// RuntimeVars is what a target tells about its Go runtime on /debug/vars,
// under the key "sample" (the embedded sample) or from "memstats".
type RuntimeVars struct {
	GoVersion       string  `json:"go_version"`
	GOMAXPROCS      int     `json:"gomaxprocs"`
	GOMEMLIMIT      int64   `json:"gomemlimit"`
	GCCPUSeconds    float64 `json:"gc_cpu_seconds"`
	TotalCPUSeconds float64 `json:"total_cpu_seconds"` // GOMAXPROCS × wall time, as the runtime counts it
	IdleCPUSeconds  float64 `json:"idle_cpu_seconds"`  // of which Ps sat idle
	GCCPUFraction   float64 `json:"gc_cpu_fraction"`
	NumGC           uint32  `json:"num_gc"`
}

// Package manage creates, limits, fills, kills and removes cgroups: what the
// lab, the tests and the node agent need. A service that only reads its
// limits imports package cgroup alone, which never writes, execs or kills.
package manage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
)

// Group is a cgroup that gofit created (one directory per hierarchy), for
// the lab and the node agent. It reads limits and stats like any Cgroups.
type Group struct {
	*cgroup.Cgroups
	dirs []string // every directory created, leaf-most hierarchy order

	mu   sync.Mutex
	cgfd *os.File // the v2 directory, open for clone3 CLONE_INTO_CGROUP
}

// LeafName is the child cgroup that processes are moved into when a v2
// cgroup that holds processes must enable controllers for new children
// (the "no internal processes" rule). It stays after they exit: the group
// it sits in may be a systemd unit's or a container's.
const LeafName = "gofit-leaf"

// ErrNotDelegated means the parent of a v2 cgroup does not hand it a
// controller (it is missing from cgroup.controllers), so no child can get it.
var ErrNotDelegated = errors.New("controller not delegated")

// NewChild creates a child cgroup called name under the process's cpu,
// cpuacct, memory and (on hybrid hosts, for per-group PSI) v2 cgroups.
//
// On cgroup v2 it first makes the parent able to give children the cpu and
// memory controllers (EnableControllers): if the parent holds processes (a
// systemd service, a container's own cgroup), they are moved into its child
// LeafName. When the parent is itself such a leaf (the caller was moved by
// an earlier NewChild), the child is created beside it instead, so repeated
// calls do not nest deeper and deeper.
//
// If any step fails, what was created is removed; errors name the file and
// keep the kernel's error, so errors.Is(err, fs.ErrPermission) tells a
// permission problem from the others.
func NewChild(c *cgroup.Cgroups, name string) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || name == LeafName {
		return nil, fmt.Errorf("cgroup name %s: must be a single path element other than %s", cgroup.DisplayPath(name), LeafName)
	}
	var nodes cgroup.Cgroups
	g := &Group{}
	made := map[string]*cgroup.Node{}
	child := func(n *cgroup.Node, enable bool) (*cgroup.Node, error) {
		if n == nil {
			return nil, nil
		}
		if enable {
			n = ParentFor(n)
		}
		if m, ok := made[n.Dir]; ok {
			return m, nil
		}
		if enable {
			if _, err := EnableControllers(n, "cpu", "memory"); err != nil {
				return nil, err
			}
		}
		dir := filepath.Join(n.Dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		g.dirs = append(g.dirs, dir)
		m := &cgroup.Node{Version: n.Version, Path: path.Join(n.Path, name), Dir: dir, Top: n.Top}
		made[n.Dir] = m
		return m, nil
	}
	var err error
	for _, p := range []struct {
		src *cgroup.Node
		dst **cgroup.Node
	}{{c.CPU, &nodes.CPU}, {c.CPUAcct, &nodes.CPUAcct}, {c.Memory, &nodes.Memory}, {c.Unified, &nodes.Unified}} {
		if p.src == nil {
			continue
		}
		enable := p.src.Version == 2 && c.Version() == 2
		if *p.dst, err = child(p.src, enable); err != nil {
			if p.src == c.Unified && c.Version() == 1 {
				err = nil // per-group PSI on hybrid hosts is a bonus
				continue
			}
			g.Remove(context.Background())
			return nil, err
		}
	}
	g.Cgroups = c.FS().Bind(nodes)
	if g.CPU == nil && g.Memory == nil {
		g.Remove(context.Background())
		return nil, fmt.Errorf("create cgroup %s: %w", cgroup.DisplayPath(name), cgroup.ErrNoCgroup)
	}
	return g, nil
}

// ParentFor is the cgroup under which NewChild creates children for a
// process whose v2 cgroup is n: n's parent when n is a LeafName leaf that
// NewChild moved processes into, else n. Code that looks for the groups it
// made earlier (stale lab groups, say) looks there.
func ParentFor(n *cgroup.Node) *cgroup.Node {
	if n == nil || n.Version != 2 {
		return n
	}
	if path.Base(n.Path) != LeafName || len(n.Dir) <= len(n.Top) {
		return n
	}
	return &cgroup.Node{Version: n.Version, Path: path.Dir(n.Path), Dir: filepath.Dir(n.Dir), Top: n.Top}
}

// EnableControllers makes the v2 cgroup n give ctrls to its children
// (cgroup.subtree_control). The kernel refuses that while n holds processes
// (EBUSY; EOPNOTSUPP once a threaded controller such as cpu is on), unless n
// is the root: n's processes are then moved into its child LeafName first,
// as container runtimes do and systemd's delegation rules ask. It returns
// the leaf's directory when it moved processes, else "". Controllers
// already enabled are left alone; the missing ones are enabled in one
// write, so a failure leaves subtree_control as it was.
func EnableControllers(n *cgroup.Node, ctrls ...string) (leaf string, err error) {
	if n == nil || n.Version != 2 {
		return "", errors.New("enable controllers: needs a cgroup v2 directory")
	}
	file := filepath.Join(n.Dir, "cgroup.subtree_control")
	cur, _, err := readSmall(file)
	if err != nil {
		return "", err
	}
	var missing []string
	for _, c := range ctrls {
		if !slices.Contains(strings.Fields(cur), c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	avail, _, err := readSmall(filepath.Join(n.Dir, "cgroup.controllers"))
	if err != nil {
		return "", err
	}
	for _, c := range missing {
		if !slices.Contains(strings.Fields(avail), c) {
			return "", fmt.Errorf("enable %s controller in %s: %w by its parent (cgroup.controllers has %q)",
				c, cgroup.DisplayPath(n.Dir), ErrNotDelegated, strings.TrimSpace(avail))
		}
	}
	what := strings.Join(missing, ", ")
	v := "+" + strings.Join(missing, " +")
	err = os.WriteFile(file, []byte(v), 0)
	if errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EOPNOTSUPP) {
		// The no-internal-processes rule: move the processes out of the way
		// and retry. With EOPNOTSUPP, n is a "thread root" (it holds
		// processes and a threaded controller such as cpu is on, as a
		// half-done earlier attempt leaves it), and no domain child can
		// take processes until those controllers are off again.
		on := strings.Fields(cur)
		if errors.Is(err, syscall.EOPNOTSUPP) && len(on) > 0 {
			if werr := os.WriteFile(file, []byte("-"+strings.Join(on, " -")), 0); werr != nil {
				return "", fmt.Errorf("enable %s controllers: turn off %s first: %w", what, strings.Join(on, ", "), werr)
			}
			v = "+" + strings.Join(append(on, missing...), " +")
		}
		if leaf, err = moveToLeaf(n.Dir); err != nil {
			return leaf, fmt.Errorf("enable %s controllers in %s: %w", what, cgroup.DisplayPath(n.Dir), err)
		}
		err = os.WriteFile(file, []byte(v), 0)
	}
	if err != nil {
		return leaf, fmt.Errorf("enable %s controllers: write %q: %w", what, v, err)
	}
	return leaf, nil
}

// moveToLeaf moves every process of dir into dir/LeafName, repeating while
// new ones appear (a process may fork while its parent is being moved).
func moveToLeaf(dir string) (string, error) {
	leaf := filepath.Join(dir, LeafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("create a leaf cgroup for its processes: %w", err)
	}
	for range 100 {
		pids, err := readPIDs(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return leaf, err
		}
		if len(pids) == 0 {
			return leaf, nil
		}
		for _, pid := range pids {
			err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
			if err != nil && !errors.Is(err, syscall.ESRCH) { // ESRCH: it exited meanwhile
				return leaf, fmt.Errorf("move process %d into %s: %w", pid, cgroup.DisplayPath(leaf), err)
			}
		}
	}
	return leaf, fmt.Errorf("processes keep appearing in %s; gave up moving them into %s", cgroup.DisplayPath(dir), LeafName)
}

// Dirs lists the directories of the group, one per hierarchy.
func (g *Group) Dirs() []string { return append([]string(nil), g.dirs...) }

func writeValue(file, v string) error {
	if err := os.WriteFile(file, []byte(v), 0); err != nil {
		return fmt.Errorf("write %q: %w", v, err) // *PathError names the file
	}
	return nil
}

// SetCPU sets the CFS bandwidth limit to cores CPUs per period; cores <= 0
// removes the limit. A zero period means the kernel default of 100ms.
func (g *Group) SetCPU(cores float64, period time.Duration) error {
	if g.CPU == nil {
		return fmt.Errorf("set cpu limit: %w", cgroup.ErrNoCgroup)
	}
	if period == 0 {
		period = 100 * time.Millisecond
	}
	periodUS := period.Microseconds()
	if periodUS < 1000 || periodUS > 1000000 {
		return fmt.Errorf("cpu period %v: must be between 1ms and 1s", period)
	}
	quotaUS := int64(cores * float64(periodUS))
	if cores > 0 && quotaUS < 1000 {
		return fmt.Errorf("cpu limit %.4g cores: quota %dus is below the kernel's 1ms minimum", cores, quotaUS)
	}
	if g.CPU.Version == 2 {
		q := "max"
		if cores > 0 {
			q = strconv.FormatInt(quotaUS, 10)
		}
		return writeValue(filepath.Join(g.CPU.Dir, "cpu.max"), q+" "+strconv.FormatInt(periodUS, 10))
	}
	// Lift the quota before changing the period so no intermediate
	// quota/period pair is rejected.
	if err := writeValue(filepath.Join(g.CPU.Dir, "cpu.cfs_quota_us"), "-1"); err != nil {
		return err
	}
	if err := writeValue(filepath.Join(g.CPU.Dir, "cpu.cfs_period_us"), strconv.FormatInt(periodUS, 10)); err != nil {
		return err
	}
	if cores <= 0 {
		return nil
	}
	return writeValue(filepath.Join(g.CPU.Dir, "cpu.cfs_quota_us"), strconv.FormatInt(quotaUS, 10))
}

// SetCPURequest gives the group the CPU weight the kubelet gives a
// container requesting cores: cpu.shares = cores × 1024 (2 to 262144) on
// v1, and those shares as cpu.weight on v2 (1 + (shares−2) × 9999 ÷ 262142,
// the kubelet's conversion). cores <= 0 restores the default weight.
func (g *Group) SetCPURequest(cores float64) error {
	if g.CPU == nil {
		return fmt.Errorf("set cpu request: %w", cgroup.ErrNoCgroup)
	}
	shares := int64(1024)
	if cores > 0 {
		shares = min(max(int64(cores*1024), 2), 262144)
	}
	if g.CPU.Version == 2 {
		weight := int64(100)
		if cores > 0 {
			weight = 1 + (shares-2)*9999/262142
		}
		return writeValue(filepath.Join(g.CPU.Dir, "cpu.weight"), strconv.FormatInt(weight, 10))
	}
	return writeValue(filepath.Join(g.CPU.Dir, "cpu.shares"), strconv.FormatInt(shares, 10))
}

// SetMemoryMax sets the hard memory limit; bytes <= 0 removes it. On v2 it
// also turns swap off for the group, so the limit means what it says.
func (g *Group) SetMemoryMax(bytes int64) error {
	if g.Memory == nil {
		return fmt.Errorf("set memory limit: %w", cgroup.ErrNoCgroup)
	}
	if g.Memory.Version == 2 {
		v := "max"
		if bytes > 0 {
			v = strconv.FormatInt(bytes, 10)
		}
		if err := writeValue(filepath.Join(g.Memory.Dir, "memory.max"), v); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(g.Memory.Dir, "memory.swap.max")); err == nil {
			return writeValue(filepath.Join(g.Memory.Dir, "memory.swap.max"), "0")
		}
		return nil
	}
	v := "-1"
	if bytes > 0 {
		v = strconv.FormatInt(bytes, 10)
	}
	return writeValue(filepath.Join(g.Memory.Dir, "memory.limit_in_bytes"), v)
}

// SetMemoryHigh sets v2 memory.high; bytes <= 0 removes it.
func (g *Group) SetMemoryHigh(bytes int64) error { return g.setV2Bytes("memory.high", bytes, "max") }

// SetMemoryMin sets v2 memory.min, memory the kernel never reclaims from
// the group (if its ancestors protect as much); bytes <= 0 removes it.
func (g *Group) SetMemoryMin(bytes int64) error { return g.setV2Bytes("memory.min", bytes, "0") }

// SetMemoryLow sets v2 memory.low, memory reclaimed from the group only
// when no unprotected memory is left; bytes <= 0 removes it.
func (g *Group) SetMemoryLow(bytes int64) error { return g.setV2Bytes("memory.low", bytes, "0") }

// SetOOMGroup sets v2 memory.oom.group: when on, an OOM kill in the group
// kills all of its processes together rather than one of them.
func (g *Group) SetOOMGroup(on bool) error {
	if g.Memory == nil || g.Memory.Version != 2 {
		return errors.New("memory.oom.group needs cgroup v2")
	}
	v := "0"
	if on {
		v = "1"
	}
	return writeValue(filepath.Join(g.Memory.Dir, "memory.oom.group"), v)
}

// setV2Bytes writes a v2 memory file: bytes, or none for bytes <= 0.
func (g *Group) setV2Bytes(name string, bytes int64, none string) error {
	if g.Memory == nil || g.Memory.Version != 2 {
		return fmt.Errorf("%s needs cgroup v2", name)
	}
	v := none
	if bytes > 0 {
		v = strconv.FormatInt(bytes, 10)
	}
	return writeValue(filepath.Join(g.Memory.Dir, name), v)
}

// AddProc moves process pid into every hierarchy of the group.
func (g *Group) AddProc(pid int) error {
	for _, dir := range g.dirs {
		if err := writeValue(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// PIDs lists the processes in the group (not in groups below it).
func (g *Group) PIDs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, dir := range g.dirs {
		pids, err := readPIDs(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return nil, err
		}
		for _, pid := range pids {
			if !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// readPIDs reads a cgroup.procs file; a missing file (a removed group)
// holds no processes.
func readPIDs(file string) ([]int, error) {
	s, ok, err := readSmall(file)
	if err != nil || !ok {
		return nil, err
	}
	var out []int
	for i, f := range strings.Fields(s) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, &cgroup.ParseError{File: file, Line: i + 1, Text: f, Err: errors.New("not a pid")}
		}
		out = append(out, pid)
	}
	return out, nil
}

// Kill sends SIGKILL to every process in the group.
func (g *Group) Kill() error {
	pids, err := g.PIDs()
	for _, pid := range pids {
		if kerr := syscall.Kill(pid, syscall.SIGKILL); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			err = errors.Join(err, fmt.Errorf("kill %d: %w", pid, kerr))
		}
	}
	return err
}

// Remove kills what is left in the group and below it (such as a LeafName
// group that NewChild made inside it) and removes its directories, deepest
// first, retrying while tasks drain, until ctx is done (or 5 seconds pass
// when ctx has no deadline). Removing an already removed group is not an
// error.
func (g *Group) Remove(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	if g.Cgroups != nil {
		g.Close()
	}
	g.mu.Lock()
	if g.cgfd != nil {
		g.cgfd.Close()
		g.cgfd = nil
	}
	g.mu.Unlock()
	return removeDirs(ctx, g.dirs...)
}

// RemoveTree kills the processes in the cgroup directory tree dir and
// removes it, leaves first, trying again until ctx ends (5 s when it has
// no deadline): a killed process leaves its cgroup only once it is gone.
// A missing dir is no error. It is for groups no Group value describes,
// such as those a killed lab left behind.
func RemoveTree(ctx context.Context, dir string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	return removeDirs(ctx, dir)
}

func removeDirs(ctx context.Context, dirs ...string) error {
	for {
		var errs error
		for _, dir := range dirs {
			errs = errors.Join(errs, removeTree(dir))
		}
		if errs == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errs
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// removeTree kills the processes in dir and in the cgroups below it and
// removes them, deepest first. A missing dir is not an error.
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var errs error
	for _, e := range entries {
		if e.IsDir() {
			errs = errors.Join(errs, removeTree(filepath.Join(dir, e.Name())))
		}
	}
	pids, _ := readPIDs(filepath.Join(dir, "cgroup.procs"))
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL) // best effort: Rmdir says whether it worked
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = errors.Join(errs, &fs.PathError{Op: "remove cgroup", Path: dir, Err: err})
	}
	return errs
}

// maxFile bounds what manage reads from a cgroup file (cgroup.procs of a
// busy group is the largest): a corrupt or hostile file cannot exhaust memory.
const maxFile = 4 << 20

// readSmall reads a cgroup file of at most maxFile bytes, and only a
// regular file (cgroupfs files are): a FIFO in its place must not block.
// A missing file returns ok == false and no error.
func readSmall(file string) (string, bool, error) { return cgroup.ReadBounded(file, maxFile) }

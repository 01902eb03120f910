// Package manage creates, limits, fills, kills and removes cgroups: what the
// lab, the tests and the node agent need. A service that only reads its
// limits imports package cgroup alone, which never writes, execs or kills.
package manage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
)

// Group is a cgroup that gofit created (one directory per hierarchy), for
// the lab and the node agent. It reads limits and stats like any Cgroups.
type Group struct {
	*cgroup.Cgroups
	dirs []string // every directory created, leaf-most hierarchy order
}

// NewChild creates a child cgroup called name under the process's cpu,
// cpuacct, memory and (on hybrid hosts, for per-group PSI) v2 cgroups. On
// cgroup v2 it enables the cpu and memory controllers for children of the
// parent. If any step fails, what was created is removed.
func NewChild(c *cgroup.Cgroups, name string) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup name %q: must be a single path element", name)
	}
	var nodes cgroup.Cgroups
	g := &Group{}
	made := map[string]*cgroup.Node{}
	child := func(n *cgroup.Node, enable bool) (*cgroup.Node, error) {
		if n == nil {
			return nil, nil
		}
		if m, ok := made[n.Dir]; ok {
			return m, nil
		}
		if enable {
			// v2: controllers must be enabled in the parent's subtree_control
			// before a child gets cpu.max and memory.max.
			if err := enableControllers(n.Dir, "cpu", "memory"); err != nil {
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
		return nil, fmt.Errorf("create cgroup %q: %w", name, cgroup.ErrNoCgroup)
	}
	return g, nil
}

func enableControllers(dir string, ctrls ...string) error {
	file := filepath.Join(dir, "cgroup.subtree_control")
	cur, _, err := readSmall(file)
	if err != nil {
		return err
	}
	have := strings.Fields(cur)
	for _, c := range ctrls {
		found := false
		for _, h := range have {
			found = found || h == c
		}
		if !found {
			if err := os.WriteFile(file, []byte("+"+c), 0); err != nil {
				return fmt.Errorf("enable %s controller: %w", c, err)
			}
		}
	}
	return nil
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
func (g *Group) SetMemoryHigh(bytes int64) error {
	if g.Memory == nil || g.Memory.Version != 2 {
		return errors.New("memory.high needs cgroup v2")
	}
	v := "max"
	if bytes > 0 {
		v = strconv.FormatInt(bytes, 10)
	}
	return writeValue(filepath.Join(g.Memory.Dir, "memory.high"), v)
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

// PIDs lists the processes in the group.
func (g *Group) PIDs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for _, dir := range g.dirs {
		file := filepath.Join(dir, "cgroup.procs")
		s, ok, err := readSmall(file)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for i, f := range strings.Fields(s) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return nil, &cgroup.ParseError{File: file, Line: i + 1, Text: f, Err: errors.New("not a pid")}
			}
			if !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
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

// Remove kills what is left in the group and removes its directories,
// retrying while tasks drain, until ctx is done (or 5 seconds pass when ctx
// has no deadline). Removing an already removed group is not an error.
func (g *Group) Remove(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	if g.Cgroups != nil {
		g.Close()
	}
	var last error
	for {
		last = nil
		for _, dir := range g.dirs {
			if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				last = &fs.PathError{Op: "remove cgroup", Path: dir, Err: err}
			}
		}
		if last == nil {
			return nil
		}
		_ = g.Kill()
		select {
		case <-ctx.Done():
			return last
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// maxFile bounds what manage reads from a cgroup file (cgroup.procs of a
// busy group is the largest): a corrupt or hostile file cannot exhaust memory.
const maxFile = 4 << 20

// readSmall reads a cgroup file of at most maxFile bytes. A missing file
// returns ok == false and no error.
func readSmall(file string) (string, bool, error) {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return "", false, err
	}
	if len(b) > maxFile {
		return "", false, fmt.Errorf("%s: larger than %d bytes", file, maxFile)
	}
	return string(b), true, nil
}

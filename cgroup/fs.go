// Package cgroup finds a process's cgroups and reads their limits and
// stats, on cgroup v1, v2 and hybrid hosts, inside and outside containers.
//
// Every path is read under a root directory passed to NewFS, so tests and
// `gofit inspect --root DIR` can point at a fixture tree.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoCgroup means the process has no visible cgroup for a controller
// (for example, a non-Linux host or a /proc without cgroup information).
var ErrNoCgroup = errors.New("no cgroup found")

// FS reads cgroup and proc files under a root directory.
type FS struct {
	root string
}

// NewFS returns an FS that reads everything under root ("/" on a real host).
func NewFS(root string) *FS {
	if root == "" {
		root = "/"
	}
	return &FS{root: root}
}

// Root is the directory the FS reads under.
func (f *FS) Root() string { return f.root }

func (f *FS) join(p string) string { return filepath.Join(f.root, p) }

// Node is one process's cgroup in one hierarchy.
type Node struct {
	Version int    // 1 or 2
	Path    string // cgroup path as the kernel names it, e.g. "/kubepods/pod1/abc"
	Dir     string // its directory on disk (under the FS root)
	Top     string // the mount point: the highest ancestor visible from here
}

// ancestors calls fn for the node and each visible ancestor, leaf first,
// with the ancestor's directory and cgroup path. It stops early when fn
// returns false.
func (n *Node) ancestors(fn func(dir, cgPath string) bool) {
	dir, p := n.Dir, n.Path
	for {
		if !fn(dir, p) {
			return
		}
		if len(dir) <= len(n.Top) { // reached the mount point
			return
		}
		dir = filepath.Dir(dir)
		p = path.Dir(p)
	}
}

// Cgroups holds a process's cgroups for the controllers gofit reads.
type Cgroups struct {
	fs      *FS
	rd      *reader
	CPU     *Node // cpu (quota, throttling)
	CPUAcct *Node // cpuacct on v1 (usage); the same as CPU on v2
	CPUSet  *Node
	Memory  *Node
	Unified *Node // the v2 hierarchy on v2 and hybrid hosts, for PSI
}

// Version is the cgroup version of the controllers in use: that of the
// memory controller, or the CPU controller when memory has none. It is 1 on
// a hybrid host with v1 controllers, and 0 when no cgroup is found.
func (c *Cgroups) Version() int {
	switch {
	case c.Memory != nil:
		return c.Memory.Version
	case c.CPU != nil:
		return c.CPU.Version
	}
	return 0
}

// FS is the filesystem the cgroups are read from.
func (c *Cgroups) FS() *FS { return c.fs }

// Bind returns Cgroups for the given nodes (CPU, Memory, ... of nodes; its
// other fields are ignored), read under f. Package manage uses it to read
// the limits and stats of a group it created.
func (f *FS) Bind(nodes Cgroups) *Cgroups {
	return &Cgroups{fs: f, rd: newReader(), CPU: nodes.CPU, CPUAcct: nodes.CPUAcct,
		CPUSet: nodes.CPUSet, Memory: nodes.Memory, Unified: nodes.Unified}
}

// Close releases the files kept open for re-reading. The Cgroups remains
// usable; files are opened again as needed.
func (c *Cgroups) Close() { c.rd.close() }

// Self finds the cgroups of the calling process (/proc/self).
func (f *FS) Self() (*Cgroups, error) { return f.process("self") }

// Process finds the cgroups of process pid.
func (f *FS) Process(pid int) (*Cgroups, error) { return f.process(strconv.Itoa(pid)) }

// Observe finds the cgroups of process pid as this process can open
// them: pid's /proc/PID/cgroup (shown relative to this process's cgroup
// namespace) located through this process's own mounts. Process reads
// pid's mounts, whose mount points are paths in pid's mount namespace;
// from the node, a container's process needs Observe.
func (f *FS) Observe(pid int) (*Cgroups, error) {
	return f.processMounts(strconv.Itoa(pid), "self")
}

func (f *FS) process(pid string) (*Cgroups, error) { return f.processMounts(pid, pid) }

func (f *FS) processMounts(pid, mountsOf string) (*Cgroups, error) {
	cgFile := f.join("/proc/" + pid + "/cgroup")
	miFile := f.join("/proc/" + mountsOf + "/mountinfo")
	cgText, ok, err := ReadBounded(cgFile, maxProcFile)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: %w", DisplayPath(cgFile), ErrNoCgroup)
	}
	miText, ok, err := ReadBounded(miFile, maxProcFile)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: %w", DisplayPath(miFile), fs.ErrNotExist)
	}
	entries, err := parseProcCgroup(string(cgText))
	if err != nil {
		return nil, withFile(err, cgFile)
	}
	mounts, err := parseMountinfo(string(miText))
	if err != nil {
		return nil, withFile(err, miFile)
	}
	c := &Cgroups{fs: f, rd: newReader()}
	for _, e := range entries {
		if len(e.controllers) == 0 {
			if c.Unified == nil {
				c.Unified = f.locate(mounts, e.path, "")
			}
			continue
		}
		for _, ctrl := range e.controllers {
			var dst **Node
			switch ctrl {
			case "cpu":
				dst = &c.CPU
			case "cpuacct":
				dst = &c.CPUAcct
			case "cpuset":
				dst = &c.CPUSet
			case "memory":
				dst = &c.Memory
			default:
				continue
			}
			if *dst == nil {
				*dst = f.locate(mounts, e.path, ctrl)
			}
		}
	}
	// Controllers without a v1 hierarchy live in the v2 one.
	if c.Unified != nil {
		for _, dst := range []**Node{&c.CPU, &c.CPUAcct, &c.CPUSet, &c.Memory} {
			if *dst == nil {
				*dst = c.Unified
			}
		}
	}
	if c.CPU == nil && c.Memory == nil {
		return nil, fmt.Errorf("%s, %s: no cpu or memory cgroup mounted: %w", DisplayPath(cgFile), DisplayPath(miFile), ErrNoCgroup)
	}
	return c, nil
}

// locate maps a cgroup path to a directory through the mount that holds it;
// ctrl is "" for the v2 hierarchy. It returns nil when no mount holds it.
func (f *FS) locate(mounts []mount, cgPath, ctrl string) *Node {
	var fallback *mount
	for i := range mounts {
		m := &mounts[i]
		if (ctrl == "") != m.v2 || (ctrl != "" && !m.has(ctrl)) {
			continue
		}
		rel, ok := within(cgPath, m.root)
		if !ok {
			// With a cgroup namespace or a moved process the path may not
			// start with the mount root; the mount point is then the best
			// guess for the process's own group.
			if fallback == nil {
				fallback = m
			}
			continue
		}
		return &Node{Version: version(m), Path: cgPath, Dir: f.join(path.Join(m.point, rel)), Top: f.join(m.point)}
	}
	if fallback != nil {
		return &Node{Version: version(fallback), Path: fallback.root, Dir: f.join(fallback.point), Top: f.join(fallback.point)}
	}
	return nil
}

func version(m *mount) int {
	if m.v2 {
		return 2
	}
	return 1
}

// within reports whether p lies at or below root, and the rest of it.
func within(p, root string) (string, bool) {
	if strings.Contains(p, "/..") {
		return "", false
	}
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	if strings.HasPrefix(p, root+"/") {
		return p[len(root):], true
	}
	return "", false
}

// readFile reads a cgroup value file (bounded, regular files only). A
// missing file returns ok == false and no error.
func readFile(file string) (string, bool, error) { return ReadBounded(file, maxValueFile) }

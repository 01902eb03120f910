// Package cgrouptest writes fake cgroup trees for tests: a process's
// /proc/self/cgroup and /proc/self/mountinfo and the files of a cgroup v2
// hierarchy, under a temporary directory that stands for "/". Read it
// through cgroup.NewFS(tree.Root) or gofit.WithRoot(tree.Root). For fixed
// scenarios (v1, hybrid, nested mounts, malformed files), cgroup/testdata
// keeps trees as plain files; this package is for trees a test builds or
// changes as it runs, as the kernel changes a cgroup's files.
package cgrouptest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Tree is a cgroup v2 tree in which the process sits in one group.
type Tree struct {
	// Root stands for "/": /proc and /sys are under it.
	Root string
	// Group is the process's cgroup ("/pod/ctr").
	Group string

	t testing.TB
}

// NewV2 writes a tree under a new temporary directory with the process in
// group ("/ctr", "/pod/ctr") of a cgroup2 hierarchy mounted at
// /sys/fs/cgroup, and makes the group's directory. The group has no files
// yet: a reader finds no limits until Set writes them.
func NewV2(t testing.TB, group string) *Tree {
	t.Helper()
	tr := &Tree{Root: t.TempDir(), Group: "/" + strings.Trim(group, "/"), t: t}
	tr.Write("proc/self/cgroup", "0::"+tr.Group+"\n")
	tr.Write("proc/self/mountinfo", "25 20 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	if err := os.MkdirAll(tr.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	return tr
}

// Dir is the group's directory.
func (tr *Tree) Dir() string {
	return filepath.Join(tr.Root, "sys/fs/cgroup", filepath.FromSlash(tr.Group))
}

// Write writes content to the file at rel under Root, making its
// directories. It rewrites an existing file in place, as the kernel
// changes a cgroup file, so a reader that keeps it open sees the change.
func (tr *Tree) Write(rel, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.Root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

// Set writes the group's file name ("cpu.max", "memory.stat"), adding the
// final newline the kernel's files end with when content has none.
func (tr *Tree) Set(name, content string) {
	tr.t.Helper()
	if !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	tr.Write(filepath.ToSlash(filepath.Join("sys/fs/cgroup", tr.Group, name)), content)
}

// SetParent writes the file name of the group's parent (a pod's cgroup
// above its container's).
func (tr *Tree) SetParent(name, content string) {
	tr.t.Helper()
	if !strings.HasSuffix(content, "\n") {
		content += "\n"
	}
	tr.Write(filepath.ToSlash(filepath.Join("sys/fs/cgroup", filepath.Dir(tr.Group), name)), content)
}

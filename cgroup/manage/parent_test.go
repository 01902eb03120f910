package manage

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gofit-dev/gofit/cgroup"
)

func TestParentFor(t *testing.T) {
	top := "/sys/fs/cgroup"
	for _, tc := range []struct {
		in   cgroup.Node
		want string
	}{
		{cgroup.Node{Version: 2, Path: "/svc/" + LeafName, Dir: top + "/svc/" + LeafName, Top: top}, top + "/svc"},
		{cgroup.Node{Version: 2, Path: "/svc", Dir: top + "/svc", Top: top}, top + "/svc"},
		// A leaf at the mount point (a cgroup namespace's view) has no
		// visible parent: it stays.
		{cgroup.Node{Version: 2, Path: "/", Dir: top, Top: top}, top},
		{cgroup.Node{Version: 1, Path: "/x/" + LeafName, Dir: top + "/memory/x/" + LeafName, Top: top + "/memory"}, top + "/memory/x/" + LeafName},
	} {
		if got := ParentFor(&tc.in); got.Dir != tc.want {
			t.Errorf("ParentFor(%+v) = %s, want %s", tc.in, got.Dir, tc.want)
		}
	}
}

func TestReadSmallRefusesFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cgroup.procs")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("skipping: cannot make a FIFO here: %v", err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := readSmall(p); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, cgroup.ErrNotRegular) {
			t.Errorf("readSmall(FIFO) = %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("readSmall blocked on a FIFO")
	}
}

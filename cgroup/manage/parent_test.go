package manage

import (
	"testing"

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

package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/cgroup/cgtest"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// roHelper carries the helper's arguments into the mount namespace:
// root, cgroup root, and whether the kubepods subtree is mounted writable.
const roHelper = "GOFIT_TEST_RO_HELPER"

// TestRealReadOnlyMount mounts the cgroup tree as the DaemonSet does, in a
// mount namespace of its own: all of /sys/fs/cgroup read-only, only the
// kubelet's kubepods subtree read-write over it. The agent, run inside
// (this test binary again), must write every value below kubepods and be
// refused above it; with the subtree left read-only it must stop at start
// (Layout.Writable) rather than fail every write.
func TestRealReadOnlyMount(t *testing.T) {
	if args := os.Getenv(roHelper); args != "" {
		readOnlyHelper(t, args)
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("skipping: no unshare(1) to make a mount namespace")
	}
	g := cgtest.NewGroup(t)
	if g.Memory == nil {
		t.Skip("skipping: no memory cgroup")
	}
	v2 := g.Memory.Version == 2
	ls := realPod("ls", "aaaa-1", "c1ls", "64Mi", "256Mi")
	dirs := kubeletTree(t, g.Memory.Dir, v2, DriverCgroupfs, []*corev1.Pod{ls})
	mount, _, err := MemoryMount("/")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Memory.Dir, mount+"/") {
		t.Skipf("skipping: the test cgroup %s is not under %s (cgroup namespace?)", g.Memory.Dir, mount)
	}
	rel, _ := relSlash(mount, g.Memory.Dir)
	kubepods := filepath.Join(g.Memory.Dir, "kubepods")
	for _, writable := range []bool{false, true} { // read-only first: it must leave the kernel defaults
		t.Run(fmt.Sprint("subtree writable ", writable), func(t *testing.T) {
			host := t.TempDir()
			view := filepath.Join(host, "sys/fs/cgroup")
			// The runtime's hostPath mounts, by hand: the tree read-only
			// (on v1 the memory hierarchy is a mount of its own below it),
			// then the pod subtree bound read-write over its view.
			script := []string{"set -e", "mkdir -p " + view,
				"mount --bind /sys/fs/cgroup " + view, "mount -o remount,bind,ro " + view}
			if mount != "/sys/fs/cgroup" {
				script = append(script, "mount --bind "+mount+" "+host+mount, "mount -o remount,bind,ro "+host+mount)
			}
			if writable {
				script = append(script, "mount --bind "+kubepods+" "+host+kubepods)
			}
			script = append(script, `exec "$0" -test.run '^TestRealReadOnlyMount$' -test.v`)
			cmd := exec.Command(unshare, "-m", "--propagation", "private", "sh", "-c", strings.Join(script, "\n"), os.Args[0])
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%v|%s", roHelper, host, rel, writable, g.Memory.Dir))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("agent in the mount namespace: %v\n%s", err, out)
			}
			t.Logf("%s", out)
			// What the agent wrote through the writable mount is in the
			// kernel: the LS container's protection.
			file, want := "memory.low", "67108864"
			if !v2 {
				file = "memory.soft_limit_in_bytes"
			}
			if !writable {
				want = map[bool]string{true: "0", false: "9223372036854771712"}[v2]
			}
			b, err := os.ReadFile(filepath.Join(dirs["ls"], file))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != want {
				t.Errorf("%s = %s, want %s", file, got, want)
			}
		})
	}
}

// readOnlyHelper is the agent's side, inside the mount namespace.
func readOnlyHelper(t *testing.T, args string) {
	parts := strings.Split(args, "|")
	if len(parts) != 4 {
		t.Fatalf("%s=%q", roHelper, args)
	}
	host, rel, writable, groupDir := parts[0], parts[1], parts[2] == "true", parts[3]
	l, err := DetectDriver(host, rel, DriverCgroupfs)
	if err != nil {
		t.Fatal(err)
	}
	err = l.Writable()
	if !writable {
		if err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Fatalf("read-only subtree: Writable() = %v, want an error", err)
		}
		t.Logf("stopped at start: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	ls := realPod("ls", "aaaa-1", "c1ls", "64Mi", "256Mi")
	rep := New(l, Options{Policy: memqos.PolicyAuto}).Reconcile(State{Pods: []*corev1.Pod{ls}, Config: &memqos.Config{}, NodeAllocatable: 1 << 30})
	if len(rep.Apply.Errors) != 0 || len(rep.Apply.Changed) == 0 {
		t.Fatalf("reconcile through the writable subtree: %d changes, errors %v", len(rep.Apply.Changed), rep.Apply.Errors)
	}
	// Above the subtree the view is read-only.
	above := filepath.Join(host, groupDir, "cgroup.procs")
	if err := os.WriteFile(above, []byte("0"), 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to %s: %v, want EROFS", above, err)
	}
}

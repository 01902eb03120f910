// Package agent is the node memory-QoS agent: it finds the kubelet's pod
// and container cgroups under a host root, plans their memory values with
// package memqos, and applies them level by level with manage.Writer. Run
// watches the node's pods, the node and the koordinator ConfigMap through
// the API server and reconciles on events and on an interval.
package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrNoKubepods means no kubelet pod cgroup was found under the root.
var ErrNoKubepods = errors.New("no kubepods cgroup found")

// Drivers the kubelet may use.
const (
	DriverSystemd  = "systemd"
	DriverCgroupfs = "cgroupfs"
)

// Layout is where the kubelet's memory cgroups are on this host.
type Layout struct {
	Version int    // 1 (v1 or hybrid) or 2
	Driver  string // DriverSystemd or DriverCgroupfs
	Mount   string // the memory controller's mount directory on disk
	// Kubepods is the cgroup path of the kubelet's pod root under the
	// mount: "/kubepods.slice" or "/kubepods", below --cgroup-root.
	Kubepods string
	// RecursiveProt says whether the cgroup2 mount has memory_recursiveprot
	// (1), has not (-1), or is unknown (0: not a mount this process sees,
	// as with fixture trees, or cgroup v1). Without it a pod cgroup's
	// memory.min/low protects none of its containers' pages unless the
	// containers' own values do.
	RecursiveProt int
}

// recursiveProt reads /proc/self/mountinfo's line for the mount point dir:
// 1 when it is cgroup2 with memory_recursiveprot among its super options,
// -1 when it is cgroup2 without, 0 when no line is for dir.
func recursiveProt(mountinfo, dir string) int {
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 5 || path.Clean(f[4]) != path.Clean(dir) {
			continue
		}
		p := strings.Fields(post) // fstype source super-options
		if len(p) < 3 || p[0] != "cgroup2" {
			continue
		}
		for _, o := range strings.Split(p[2], ",") {
			if o == "memory_recursiveprot" {
				return 1
			}
		}
		return -1
	}
	return 0
}

// Detect finds the memory controller under root (root/sys/fs/cgroup: v2
// when it is a unified mount with the memory controller, v1 or hybrid
// when root/sys/fs/cgroup/memory exists) and the kubelet's driver from
// the pod root that exists below cgroupRoot ("/" or the kubelet's
// --cgroup-root). It is DetectDriver with the driver found on disk.
func Detect(root, cgroupRoot string) (*Layout, error) { return DetectDriver(root, cgroupRoot, "") }

// DetectDriver is Detect with the kubelet's cgroup driver given
// (DriverSystemd or DriverCgroupfs; empty: whichever pod root exists, and
// an error when both do, as on a node whose kubelet changed drivers).
func DetectDriver(root, cgroupRoot, driver string) (*Layout, error) {
	if cgroupRoot == "" {
		cgroupRoot = "/"
	}
	if !path.IsAbs(cgroupRoot) || strings.Contains(cgroupRoot, "..") {
		return nil, fmt.Errorf("cgroup root %q: must be an absolute cgroup path", cgroupRoot)
	}
	switch driver {
	case "", DriverSystemd, DriverCgroupfs:
	default:
		return nil, fmt.Errorf("cgroup driver %q: want %s or %s", driver, DriverSystemd, DriverCgroupfs)
	}
	mount, version, err := MemoryMount(root)
	if err != nil {
		return nil, err
	}
	l := &Layout{Version: version, Mount: mount}
	if version == 2 {
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
			l.RecursiveProt = recursiveProt(string(b), mount)
		}
	}
	var found []string
	for _, c := range []struct{ name, driver string }{{"kubepods.slice", DriverSystemd}, {"kubepods", DriverCgroupfs}} {
		if driver != "" && c.driver != driver {
			continue
		}
		p := path.Join(cgroupRoot, c.name)
		if st, err := os.Stat(l.dir(p)); err == nil && st.IsDir() {
			if l.Kubepods == "" {
				l.Driver, l.Kubepods = c.driver, p
			}
			found = append(found, l.dir(p))
		}
	}
	switch {
	case len(found) > 1:
		return nil, fmt.Errorf("both %s exist: name the kubelet's cgroup driver (--cgroup-driver %s or %s)",
			strings.Join(found, " and "), DriverSystemd, DriverCgroupfs)
	case len(found) == 0 && driver != "":
		name := "kubepods.slice"
		if driver == DriverCgroupfs {
			name = "kubepods"
		}
		return nil, fmt.Errorf("%s: no %s directory for the %s driver (is the kubelet running, and are --cgroup-root and --cgroup-driver right?): %w",
			l.dir(cgroupRoot), name, driver, ErrNoKubepods)
	case len(found) == 0:
		return nil, fmt.Errorf("%s: no kubepods.slice or kubepods directory (is the kubelet running, and is --cgroup-root right?): %w",
			l.dir(cgroupRoot), ErrNoKubepods)
	}
	return l, nil
}

// MemoryMount finds the memory controller's directory under root and its
// cgroup version.
func MemoryMount(root string) (string, int, error) {
	base := filepath.Join(root, "sys/fs/cgroup")
	if b, err := os.ReadFile(filepath.Join(base, "cgroup.controllers")); err == nil && hasWord(string(b), "memory") {
		return base, 2, nil
	}
	if st, err := os.Stat(filepath.Join(base, "memory")); err == nil && st.IsDir() {
		return filepath.Join(base, "memory"), 1, nil
	}
	return "", 0, fmt.Errorf("%s: neither a cgroup v2 mount with the memory controller nor a v1 memory directory: %w", base, ErrNoKubepods)
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

// dir is the directory of cgroup path p.
func (l *Layout) dir(p string) string { return filepath.Join(l.Mount, filepath.FromSlash(p)) }

// QoSPath is the cgroup of a Kubernetes QoS class; Guaranteed pods live
// directly in kubepods.
func (l *Layout) QoSPath(q corev1.PodQOSClass) string {
	switch q {
	case corev1.PodQOSBurstable, corev1.PodQOSBestEffort:
		name := strings.ToLower(string(q))
		if l.Driver == DriverSystemd {
			return path.Join(l.Kubepods, "kubepods-"+name+".slice")
		}
		return path.Join(l.Kubepods, name)
	}
	return l.Kubepods
}

// PodPath is the cgroup of a pod.
func (l *Layout) PodPath(q corev1.PodQOSClass, uid types.UID) string {
	if l.Driver == DriverSystemd {
		// systemd unit names cannot hold '-' inside a component, so the
		// kubelet writes the UID's dashes as underscores.
		u := strings.ReplaceAll(string(uid), "-", "_")
		prefix := "kubepods-"
		if q == corev1.PodQOSBurstable || q == corev1.PodQOSBestEffort {
			prefix += strings.ToLower(string(q)) + "-"
		}
		return path.Join(l.QoSPath(q), prefix+"pod"+u+".slice")
	}
	return path.Join(l.QoSPath(q), "pod"+string(uid))
}

// ContainerPath finds the cgroup of a container from its status ID
// ("containerd://ID", "cri-o://ID", "docker://ID"). The runtime and the
// driver decide the name; ok is false when none of the names exists.
func (l *Layout) ContainerPath(podPath, containerID string) (string, bool) {
	for _, p := range l.containerCandidates(podPath, containerID) {
		if st, err := os.Stat(l.dir(p)); err == nil && st.IsDir() {
			return p, true
		}
	}
	return "", false
}

// containerCandidates are the cgroup paths a container's cgroup may have,
// in the order ContainerPath tries them; none for an ID that cannot name
// one.
func (l *Layout) containerCandidates(podPath, containerID string) []string {
	runtime, id, found := strings.Cut(containerID, "://")
	if !found || id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return nil
	}
	var names []string
	if l.Driver == DriverSystemd {
		switch runtime {
		case "cri-o":
			names = []string{"crio-" + id + ".scope"}
		case "docker":
			names = []string{"docker-" + id + ".scope"}
		default:
			names = []string{"cri-containerd-" + id + ".scope"}
		}
	} else {
		switch runtime {
		case "cri-o":
			names = []string{"crio-" + id, id}
		default:
			names = []string{id}
		}
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = path.Join(podPath, n)
	}
	return out
}

// podDirs lists the pod cgroups that exist, by UID, with their Kubernetes
// QoS class: what the kubelet has on this node whatever the API says.
func (l *Layout) podDirs() (map[types.UID]podDir, error) {
	out := map[types.UID]podDir{}
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		qp := l.QoSPath(q)
		ents, err := os.ReadDir(l.dir(qp))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			name := e.Name()
			var uid string
			if l.Driver == DriverSystemd {
				rest, ok := strings.CutPrefix(name, "kubepods-")
				if !ok || !strings.HasSuffix(rest, ".slice") {
					continue
				}
				rest = strings.TrimPrefix(strings.TrimPrefix(rest, "burstable-"), "besteffort-")
				if rest, ok = strings.CutPrefix(rest, "pod"); !ok {
					continue
				}
				uid = strings.ReplaceAll(strings.TrimSuffix(rest, ".slice"), "_", "-")
			} else {
				if !strings.HasPrefix(name, "pod") {
					continue
				}
				uid = name[3:]
			}
			if uid != "" {
				out[types.UID(uid)] = podDir{qos: q, path: path.Join(qp, name)}
			}
		}
	}
	return out, nil
}

type podDir struct {
	qos  corev1.PodQOSClass
	path string
}

// children lists the sub-cgroups of a cgroup (a pod's containers).
func (l *Layout) children(p string) []string {
	ents, err := os.ReadDir(l.dir(p))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, path.Join(p, e.Name()))
		}
	}
	return out
}

// populated reports whether any process lives in cgroup p or below it:
// on v2 from cgroup.events, on v1 from cgroup.procs at every level. An
// unreadable file is an error: the caller cannot tell, and must not take
// the group for empty.
func (l *Layout) populated(p string) (bool, error) {
	d := l.dir(p)
	if l.Version == 2 {
		b, err := readSmall(filepath.Join(d, "cgroup.events"))
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "populated "); ok {
				return strings.TrimSpace(v) != "0", nil
			}
		}
		return false, fmt.Errorf("%s: no populated line", filepath.Join(d, "cgroup.events"))
	}
	var found bool
	err := filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() || found {
			return nil
		}
		b, err := readSmall(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return err
		}
		found = strings.TrimSpace(string(b)) != ""
		return nil
	})
	return found, err
}

// readSmall reads a cgroup control file of a few lines.
func readSmall(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return b, nil
}

// Writable reports whether the kubepods cgroup can be written: the
// DaemonSet mounts the cgroup tree read-only and only the kubepods subtree
// read-write, and a mount that does not match this node's layout should
// fail at start, not as a write error on every pass.
func (l *Layout) Writable() error {
	d := l.dir(l.Kubepods)
	if err := syscall.Access(d, 2 /* W_OK */); err != nil {
		return fmt.Errorf("%s: not writable (%w): mount the kubelet's %s subtree read-write (deploy/node/daemonset.yaml)", d, err, l.Kubepods)
	}
	return nil
}

// KernelRelease is the running kernel's release (uname -r); in a container
// it is the node's.
func KernelRelease() (string, error) {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b), nil
}

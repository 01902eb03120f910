package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// cgroupFiles are the files the agent writes: where each is on disk,
// which of them it may write at all, what it left in each, and who else
// writes them (another writer's change, the kubelet's TieredReservation,
// the agent's own cgroup the kernel refuses it). The Agent's mu guards it.
type cgroupFiles struct {
	layout  *Layout
	writer  *manage.Writer
	log     *slog.Logger
	metrics *Metrics // nil: none
	dryRun  bool
	cache   caches // paths kept between passes
	// written is what the last pass left in each file it owns, to tell
	// when someone else changed one since.
	written map[fileKey]int64
	// self holds the cgroups found to be the agent's own cgroup namespace
	// root (see dropOwnCgroup): never written again.
	self map[string]bool
}

// fileKey names a cgroup file: its directory and its name.
type fileKey struct{ dir, file string }

// noteForeign compares what the agent left in each file last pass with
// what this pass found there: a change it did not make means another
// writer (the kubelet, an operator) writes the file too. It then records
// what this pass left.
func (f *cgroupFiles) noteForeign(rep *Report) {
	if f.dryRun {
		return
	}
	for _, c := range rep.Apply.Changed {
		if w, ok := f.written[fileKey{c.Dir, c.File}]; ok && !manage.Same(c.Old, w) {
			rep.Foreign = append(rep.Foreign, ForeignWrite{Dir: c.Dir, File: c.File, Level: memqos.Level(c.Level), Wrote: w, Found: c.Old})
		}
	}
	if len(rep.Apply.Errors) == 0 {
		// Refilled in place: a pass that changes nothing allocates
		// nothing here.
		if f.written == nil {
			f.written = make(map[fileKey]int64, len(rep.Values))
		}
		clear(f.written)
		for _, v := range rep.Values {
			f.written[fileKey{v.Dir, v.File}] = v.Value
		}
	} else {
		// A value this pass did not write (held back by the writer, or a
		// write error naming its file) keeps what the agent left before,
		// so that a change by someone else still shows once it is written.
		failed := func(path string) bool {
			for _, e := range rep.Apply.Errors {
				if strings.Contains(e.Error(), path) {
					return true
				}
			}
			return false
		}
		next := make(map[fileKey]int64, len(rep.Values))
		for _, v := range rep.Values {
			k := fileKey{v.Dir, v.File}
			if f.writer.Refused(v) || failed(v.Path()) {
				if w, ok := f.written[k]; ok {
					next[k] = w
				}
				continue
			}
			next[k] = v.Value
		}
		f.written = next
	}
	for _, fw := range rep.Foreign {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s/%s (%s level): the agent left %s, found %s: another writer changed it",
			f.cgroupPath(fw.Dir), fw.File, LevelName(fw.Level), manage.FormatValue(fw.Wrote), manage.FormatValue(fw.Found)))
	}
}

// kept reads what a pod cgroup left as it is holds (0 where unreadable,
// as on cgroup v1).
func (f *cgroupFiles) kept(uid types.UID, d podDir) memqos.Kept {
	k := memqos.Kept{UID: uid, KubeQoS: d.qos}
	dir := f.layout.dir(d.path)
	if v, err := manage.ReadValue(filepath.Join(dir, memqos.FileMin)); err == nil && v > 0 {
		k.Min = v
	}
	if v, err := manage.ReadValue(filepath.Join(dir, memqos.FileLow)); err == nil && v > 0 {
		k.Low = v
	}
	return k
}

// kubeletWrote recognises the kubelet's TieredReservation in what it wrote:
// a Guaranteed pod's cgroup holding memory.min equal to the pod's whole
// request, with memory.low below it. Only cgroup v2 has memory.min, and
// only there does the kubelet do this.
//
// A value the agent itself wrote is never evidence of another writer:
// after an in-place downsize the memory.min it wrote earlier can equal the
// new request (LSR at 50% going 2Gi to 1Gi; 10Gi to 9Gi at 100%, kept at
// 9/10 of the old limit). So the value must not be what the agent left
// there (cgroupFiles.written, this process), nor a pair the agent ever leaves:
// it keeps memory.low at or above memory.min in every group it writes
// (memqos raises it; the writer refuses the pair otherwise), while
// TieredReservation sets only a Guaranteed pod's memory.min. The second
// test holds across an agent restart, which forgets what it wrote.
func (f *cgroupFiles) kubeletWrote(p memqos.PodResult, podPath string) string {
	if f.layout.Version != 2 || p.KubeQoS != corev1.PodQOSGuaranteed || p.Request < 1<<20 {
		return ""
	}
	dir := f.dir(podPath)
	cur, err := f.writer.Read(dir, memqos.FileMin)
	if err != nil || cur != p.Request {
		return ""
	}
	for _, s := range p.Settings {
		if s.File == memqos.FileMin && s.Value == cur {
			return ""
		}
	}
	if w, ok := f.written[fileKey{dir, memqos.FileMin}]; ok && manage.Same(w, cur) {
		return "" // the agent's own
	}
	low, err := f.writer.Read(dir, memqos.FileLow)
	if err != nil || low >= cur {
		return "" // a pair the agent may have left (before a restart)
	}
	return fmt.Sprintf("%s holds %d, the Guaranteed pod %s/%s's whole memory request, with memory.low %d below it, as the kubelet's memoryReservationPolicy TieredReservation writes it",
		f.cgroupPath(dir)+"/"+memqos.FileMin, cur, p.Namespace, p.Name, low)
}

// cgroupPath turns a directory back into its path under the mount.
func (f *cgroupFiles) cgroupPath(dir string) string {
	rel, err := relSlash(f.layout.Mount, dir)
	if err != nil {
		return dir
	}
	return rel
}

// dropOwnCgroup takes out of errs the writes the kernel refused because
// the cgroup is the agent's own, and remembers that cgroup so that no
// later pass tries it. Where cgroup2 is mounted with nsdelegate (systemd's
// default), a container's cgroup is the root of its cgroup namespace, and
// the kernel refuses (EPERM) any process inside a write to that root's
// files, memory.high among them, however privileged. The agent's own pod
// is one of the pods it plans for, so without this every pass on such a
// node failed a write, logged an error and fed the write-errors alert.
// The cgroup is the agent's own when its cgroup.procs lists this process.
func (f *cgroupFiles) dropOwnCgroup(errs []error) []error {
	out := errs[:0]
	for _, err := range errs {
		var pe *fs.PathError
		if errors.Is(err, fs.ErrPermission) && errors.As(err, &pe) {
			dir := filepath.Dir(pe.Path)
			if f.self[dir] || ownCgroup(dir) {
				if f.self == nil {
					f.self = map[string]bool{}
				}
				if !f.self[dir] {
					f.log.Info("not writing the agent's own cgroup: it is the root of the agent's cgroup namespace, which the kernel keeps from writes inside it (nsdelegate)",
						"cgroup", f.cgroupPath(dir))
				}
				f.self[dir] = true
				continue
			}
		}
		out = append(out, err)
	}
	return out
}

// ownCgroup says whether dir's cgroup.procs lists this process.
func ownCgroup(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	me := strconv.Itoa(os.Getpid())
	for _, l := range strings.Fields(string(b)) {
		if l == me {
			return true
		}
	}
	return false
}

// Writable are the only files the agent writes. Its kubepods mount is
// read-write for uid 0, so the kernel would let it write any file there
// (cgroup.kill, memory.max, cgroup.procs): the values it owns live in
// every pod's and container's cgroup, which come and go with the pods,
// so no narrower mount can hold them. confine keeps the agent's own
// writes to these, below kubepods (docs/node-agent.md#what-the-agent-writes).
var Writable = map[string]bool{
	memqos.FileMin: true, memqos.FileLow: true, memqos.FileHigh: true, memqos.FileSoftLimit: true,
	memqos.FileWmarkRatio: true, memqos.FileWmarkScale: true, memqos.FileWmarkMin: true,
	memqos.FilePriority: true, memqos.FilePrioOOM: true, memqos.FileOOMGroup: true,
}

// owns reports whether v is a file in Writable below the kubepods
// subtree; if not it logs and counts the refusal: a bug in planning must
// not become a write of anything else.
func (f *cgroupFiles) owns(v manage.Value, root string) bool {
	dir := filepath.Clean(v.Dir)
	if Writable[v.File] && (dir == root || strings.HasPrefix(dir, root+string(filepath.Separator))) {
		return true
	}
	f.log.Error("refused to write a file the agent does not own", "dir", v.Dir, "file", v.File, "kubepods", root)
	if f.metrics != nil {
		f.metrics.Error()
	}
	return false
}

// kubepodsDir is the kubepods subtree on disk, the only one the agent
// writes in.
func (f *cgroupFiles) kubepodsDir() string { return filepath.Clean(f.layout.dir(f.layout.Kubepods)) }

// confine keeps of vals those the agent owns.
func (f *cgroupFiles) confine(vals []manage.Value) []manage.Value {
	root := f.kubepodsDir()
	out := vals[:0]
	for _, v := range vals {
		if f.owns(v, root) {
			out = append(out, v)
		}
	}
	return out
}

package agent

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// resetWhy is the reason of every value Reset plans.
const resetWhy = "gofit node reset: kernel default"

// kernelDefaults are the values of the files the agent may write, as a new
// cgroup has them, per level. memory.oom.group is not among them: the
// kubelet sets it too, and it is never the agent's unless an
// administrator configured it. The Alibaba Cloud Linux files are skipped
// where the kernel lacks them.
func kernelDefaults(level memqos.Level, version int) []memqos.Setting {
	ss := []memqos.Setting{{File: memqos.FileMin, Value: 0, Reason: resetWhy}, {File: memqos.FileLow, Value: 0, Reason: resetWhy}}
	if level < memqos.LevelPod {
		return ss
	}
	if level == memqos.LevelContainer {
		ss = append(ss, memqos.Setting{File: memqos.FileHigh, Value: manage.Unlimited, Reason: resetWhy})
		if version == 1 {
			ss = append(ss, memqos.Setting{File: memqos.FileSoftLimit, Value: manage.Unlimited, Reason: resetWhy})
		}
	}
	for _, k := range []struct {
		file string
		v    int64
	}{{memqos.FileWmarkRatio, 0}, {memqos.FileWmarkScale, 50}, {memqos.FileWmarkMin, 0}, {memqos.FilePrioOOM, 0}, {memqos.FilePriority, 0}} {
		ss = append(ss, memqos.Setting{File: k.file, Value: k.v, Reason: resetWhy})
	}
	return ss
}

// Reset undoes what the agent wrote on this node: the kernel defaults in
// kubepods, the QoS-class cgroups, every pod cgroup and every container
// cgroup below them (memory.min and memory.low 0, memory.high max, the v1
// soft limit unlimited, the Alibaba Cloud Linux knobs at their defaults).
// Files the kubelet's own Memory QoS writes (Options.Kubelet) are left to
// it. Only values that differ are written, lowered ones bottom-up; with
// Options.DryRun nothing is. PlanOf prints the report like a plan.
func (a *Agent) Reset() Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	var rep Report
	l := a.layout
	add := func(p string, level memqos.Level) {
		rep.Values = append(rep.Values, memqos.Values(l.dir(p), level, kernelDefaults(level, l.Version))...)
	}
	add(l.Kubepods, memqos.LevelKubepods)
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		add(l.QoSPath(q), memqos.LevelQoS)
	}
	dirs, err := l.podDirs()
	if err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("list pod cgroups: %v", err))
	}
	for _, d := range sortedDirs(dirs) {
		add(d.path, memqos.LevelPod)
		for _, c := range l.children(d.path) {
			add(c, memqos.LevelContainer)
		}
	}
	// The files the kubelet owns stay its own: resetting them would fight
	// it (it sets them again) or undo its protection. Where its values
	// show TieredReservation, as in a pass, they are its own whatever the
	// configuration said.
	if seen := a.files.tieredInTree(dirs); seen != "" && l.Version == 2 {
		if _, owned := a.opts.Kubelet.Owns(memqos.LevelPod, memqos.FileMin); !owned {
			a.log.Warn("the kubelet writes TieredReservation's values: leaving them to it", "seen", seen, "was", a.opts.Kubelet.Reason)
			a.opts.Kubelet = tieredSeen(seen, 0)
		}
	}
	rep.Values = a.deferToKubelet(&rep, rep.Values)
	// No bound from the node's size here: every value is 0 or unlimited.
	a.files.writer.MaxMemory = 0
	rep.Values = a.files.confine(rep.Values)
	rep.Apply = a.files.writer.Apply(rep.Values)
	for _, f := range a.files.writer.MissingFiles() {
		rep.Warnings = append(rep.Warnings, f+": not on this kernel; skipped")
	}
	if !a.opts.DryRun {
		for _, c := range rep.Apply.Changed {
			a.log.Info("reset", "cgroup", a.files.cgroupPath(c.Dir), "file", c.File, "value", manage.FormatValue(c.Value.Value), "old", manage.FormatValue(c.Old))
		}
		for _, e := range rep.Apply.Errors {
			a.log.Error("cgroup write", "err", e)
		}
	}
	rep.Duration = time.Since(start)
	return rep
}

// tieredInTree recognises TieredReservation without the API's pods (the
// requests kubeletWrote compares with): a Guaranteed pod's cgroup holding
// memory.min above 0 with memory.low below it, a pair the agent never
// leaves (it keeps memory.low at or above memory.min) and the kubelet
// writes for every Guaranteed pod it makes. Only cgroup v2 has memory.min.
func (f *cgroupFiles) tieredInTree(dirs map[types.UID]podDir) string {
	if f.layout.Version != 2 {
		return ""
	}
	for _, d := range sortedDirs(dirs) {
		if d.qos != corev1.PodQOSGuaranteed {
			continue
		}
		dir := f.dir(d.path)
		mn, err := f.writer.Read(dir, memqos.FileMin)
		if err != nil || mn <= 0 || mn == manage.Unlimited {
			continue
		}
		if lo, err := f.writer.Read(dir, memqos.FileLow); err == nil && lo < mn {
			return fmt.Sprintf("%s holds %d with memory.low %d below it, as the kubelet's memoryReservationPolicy TieredReservation writes a Guaranteed pod's request",
				f.cgroupPath(dir)+"/"+memqos.FileMin, mn, lo)
		}
	}
	return ""
}

func sortedDirs(dirs map[types.UID]podDir) []podDir {
	out := make([]podDir, 0, len(dirs))
	for _, d := range dirs {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// Uninstalling tells an uninstall from any other reason the agent is
// stopped. A rolling update, a node drain, an eviction or a crash leave
// the agent's DaemonSet in place, and must leave every value as it is (a
// restart never drops protection). An uninstall deletes the DaemonSet
// first: it is then gone, being deleted, or replaced by one with another
// UID, or the API refuses to show it (its Role went with the namespace).
// Any other error (a timeout, a 5xx) is no proof of an uninstall, and
// keeps the values. uid is the DaemonSet's UID as seen at start (empty:
// not compared).
func Uninstalling(ctx context.Context, cs kubernetes.Interface, namespace, name string, uid types.UID) (bool, string) {
	// Deleting the namespace (kubectl delete -k deploy/node) deletes the
	// DaemonSet's pods, the DaemonSet and its RBAC in no set order.
	if ns, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); err == nil && ns.DeletionTimestamp != nil {
		return true, fmt.Sprintf("namespace %s is being deleted", namespace)
	}
	ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, fmt.Sprintf("daemonset %s/%s is gone", namespace, name)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return true, fmt.Sprintf("daemonset %s/%s can no longer be read (%v): its RBAC was removed with it", namespace, name, err)
	case err != nil:
		return false, fmt.Sprintf("daemonset %s/%s: %v; values kept", namespace, name, err)
	case ds.DeletionTimestamp != nil:
		return true, fmt.Sprintf("daemonset %s/%s is being deleted", namespace, name)
	case uid != "" && ds.UID != uid:
		return true, fmt.Sprintf("daemonset %s/%s was deleted and created again", namespace, name)
	}
	return false, fmt.Sprintf("daemonset %s/%s is in place (a rolling update, a drain or a restart): values kept", namespace, name)
}

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// Options configure an Agent. The zero value of each field is usable.
type Options struct {
	// Policy applies to pods without a memoryQOS annotation policy:
	// memqos.PolicyDefault (follow the ConfigMap) or memqos.PolicyAuto.
	Policy memqos.Policy
	// MaxProtectedRatio caps the node's total memory.min (default 0.8).
	MaxProtectedRatio float64
	// KernelRelease is the node's kernel (uname -r); below 5.9 memory.high
	// stays at max. Empty: a kernel known to be 5.9 or later.
	KernelRelease string
	// Kubelet is what the kubelet's own Memory QoS writes (ParseKubeletConfig,
	// KubeletMode). The agent never writes a file at a level the kubelet
	// owns, unless TakeOverKubelet is set; where the values the kubelet wrote
	// show TieredReservation, it defers as for TieredReservation from then on.
	Kubelet         KubeletQoS
	TakeOverKubelet bool
	// PodOverrides is what pods' memoryQOS annotations may change; nil
	// means memqos.DefaultPodOverrides.
	PodOverrides *memqos.PodOverrides
	// ResetAfter is how long a pod cgroup must have been out of the API's
	// view, with no process left in it, before its values go back to the
	// kernel defaults (0: DefaultResetAfter; negative: at once, for plan
	// mode, which sees one moment).
	ResetAfter time.Duration
	// DryRun plans and compares but writes nothing (plan mode).
	DryRun bool
	Log    *slog.Logger // nil: silent
	// Metrics, when set, receives writes, errors, protected bytes and
	// reconcile durations.
	Metrics *Metrics
}

// DefaultResetAfter is how long a pod's cgroup must be empty and out of the
// API's view before the agent gives its values back to the kernel: longer
// than a watch takes to catch up after a hiccup.
const DefaultResetAfter = time.Minute

// Agent reconciles one node's memory cgroups.
type Agent struct {
	layout *Layout
	writer *manage.Writer
	opts   Options
	log    *slog.Logger
	mu     sync.Mutex // one reconcile at a time
	health health
	// absent holds when each pod cgroup was first seen without an API pod
	// (a pass's working state, kept between passes under mu).
	absent map[types.UID]time.Time
	cache  caches // paths and scratch kept between passes, under mu
	// written is what the last pass left in each file it owns, to tell
	// when someone else changed one since.
	written map[fileKey]int64
	// self holds the cgroups found to be the agent's own cgroup namespace
	// root (see ownCgroupRefusal), under mu: never written again.
	self map[string]bool
}

// New returns an Agent for the cgroups described by layout.
func New(layout *Layout, opts Options) *Agent {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := manage.NewWriter(log, layout.Version == 1)
	w.DryRun = opts.DryRun
	return &Agent{layout: layout, writer: w, opts: opts, log: log}
}

// Layout is the cgroup layout the agent manages.
func (a *Agent) Layout() *Layout { return a.layout }

// State is what a reconcile works from.
type State struct {
	Pods       []*corev1.Pod // the node's pods, in any phase
	Config     *memqos.Config
	Namespaces memqos.Namespaces
	NodeLabels map[string]string
	// Node is the node's name and UID: only mirror pods its kubelet made
	// redirect a plan to a static pod's cgroup.
	Node memqos.NodeID
	// Now is the pass's time (zero: the clock's).
	Now time.Time
	// NodeAllocatable is the node's allocatable memory in bytes; without
	// it the pass is skipped.
	NodeAllocatable int64
}

// Why a pass wrote nothing (Report.Skip, and the reason label of
// gofit_node_skipped_reconciles_total).
const (
	SkipNoAllocatable = "no_allocatable"
	SkipBadInput      = "bad_input"
	// SkipBadConfig: the QoS ConfigMap does not parse or check, and no
	// good configuration has been in force since the agent started (Run).
	SkipBadConfig = "bad_config"
)

// Report is what one reconcile planned and did.
type Report struct {
	// Values, Apply.Changed and Result carry their reasons in a dry run
	// and in a pass that wrote something; a pass that wrote nothing
	// leaves them empty (it plans tersely and formats no reason).
	Values   []manage.Value
	Apply    manage.ApplyResult
	Result   memqos.Result
	Strategy string // the node strategy used, if any
	// Skip is set when the pass wrote nothing (SkipNoAllocatable, ...),
	// and SkipReason says why in words.
	Skip       string
	SkipReason string
	// Kubelet says what the kubelet's own Memory QoS writes, and how that
	// was found (also when the agent takes over).
	Kubelet string
	// Deferred lists the files, per level, left to the kubelet and why
	// (KubeletQoS.Deferred); Owned is the same as data.
	Deferred []string
	Owned    []Owned
	// Foreign lists the files the agent owns that someone else changed
	// since its last pass ("dir/file: wrote X, found Y").
	Foreign []ForeignWrite
	// ViewLag is how long the longest-missing pod the kubelet still runs
	// (a pod cgroup with processes in it) has been out of the API's view:
	// 0 when the view holds every pod the kubelet runs. Unknown counts
	// those pods.
	ViewLag  time.Duration
	Unknown  int
	Warnings []string
	Duration time.Duration
	// Unprotected counts the pods this pass left without the memory QoS
	// it planned for them: pods whose cgroup it could not find, or every
	// running pod when the pass was skipped for bad input or a missing
	// allocatable.
	Unprotected int
}

// ForeignWrite is a file the agent owns whose value changed since the
// agent's last pass, though the agent did not write it.
type ForeignWrite struct {
	Dir, File    string
	Level        memqos.Level
	Wrote, Found int64
}

// Reconcile plans every value and applies the changed ones. Pods whose
// cgroups do not exist (yet, or any more) are skipped; pod cgroups the
// API no longer knows, or whose pod has finished, get kernel defaults back.
// Without the node's allocatable memory it writes nothing and says why.
// Files the kubelet's own Memory QoS writes at a level are left to it
// (Report.Deferred).
func (a *Agent) Reconcile(st State) Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	var rep Report
	defer func() {
		a.cache.sweep()
		rep.Duration = time.Since(start)
		a.health.passed(start, rep.Skip, rep.SkipReason, rep.Unknown, rep.ViewLag, rep.Deferred)
		if m := a.opts.Metrics; m != nil {
			m.observe(&rep)
		}
	}()
	strategy, name := st.Config.ForNode(st.NodeLabels)
	fixed, _ := st.Config.NodeStrategy(st.NodeLabels)
	rep.Strategy = name
	now := st.Now
	if now.IsZero() {
		now = time.Now()
	}
	l := a.layout
	dirs, err := l.podDirs()
	if err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("list pod cgroups: %v", err))
	}
	kept, resets := a.absentPods(st, dirs, now, &rep)
	in := memqos.Input{
		Pods:              st.Pods,
		Strategy:          strategy,
		Namespaces:        st.Namespaces,
		Policy:            a.opts.Policy,
		NodeAllocatable:   st.NodeAllocatable,
		MaxProtectedRatio: a.opts.MaxProtectedRatio,
		CgroupVersion:     a.layout.Version,
		PageSize:          int64(os.Getpagesize()),
		KernelRelease:     a.opts.KernelRelease,
		NodeStrategy:      fixed,
		PodOverrides:      a.opts.PodOverrides,
		Node:              st.Node,
		Kept:              kept,
		// Reasons are formatted only for a pass that writes (explain).
		Terse: !a.opts.DryRun,
	}
	res, err := memqos.Compute(in)
	if err == nil && len(res.Conflicts) > 0 {
		// The pods of a conflict are left as they are: what their cgroup
		// holds must count in the sums above it too.
		for _, c := range res.Conflicts {
			if d, ok := dirs[c.UID]; ok {
				in.Kept = append(in.Kept, a.keep(c.UID, d))
			}
		}
		res, err = memqos.Compute(in)
	}
	if err != nil {
		// Fail closed: a plan without the node's size has no cap and no
		// throttle for pods without a limit.
		rep.Skip, rep.SkipReason = SkipBadInput, "no values planned: "+err.Error()
		if errors.Is(err, memqos.ErrNoAllocatable) {
			rep.Skip = SkipNoAllocatable
		}
		for _, p := range st.Pods {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				rep.Unprotected++
			}
		}
		return rep
	}
	rep.Result = res
	rep.Warnings = append(rep.Warnings, res.Warnings...)

	srcs := a.cache.srcs[:0]
	add := func(p string, level memqos.Level, ss []memqos.Setting, pod, ctr int) {
		rep.Values = memqos.AppendValues(rep.Values, a.dir(p), level, ss)
		for i := range ss {
			srcs = append(srcs, valueSrc{int32(pod), int32(ctr), int32(i)})
		}
	}
	rep.Values = make([]manage.Value, 0, valueCount(&res))
	seen := "" // TieredReservation's values, where the kubelet wrote them
	add(l.Kubepods, memqos.LevelKubepods, res.Kubepods, srcKubepods, -1)
	add(l.QoSPath(corev1.PodQOSBurstable), memqos.LevelQoS, res.QoS[corev1.PodQOSBurstable], srcBurstable, -1)
	add(l.QoSPath(corev1.PodQOSBestEffort), memqos.LevelQoS, res.QoS[corev1.PodQOSBestEffort], srcBestEffort, -1)
	for pi, p := range res.Pods {
		d, ok := dirs[p.UID]
		if !ok {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s/%s: no cgroup %s (not started yet?)", p.Namespace, p.Name, l.PodPath(p.KubeQoS, p.UID)))
			rep.Unprotected++
			continue
		}
		if seen == "" {
			seen = a.kubeletWrote(p, d.path)
		}
		add(d.path, memqos.LevelPod, p.Settings, pi, -1)
		for ci, c := range p.Containers {
			cp, ok := a.containerPath(d.path, c.ID)
			if !ok {
				if c.ID != "" {
					rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s/%s container %s: no cgroup for %s under %s", p.Namespace, p.Name, c.Name, c.ID, d.path))
				}
				continue
			}
			add(cp, memqos.LevelContainer, c.Settings, pi, ci)
		}
	}
	for _, u := range resets {
		d := dirs[u]
		why := "pod " + string(u) + " is gone or finished and its cgroup is empty: kernel default"
		add(d.path, memqos.LevelPod, []memqos.Setting{{File: memqos.FileMin, Value: 0, Reason: why}, {File: memqos.FileLow, Value: 0, Reason: why}}, srcAgent, -1)
		for _, cp := range l.children(d.path) {
			ss := []memqos.Setting{{File: memqos.FileMin, Value: 0, Reason: why}, {File: memqos.FileLow, Value: 0, Reason: why}, {File: memqos.FileHigh, Value: manage.Unlimited, Reason: why}}
			if l.Version == 1 {
				ss = append(ss, memqos.Setting{File: memqos.FileSoftLimit, Value: manage.Unlimited, Reason: why})
			}
			add(cp, memqos.LevelContainer, ss, srcAgent, -1)
		}
	}
	a.cache.srcs = srcs

	if seen != "" {
		if _, owned := a.opts.Kubelet.Owns(memqos.LevelPod, memqos.FileMin); !owned && l.Version == 2 {
			// The config (or the version's defaults) said otherwise: what
			// the kubelet did wins, for this pass and the ones after.
			a.log.Warn("the kubelet writes TieredReservation's values: deferring to it", "seen", seen, "was", a.opts.Kubelet.Reason)
			a.opts.Kubelet = tieredSeen(seen, 0)
		}
	}
	rep.Values = a.deferToKubelet(&rep, rep.Values)
	// The writer checks again what memqos promises: no memory value
	// outside [0, allocatable] and min ≤ low ≤ high per group.
	a.writer.MaxMemory = st.NodeAllocatable
	if len(a.self) > 0 {
		// The agent's own cgroup, which the kernel refuses it: dropped
		// as deferToKubelet drops, a.cache.srcs kept parallel.
		out, srcs := rep.Values[:0], a.cache.srcs[:0]
		for i, v := range rep.Values {
			if !a.self[v.Dir] {
				out = append(out, v)
				if i < len(a.cache.srcs) {
					srcs = append(srcs, a.cache.srcs[i])
				}
			}
		}
		rep.Values, a.cache.srcs = out, srcs
	}
	// Only the files the agent owns, below kubepods: srcs kept parallel.
	{
		root := a.kubepodsDir()
		out, srcs := rep.Values[:0], a.cache.srcs[:0]
		for i, v := range rep.Values {
			if a.owns(v, root) {
				out = append(out, v)
				if i < len(a.cache.srcs) {
					srcs = append(srcs, a.cache.srcs[i])
				}
			}
		}
		rep.Values, a.cache.srcs = out, srcs
	}
	rep.Apply = a.writer.Apply(rep.Values)
	rep.Apply.Errors = a.dropOwnCgroup(rep.Apply.Errors)
	if in.Terse && len(rep.Apply.Changed) > 0 {
		a.explain(in, &rep)
	}
	a.noteForeign(&rep)
	for _, f := range a.writer.MissingFiles() {
		rep.Warnings = append(rep.Warnings, f+": not on this kernel; skipped")
	}
	if !a.opts.DryRun {
		for _, c := range rep.Apply.Changed {
			a.log.Info("set", "cgroup", a.cgroupPath(c.Dir), "file", c.File, "value", manage.FormatValue(c.Value.Value),
				"old", manage.FormatValue(c.Old), "reason", c.Reason)
		}
		for _, e := range rep.Apply.Errors {
			a.log.Error("cgroup write", "err", e)
		}
	}
	return rep
}

// deferToKubelet drops the values of files the kubelet owns at their level (on
// cgroup v2, where its Memory QoS works), and says so in rep; with
// TakeOverKubelet it keeps them and warns.
func (a *Agent) deferToKubelet(rep *Report, vs []manage.Value) []manage.Value {
	k := a.opts.Kubelet
	if a.layout.Version != 2 || len(k.Owned) == 0 {
		rep.Kubelet = k.Reason
		return vs
	}
	rep.Kubelet = k.Reason
	if a.opts.TakeOverKubelet {
		rep.Warnings = append(rep.Warnings, "taking over from the kubelet's Memory QoS: "+k.Reason)
		return vs
	}
	rep.Deferred, rep.Owned = k.Deferred(), k.Owned
	if _, owned := k.Owns(memqos.LevelContainer, memqos.FileLow); owned && a.layout.RecursiveProt < 0 {
		rep.Warnings = append(rep.Warnings, "cgroup2 is mounted without memory_recursiveprot: the pods' memory.min/low protect none of their containers' pages while the kubelet keeps the containers' at its own values; mount it with memory_recursiveprot (systemd does) or use --take-over-kubelet-memory-qos")
	}
	// a.cache.srcs stays parallel to the values (explain reads both).
	out, srcs := vs[:0], a.cache.srcs[:0]
	for i, v := range vs {
		if _, owned := k.Owns(memqos.Level(v.Level), v.File); !owned {
			out = append(out, v)
			if i < len(a.cache.srcs) {
				srcs = append(srcs, a.cache.srcs[i])
			}
		}
	}
	a.cache.srcs = srcs
	return out
}

// fileKey names a cgroup file: its directory and its name.
type fileKey struct{ dir, file string }

// noteForeign compares what the agent left in each file last pass with
// what this pass found there: a change it did not make means another
// writer (the kubelet, an operator) writes the file too. It then records
// what this pass left.
func (a *Agent) noteForeign(rep *Report) {
	if a.opts.DryRun {
		return
	}
	for _, c := range rep.Apply.Changed {
		if w, ok := a.written[fileKey{c.Dir, c.File}]; ok && !manage.Same(c.Old, w) {
			rep.Foreign = append(rep.Foreign, ForeignWrite{Dir: c.Dir, File: c.File, Level: memqos.Level(c.Level), Wrote: w, Found: c.Old})
		}
	}
	if len(rep.Apply.Errors) == 0 {
		// Refilled in place: a pass that changes nothing allocates
		// nothing here.
		if a.written == nil {
			a.written = make(map[fileKey]int64, len(rep.Values))
		}
		clear(a.written)
		for _, v := range rep.Values {
			a.written[fileKey{v.Dir, v.File}] = v.Value
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
			if a.writer.Refused(v) || failed(v.Path()) {
				if w, ok := a.written[k]; ok {
					next[k] = w
				}
				continue
			}
			next[k] = v.Value
		}
		a.written = next
	}
	for _, f := range rep.Foreign {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s/%s (%s level): the agent left %s, found %s: another writer changed it",
			a.cgroupPath(f.Dir), f.File, LevelName(f.Level), manage.FormatValue(f.Wrote), manage.FormatValue(f.Found)))
	}
}

// absentPods sorts the pod cgroups that no running API pod maps to. Their
// values go back to the kernel defaults (resets) only once the kubelet
// runs nothing in the cgroup and the API has not held the pod for
// ResetAfter: a lagging watch, or a broken path to the API server, must not
// strip pods that still run. The others are kept as they are, and what
// they hold counts in the sums above them.
func (a *Agent) absentPods(st State, dirs map[types.UID]podDir, now time.Time, rep *Report) (kept []memqos.Kept, resets []types.UID) {
	known := make(map[types.UID]bool, len(st.Pods))
	for _, p := range st.Pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			known[memqos.CgroupUID(p, st.Node)] = true
		}
	}
	resetAfter := a.opts.ResetAfter
	if resetAfter == 0 {
		resetAfter = DefaultResetAfter
	}
	if a.absent == nil {
		a.absent = map[types.UID]time.Time{}
	}
	for uid := range a.absent {
		if _, ok := dirs[uid]; !ok || known[uid] {
			delete(a.absent, uid)
		}
	}
	uids := make([]string, 0, len(dirs))
	for uid := range dirs {
		if !known[uid] {
			uids = append(uids, string(uid))
		}
	}
	sort.Strings(uids)
	for _, u := range uids {
		uid := types.UID(u)
		d := dirs[uid]
		since, ok := a.absent[uid]
		if !ok {
			since = now
			a.absent[uid] = now
		}
		gone := now.Sub(since)
		running, err := a.layout.populated(d.path)
		switch {
		case err != nil:
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s: %v; its values are kept", u, err))
		case running:
			rep.Unknown++
			rep.ViewLag = max(rep.ViewLag, gone)
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s: the kubelet runs it (processes in %s) but the API's view has not held it for %v; its values are kept",
				u, d.path, gone.Round(time.Second)))
		case resetAfter < 0 || gone >= resetAfter:
			resets = append(resets, uid)
			continue
		}
		kept = append(kept, a.keep(uid, d))
	}
	return kept, resets
}

// keep reads what a pod cgroup left as it is holds (0 where unreadable,
// as on cgroup v1).
func (a *Agent) keep(uid types.UID, d podDir) memqos.Kept {
	k := memqos.Kept{UID: uid, KubeQoS: d.qos}
	dir := a.layout.dir(d.path)
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
// there (Agent.written, this process), nor a pair the agent ever leaves:
// it keeps memory.low at or above memory.min in every group it writes
// (memqos raises it; the writer refuses the pair otherwise), while
// TieredReservation sets only a Guaranteed pod's memory.min. The second
// test holds across an agent restart, which forgets what it wrote.
func (a *Agent) kubeletWrote(p memqos.PodResult, podPath string) string {
	if a.layout.Version != 2 || p.KubeQoS != corev1.PodQOSGuaranteed || p.Request < 1<<20 {
		return ""
	}
	dir := a.dir(podPath)
	cur, err := a.writer.Read(dir, memqos.FileMin)
	if err != nil || cur != p.Request {
		return ""
	}
	for _, s := range p.Settings {
		if s.File == memqos.FileMin && s.Value == cur {
			return ""
		}
	}
	if w, ok := a.written[fileKey{dir, memqos.FileMin}]; ok && manage.Same(w, cur) {
		return "" // the agent's own
	}
	low, err := a.writer.Read(dir, memqos.FileLow)
	if err != nil || low >= cur {
		return "" // a pair the agent may have left (before a restart)
	}
	return fmt.Sprintf("%s holds %d, the Guaranteed pod %s/%s's whole memory request, with memory.low %d below it, as the kubelet's memoryReservationPolicy TieredReservation writes it",
		a.cgroupPath(dir)+"/"+memqos.FileMin, cur, p.Namespace, p.Name, low)
}

// cgroupPath turns a directory back into its path under the mount.
func (a *Agent) cgroupPath(dir string) string {
	rel, err := relSlash(a.layout.Mount, dir)
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
func (a *Agent) dropOwnCgroup(errs []error) []error {
	out := errs[:0]
	for _, err := range errs {
		var pe *fs.PathError
		if errors.Is(err, fs.ErrPermission) && errors.As(err, &pe) {
			dir := filepath.Dir(pe.Path)
			if a.self[dir] || ownCgroup(dir) {
				if a.self == nil {
					a.self = map[string]bool{}
				}
				if !a.self[dir] {
					a.log.Info("not writing the agent's own cgroup: it is the root of the agent's cgroup namespace, which the kernel keeps from writes inside it (nsdelegate)",
						"cgroup", a.cgroupPath(dir))
				}
				a.self[dir] = true
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
func (a *Agent) owns(v manage.Value, root string) bool {
	dir := filepath.Clean(v.Dir)
	if Writable[v.File] && (dir == root || strings.HasPrefix(dir, root+string(filepath.Separator))) {
		return true
	}
	a.log.Error("refused to write a file the agent does not own", "dir", v.Dir, "file", v.File, "kubepods", root)
	if a.opts.Metrics != nil {
		a.opts.Metrics.Error()
	}
	return false
}

// kubepodsDir is the kubepods subtree on disk, the only one the agent
// writes in.
func (a *Agent) kubepodsDir() string { return filepath.Clean(a.layout.dir(a.layout.Kubepods)) }

// confine keeps of vals those the agent owns.
func (a *Agent) confine(vals []manage.Value) []manage.Value {
	root := a.kubepodsDir()
	out := vals[:0]
	for _, v := range vals {
		if a.owns(v, root) {
			out = append(out, v)
		}
	}
	return out
}

package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
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
	opts   Options
	log    *slog.Logger
	mu     sync.Mutex // one reconcile at a time
	health health
	files  cgroupFiles // under mu
	// absent holds when each pod cgroup was first seen without an API pod
	// (a pass's working state, kept between passes under mu).
	absent map[types.UID]time.Time
	// srcs says where each of a pass's values comes from in its plan
	// (parallel to Report.Values), to explain the ones it writes; kept
	// between passes under mu as scratch.
	srcs []valueSrc
}

// New returns an Agent for the cgroups described by layout.
func New(layout *Layout, opts Options) *Agent {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := manage.NewWriter(log, layout.Version == 1)
	w.DryRun = opts.DryRun
	return &Agent{layout: layout, opts: opts, log: log,
		files: cgroupFiles{layout: layout, writer: w, log: log, metrics: opts.Metrics, dryRun: opts.DryRun}}
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
func (a *Agent) Reconcile(st State) (rep Report) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	// rep is the named result, so that what the deferred func sets (the
	// pass's duration) reaches the caller, not only the metrics.
	defer func() {
		a.files.cache.sweep()
		rep.Duration = time.Since(start)
		a.health.passed(start, rep.Skip, rep.SkipReason, rep.Unknown, rep.ViewLag, rep.Deferred)
		if m := a.opts.Metrics; m != nil {
			m.observe(&rep)
		}
	}()
	p, res, err := a.plan(st, &rep)
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
	if seen := a.values(&rep, p); seen != "" {
		if _, owned := a.opts.Kubelet.Owns(memqos.LevelPod, memqos.FileMin); !owned && a.layout.Version == 2 {
			// The config (or the version's defaults) said otherwise: what
			// the kubelet did wins, for this pass and the ones after.
			a.log.Warn("the kubelet writes TieredReservation's values: deferring to it", "seen", seen, "was", a.opts.Kubelet.Reason)
			a.opts.Kubelet = tieredSeen(seen, 0)
		}
	}
	rep.Values = a.deferToKubelet(&rep, rep.Values)
	// The writer checks again what memqos promises: no memory value
	// outside [0, allocatable] and min ≤ low ≤ high per group.
	a.files.writer.MaxMemory = st.NodeAllocatable
	a.write(&rep, p.in)
	return rep
}

// pass is what a reconcile plans from: the plan's input (planned again in
// full to explain a pass that writes) and the pod cgroups on disk, with
// those whose values go back to the kernel defaults.
type pass struct {
	in     memqos.Input
	dirs   map[types.UID]podDir
	resets []types.UID
}

// plan finds the pod cgroups on disk and plans every level's values for
// st's pods. Pod cgroups no API pod maps to, and those of a conflict, are
// kept as they are.
func (a *Agent) plan(st State, rep *Report) (pass, memqos.Result, error) {
	strategy, name := st.Config.ForNode(st.NodeLabels)
	fixed, _ := st.Config.NodeStrategy(st.NodeLabels)
	rep.Strategy = name
	now := st.Now
	if now.IsZero() {
		now = time.Now()
	}
	dirs, err := a.layout.podDirs()
	if err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("list pod cgroups: %v", err))
	}
	kept, resets := a.absentPods(st, dirs, now, rep)
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
				in.Kept = append(in.Kept, a.files.kept(c.UID, d))
			}
		}
		res, err = memqos.Compute(in)
	}
	return pass{in: in, dirs: dirs, resets: resets}, res, err
}

// values turns the plan in rep.Result into rep.Values, level by level from
// kubepods down, with the kernel defaults for p.resets, and a.srcs
// parallel to them. It returns what shows the kubelet's TieredReservation
// in a pod cgroup, if anything does.
func (a *Agent) values(rep *Report, p pass) (seen string) {
	l, res := a.layout, &rep.Result
	srcs := a.srcs[:0]
	add := func(path string, level memqos.Level, ss []memqos.Setting, pod, ctr int) {
		rep.Values = memqos.AppendValues(rep.Values, a.files.dir(path), level, ss)
		for i := range ss {
			srcs = append(srcs, valueSrc{int32(pod), int32(ctr), int32(i)})
		}
	}
	rep.Values = make([]manage.Value, 0, valueCount(res))
	add(l.Kubepods, memqos.LevelKubepods, res.Kubepods, srcKubepods, -1)
	add(l.QoSPath(corev1.PodQOSBurstable), memqos.LevelQoS, res.QoS[corev1.PodQOSBurstable], srcBurstable, -1)
	add(l.QoSPath(corev1.PodQOSBestEffort), memqos.LevelQoS, res.QoS[corev1.PodQOSBestEffort], srcBestEffort, -1)
	for pi, pod := range res.Pods {
		d, ok := p.dirs[pod.UID]
		if !ok {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s/%s: no cgroup %s (not started yet?)", pod.Namespace, pod.Name, l.PodPath(pod.KubeQoS, pod.UID)))
			rep.Unprotected++
			continue
		}
		if seen == "" {
			seen = a.files.kubeletWrote(pod, d.path)
		}
		add(d.path, memqos.LevelPod, pod.Settings, pi, -1)
		for ci, c := range pod.Containers {
			cp, ok := a.files.containerPath(d.path, c.ID)
			if !ok {
				if c.ID != "" {
					rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s/%s container %s: no cgroup for %s under %s", pod.Namespace, pod.Name, c.Name, c.ID, d.path))
				}
				continue
			}
			add(cp, memqos.LevelContainer, c.Settings, pi, ci)
		}
	}
	for _, u := range p.resets {
		d := p.dirs[u]
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
	a.srcs = srcs
	return seen
}

// write applies rep.Values the agent may write (not its own cgroup, only
// its files below kubepods), explains the changes of a terse pass, notes
// other writers, and logs each change and error.
func (a *Agent) write(rep *Report, in memqos.Input) {
	if len(a.files.self) > 0 {
		// The agent's own cgroup, which the kernel refuses it: dropped
		// as deferToKubelet drops, a.srcs kept parallel.
		rep.Values, a.srcs = keepValues(rep.Values, a.srcs, func(v manage.Value) bool { return !a.files.self[v.Dir] })
	}
	// Only the files the agent owns, below kubepods: srcs kept parallel.
	root := a.files.kubepodsDir()
	rep.Values, a.srcs = keepValues(rep.Values, a.srcs, func(v manage.Value) bool { return a.files.owns(v, root) })
	w := a.files.writer
	rep.Apply = w.Apply(rep.Values)
	rep.Apply.Errors = a.files.dropOwnCgroup(rep.Apply.Errors)
	if in.Terse && len(rep.Apply.Changed) > 0 {
		explain(in, rep, a.srcs)
	}
	a.files.noteForeign(rep)
	for _, f := range w.MissingFiles() {
		rep.Warnings = append(rep.Warnings, f+": not on this kernel; skipped")
	}
	if !a.opts.DryRun {
		for _, c := range rep.Apply.Changed {
			a.log.Info("set", "cgroup", a.files.cgroupPath(c.Dir), "file", c.File, "value", manage.FormatValue(c.Value.Value),
				"old", manage.FormatValue(c.Old), "reason", c.Reason)
		}
		for _, e := range rep.Apply.Errors {
			a.log.Error("cgroup write", "err", e)
		}
	}
}

// keepValues keeps, in place, the values keep accepts, and the sources
// parallel to them (srcs may be shorter: Reset plans none).
func keepValues(vs []manage.Value, srcs []valueSrc, keep func(manage.Value) bool) ([]manage.Value, []valueSrc) {
	out, outSrcs := vs[:0], srcs[:0]
	for i, v := range vs {
		if keep(v) {
			out = append(out, v)
			if i < len(srcs) {
				outSrcs = append(outSrcs, srcs[i])
			}
		}
	}
	return out, outSrcs
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
	// a.srcs stays parallel to the values (explain reads both).
	var out []manage.Value
	out, a.srcs = keepValues(vs, a.srcs, func(v manage.Value) bool {
		_, owned := k.Owns(memqos.Level(v.Level), v.File)
		return !owned
	})
	return out
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
		kept = append(kept, a.files.kept(uid, d))
	}
	return kept, resets
}

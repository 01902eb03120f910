package agent

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
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
	// DryRun plans and compares but writes nothing (plan mode).
	DryRun bool
	Log    *slog.Logger // nil: silent
	// Metrics, when set, receives writes, errors, protected bytes and
	// reconcile durations.
	Metrics *Metrics
}

// Agent reconciles one node's memory cgroups.
type Agent struct {
	layout *Layout
	writer *manage.Writer
	opts   Options
	log    *slog.Logger
	mu     sync.Mutex // one reconcile at a time
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
	// NodeAllocatable is the node's allocatable memory in bytes.
	NodeAllocatable int64
}

// Report is what one reconcile planned and did.
type Report struct {
	Values   []manage.Value
	Apply    manage.ApplyResult
	Result   memqos.Result
	Strategy string // the node strategy used, if any
	Warnings []string
	Duration time.Duration
}

// Reconcile plans every value and applies the changed ones. Pods whose
// cgroups do not exist (yet, or any more) are skipped; pod cgroups the
// API no longer knows, or whose pod has finished, get kernel defaults back.
func (a *Agent) Reconcile(st State) Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	var rep Report
	strategy, name := st.Config.ForNode(st.NodeLabels)
	rep.Strategy = name
	res := memqos.Compute(memqos.Input{
		Pods:              st.Pods,
		Strategy:          strategy,
		Namespaces:        st.Namespaces,
		Policy:            a.opts.Policy,
		NodeAllocatable:   st.NodeAllocatable,
		MaxProtectedRatio: a.opts.MaxProtectedRatio,
		CgroupVersion:     a.layout.Version,
		PageSize:          int64(os.Getpagesize()),
	})
	rep.Result = res
	rep.Warnings = append(rep.Warnings, res.Warnings...)

	l := a.layout
	add := func(p string, level memqos.Level, ss []memqos.Setting) {
		for _, s := range ss {
			rep.Values = append(rep.Values, manage.Value{Dir: l.dir(p), File: s.File, Value: s.Value, Level: int(level), Reason: s.Reason})
		}
	}
	add(l.Kubepods, memqos.LevelKubepods, res.Kubepods)
	for _, q := range []corev1.PodQOSClass{corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		add(l.QoSPath(q), memqos.LevelQoS, res.QoS[q])
	}
	dirs, err := l.podDirs()
	if err != nil {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("list pod cgroups: %v", err))
	}
	planned := map[types.UID]bool{}
	for _, p := range res.Pods {
		d, ok := dirs[p.UID]
		if !ok {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s/%s: no cgroup %s (not started yet?)", p.Namespace, p.Name, l.PodPath(p.KubeQoS, p.UID)))
			continue
		}
		planned[p.UID] = true
		add(d.path, memqos.LevelPod, p.Settings)
		for _, c := range p.Containers {
			cp, ok := l.ContainerPath(d.path, c.ID)
			if !ok {
				if c.ID != "" {
					rep.Warnings = append(rep.Warnings, fmt.Sprintf("pod %s/%s container %s: no cgroup for %s under %s", p.Namespace, p.Name, c.Name, c.ID, d.path))
				}
				continue
			}
			add(cp, memqos.LevelContainer, c.Settings)
		}
	}
	// Pods the API does not list as running any more, and SYSTEM pods
	// memqos leaves alone, are told apart by whether the API knows them.
	known := map[types.UID]bool{}
	for _, p := range st.Pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			known[p.UID] = true
		}
	}
	uids := make([]string, 0, len(dirs))
	for uid := range dirs {
		uids = append(uids, string(uid))
	}
	sort.Strings(uids)
	for _, u := range uids {
		uid := types.UID(u)
		if planned[uid] || known[uid] {
			continue
		}
		d := dirs[uid]
		why := "pod " + u + " is gone or finished: kernel default"
		add(d.path, memqos.LevelPod, []memqos.Setting{{File: memqos.FileMin, Value: 0, Reason: why}, {File: memqos.FileLow, Value: 0, Reason: why}})
		for _, cp := range l.children(d.path) {
			ss := []memqos.Setting{{File: memqos.FileMin, Value: 0, Reason: why}, {File: memqos.FileLow, Value: 0, Reason: why}, {File: memqos.FileHigh, Value: memqos.Max, Reason: why}}
			if l.Version == 1 {
				ss = append(ss, memqos.Setting{File: memqos.FileSoftLimit, Value: memqos.Max, Reason: why})
			}
			add(cp, memqos.LevelContainer, ss)
		}
	}

	rep.Apply = a.writer.Apply(rep.Values)
	for _, f := range a.writer.MissingFiles() {
		rep.Warnings = append(rep.Warnings, f+": not on this kernel; skipped")
	}
	rep.Duration = time.Since(start)
	if !a.opts.DryRun {
		for _, c := range rep.Apply.Changed {
			a.log.Info("set", "cgroup", a.cgroupPath(c.Dir), "file", c.File, "value", FormatValue(c.Value.Value),
				"old", FormatValue(c.Old), "reason", c.Reason)
		}
		for _, e := range rep.Apply.Errors {
			a.log.Error("cgroup write", "err", e)
		}
	}
	if m := a.opts.Metrics; m != nil {
		m.observe(&rep)
	}
	return rep
}

// cgroupPath turns a directory back into its path under the mount.
func (a *Agent) cgroupPath(dir string) string {
	rel, err := relSlash(a.layout.Mount, dir)
	if err != nil {
		return dir
	}
	return rel
}

// FormatValue prints a value as plan output shows it: bytes or "max".
func FormatValue(v int64) string {
	if v == memqos.Max {
		return "max"
	}
	return strconv.FormatInt(v, 10)
}

package agent

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gofit-dev/gofit/cgroup/fastread"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// passCache keeps what a pass derives from names that stay the same from
// pass to pass (a cgroup's directory on disk, the names a container's
// cgroup may have) so that the next pass does not build it again. An
// entry the last pass did not use is dropped when the next one ends: the
// cache holds what is on the node now, and a pod that went away takes its
// entries with it.
type passCache[K comparable, V any] struct {
	m    map[K]passEntry[V]
	pass uint64
}

type passEntry[V any] struct {
	v    V
	pass uint64
}

// get returns k's value, made by mk when it is not kept, and marks it used
// by this pass.
func (c *passCache[K, V]) get(k K, mk func() V) V {
	if c.m == nil {
		c.m = map[K]passEntry[V]{}
	}
	e, ok := c.m[k]
	if !ok {
		e.v = mk()
	}
	if !ok || e.pass != c.pass {
		e.pass = c.pass
		c.m[k] = e
	}
	return e.v
}

// sweep ends a pass: what it did not use is dropped.
func (c *passCache[K, V]) sweep() {
	for k, e := range c.m {
		if e.pass != c.pass {
			delete(c.m, k)
		}
	}
	c.pass++
}

// caches are cgroupFiles' passCaches.
type caches struct {
	dirs passCache[string, string]               // cgroup path → directory on disk
	ctrs passCache[ctrKey, []containerCandidate] // a container's possible cgroups
}

type ctrKey struct{ podPath, id string }

// containerCandidate is one name a container's cgroup may have, with its
// directory kept for fastread.
type containerCandidate struct {
	path string
	dir  fastread.Path
}

func (c *caches) sweep() {
	c.dirs.sweep()
	c.ctrs.sweep()
}

// dir is Layout.dir through the cache.
func (f *cgroupFiles) dir(p string) string {
	return f.cache.dirs.get(p, func() string { return f.layout.dir(p) })
}

// containerPath is Layout.ContainerPath with the candidate names kept:
// each pass still checks on disk which one exists, as a container's
// cgroup can go at any time, but builds no path to do so.
func (f *cgroupFiles) containerPath(podPath, containerID string) (string, bool) {
	cands := f.cache.ctrs.get(ctrKey{podPath, containerID}, func() []containerCandidate {
		var out []containerCandidate
		for _, p := range f.layout.containerCandidates(podPath, containerID) {
			out = append(out, containerCandidate{path: p, dir: fastread.New(f.layout.dir(p))})
		}
		return out
	})
	for _, c := range cands {
		if fastread.IsDir(c.dir) {
			return c.path, true
		}
	}
	return "", false
}

// valueSrc is where a value of a pass comes from in its plan: the
// settings of kubepods (pod srcKubepods), of a QoS class (srcBurstable,
// srcBestEffort), of pod pod (ctr -1) or of its container ctr; srcAgent
// marks values the agent explains itself (resets). i indexes the
// settings.
type valueSrc struct{ pod, ctr, i int32 }

const (
	srcKubepods   = -1
	srcBurstable  = -2
	srcBestEffort = -3
	srcAgent      = -4
)

// settingOf is the setting a value came from in plan r, or nil.
func settingOf(r *memqos.Result, s valueSrc) *memqos.Setting {
	var ss []memqos.Setting
	switch {
	case s.pod == srcKubepods:
		ss = r.Kubepods
	case s.pod == srcBurstable:
		ss = r.QoS[corev1.PodQOSBurstable]
	case s.pod == srcBestEffort:
		ss = r.QoS[corev1.PodQOSBestEffort]
	case s.pod >= 0 && int(s.pod) < len(r.Pods):
		p := &r.Pods[s.pod]
		ss = p.Settings
		if s.ctr >= 0 {
			if int(s.ctr) >= len(p.Containers) {
				return nil
			}
			ss = p.Containers[s.ctr].Settings
		}
	}
	if int(s.i) >= len(ss) {
		return nil
	}
	return &ss[s.i]
}

// explain fills in the reasons of a pass planned tersely, from the plan
// made again in full (in, without Terse): the values, the values it
// changed, and rep.Result. srcs are where each of rep.Values comes from.
// A pass that writes nothing is never explained, which saves formatting
// a reason for each of its hundreds of values.
func explain(in memqos.Input, rep *Report, srcs []valueSrc) {
	in.Terse = false
	full, err := memqos.Compute(in)
	if err != nil || len(full.Pods) != len(rep.Result.Pods) {
		return // the same input planned moments ago: cannot happen
	}
	type key struct{ dir, file string }
	why := make(map[key]string, len(rep.Values))
	for i := range rep.Values {
		v := &rep.Values[i]
		if src := srcs[i]; src.pod != srcAgent {
			if s := settingOf(&full, src); s != nil && s.File == v.File && s.Value == v.Value {
				v.Reason = s.Reason
			}
		}
		why[key{v.Dir, v.File}] = v.Reason
	}
	for i := range rep.Apply.Changed {
		c := &rep.Apply.Changed[i]
		c.Reason = why[key{c.Dir, c.File}]
	}
	rep.Result = full
}

// valueCount is how many values a plan's settings make.
func valueCount(r *memqos.Result) int {
	n := len(r.Kubepods)
	for _, ss := range r.QoS {
		n += len(ss)
	}
	for i := range r.Pods {
		n += len(r.Pods[i].Settings)
		for j := range r.Pods[i].Containers {
			n += len(r.Pods[i].Containers[j].Settings)
		}
	}
	return n
}

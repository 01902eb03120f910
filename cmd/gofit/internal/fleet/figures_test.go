package fleet

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestOnePodDoesNotSetTheFigure: one pod of four whose live heap spikes
// to 4× for an hour of a week does not size the workload: memory rests
// on a high quantile of the pod-steps (p99 by default), not their peak,
// and the report names the pod.
func TestOnePodDoesNotSetTheFigure(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.2, live: 50 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: math.MaxInt64, gogc: 100,
		req: Resources{0.3, 256 * mib}, lim: Resources{1, 256 * mib}}
	var pods []Pod
	for _, n := range []string{"web-1", "web-2", "web-3", "web-4"} {
		pods = append(pods, s.pod(n, week, step))
	}
	calm := Analyze(input(week, step, pods...), Options{}).Containers[0].Gofit
	leak := pods[2]
	leak.HeapAllocLow = Track{V: append([]float32(nil), leak.HeapAllocLow.V...)}
	leak.HeapGoal = Track{V: append([]float32(nil), leak.HeapGoal.V...)}
	for i := 1000; i < 1012; i++ {
		leak.HeapAllocLow.V[i] *= 4
		leak.HeapGoal.V[i] *= 4
	}
	pods[2] = leak
	c := Analyze(input(week, step, pods...), Options{}).Containers[0]
	if c.Gofit.Memory != calm.Memory {
		t.Errorf("one pod's hour at 4× moved memory from %s to %s", fmtBytes(float64(calm.Memory)), fmtBytes(float64(c.Gofit.Memory)))
	}
	if why := strings.Join(c.Gofit.Reasons, "\n"); !strings.Contains(why, "web-3") {
		t.Errorf("the pod above the figure is not named:\n%s", why)
	}
	// The quantile is an option: at 1 the peak decides.
	all := Analyze(input(week, step, pods...), Options{MemoryPercentile: 1}).Containers[0]
	if float64(all.Gofit.Memory) < 3*float64(calm.Memory) {
		t.Errorf("MemoryPercentile 1: memory %s, want the spike's", fmtBytes(float64(all.Gofit.Memory)))
	}
}

// TestOOMFloor: a container OOM-killed at a 200MiB limit is never
// planned below it, however small its heap looks.
func TestOOMFloor(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.2, live: 30 * mib, nonHeap: 20 * mib, gomaxprocs: 1, gomemlimit: math.MaxInt64, gogc: 100, oom: 2,
		req: Resources{0.3, 200 * mib}, lim: Resources{1, 200 * mib}}
	c := Analyze(input(week, step, s.pod("web-1", week, step), s.pod("web-2", week, step)), Options{}).Containers[0]
	if got := float64(c.Gofit.Memory); got < 1.2*200*mib {
		t.Errorf("OOM-killed at 200MiB, planned %s: want at least 1.2× the limit it was killed at", fmtBytes(got))
	}
	if why := strings.Join(c.Gofit.Reasons, "\n"); !strings.Contains(why, "OOM") {
		t.Errorf("no reason names the OOM kills:\n%s", why)
	}
	if g := c.Gofit.GOMEMLIMIT; g <= 0 || g >= int64(c.Gofit.Memory) {
		t.Errorf("GOMEMLIMIT %d for memory %v", g, c.Gofit.Memory)
	}
}

// TestNewestPodSpec: after a rollout the spec and the runtime's settings
// come from the newest pod, not the alphabetically last one.
func TestNewestPodSpec(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	oldS := shape{cpu: 0.2, live: 50 * mib, nonHeap: 20 * mib, gomaxprocs: 4, gomemlimit: math.MaxInt64, gogc: 100,
		req: Resources{0.25, 256 * mib}, lim: Resources{0.25, 256 * mib}}
	newS := oldS
	newS.gomaxprocs, newS.gomemlimit, newS.req, newS.lim = 1, 460*mib, Resources{0.5, 512 * mib}, Resources{1, 512 * mib}
	cut := func(p Pod, from, to int) Pod {
		for _, s := range []*Track{&p.CPU, &p.Throttled, &p.GC, &p.WorkingSet, &p.NonHeap, &p.HeapAllocLow, &p.HeapGoal} {
			for j := range s.V {
				if i := s.From + j; i < from || i >= to {
					s.V[j] = float32(math.NaN())
				}
			}
		}
		return p
	}
	t.Run("by the series", func(t *testing.T) {
		// web-z ran the first half of the week, web-a the second.
		in := input(week, step, cut(newS.pod("web-a", week, step), week/2, week), cut(oldS.pod("web-z", week, step), 0, week/2))
		o := Analyze(in, Options{}).Containers[0].Observed
		if o.Limits != newS.lim || o.GOMAXPROCS != 1 || float64(o.GOMEMLIMIT) != 460*mib {
			t.Errorf("observed limits %+v GOMAXPROCS %v GOMEMLIMIT %v: want the newest pod's", o.Limits, o.GOMAXPROCS, o.GOMEMLIMIT)
		}
	})
	t.Run("by creation", func(t *testing.T) {
		// Both ran to the end; kube_pod_created says web-a is newer.
		a, z := newS.pod("web-a", week, step), oldS.pod("web-z", week, step)
		a.Created, z.Created = float64(t0.Add(48*time.Hour).Unix()), float64(t0.Unix())
		o := Analyze(input(week, step, a, z), Options{}).Containers[0].Observed
		if o.Limits != newS.lim || o.GOMAXPROCS != 1 {
			t.Errorf("observed limits %+v GOMAXPROCS %v: want the newest pod's", o.Limits, o.GOMAXPROCS)
		}
	})
}

// TestCPULimitBurst: a service whose 5-minute means sit at 0.3 cores but
// that bursts to 1.5 cores for a minute in each step gets a limit from
// the bursts with --cpu-limit burst, and says so; without the series it
// has no figure and says what is missing.
func TestCPULimitBurst(t *testing.T) {
	const week, step = 7 * 24 * 12, 5 * time.Minute
	s := shape{cpu: 0.3, live: 50 * mib, nonHeap: 20 * mib, gomaxprocs: 2, gomemlimit: math.MaxInt64, gogc: 100,
		req: Resources{0.3, 256 * mib}, lim: Resources{2, 256 * mib}}
	p := s.pod("web-1", week, step)
	mean := Analyze(input(week, step, p), Options{}).Containers[0].Gofit
	p.CPUPeak = series(week, func(int) float64 { return 1.5 })
	c := Analyze(input(week, step, p), Options{CPULimit: CPULimitBurst}).Containers[0].Gofit
	if float64(mean.CPULimit) >= 1 || float64(c.CPULimit) != 2 || c.GOMAXPROCS != 2 {
		t.Errorf("limit from the means %v; from the bursts %v with GOMAXPROCS %d: want 2 whole cores", mean.CPULimit, c.CPULimit, c.GOMAXPROCS)
	}
	if why := strings.Join(c.Reasons, "\n"); !strings.Contains(why, "highest 1-minute demand") {
		t.Errorf("reasons:\n%s", why)
	}
	p.CPUPeak = Track{}
	if c := Analyze(input(week, step, p), Options{CPULimit: CPULimitBurst}).Containers[0].Gofit; c.Enough() || !strings.Contains(strings.Join(c.Missing, ""), "CPU bursts") {
		t.Errorf("no burst series: %+v", c)
	}
}

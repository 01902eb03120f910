package qoslab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/cgroup"
	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/stats"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// Config describes the experiment.
type Config struct {
	Exe        string                     // the gofit binary (serves the sample and the hog)
	SampleArgs func(addr string) []string // arguments that serve the lab's sample on addr
	NodeLimit  int64                      // the "node" cgroup's memory limit
	LSRequest  int64                      // the LS service's memory request (for QoS values)
	LSLimit    int64                      // and its limit
	HogBytes   int64                      // what the BE hog keeps allocated
	Rate       float64                    // open-loop requests per second
	Duration   time.Duration              // load per trial
	Repeats    int                        // trials per mode, interleaved
	Progress   io.Writer
}

// DefaultConfig is sized for a small shared box: a 512MiB node, an LS
// service with request 96MiB and limit 256MiB, and a hog that wants the
// whole node.
func DefaultConfig() Config {
	return Config{NodeLimit: 512 << 20, LSRequest: 96 << 20, LSLimit: 256 << 20, HogBytes: 512 << 20,
		Rate: 150, Duration: 8 * time.Second, Repeats: 3}
}

// Trial is one run of the service under load beside the hog.
type Trial struct {
	Mode      string  `json:"mode"` // "off" or "auto"
	Rep       int     `json:"rep"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	RPS       float64 `json:"rps"` // successful responses per second
	Errors    int     `json:"errors"`
	HogOOMs   int     `json:"hog_restarts"`
	LSOOMKill bool    `json:"ls_killed"`
	// What the kernel counted in each cgroup over the trial: on v2 from
	// memory.events; v1 has no memory.high, so High stays 0 there.
	LS   Events `json:"ls_events"`
	BE   Events `json:"be_events"`
	Node Events `json:"node_events"`

	blocks []stats.Block // the load window, for the intervals
}

// Events are a memory cgroup's counters: times usage went over memory.high
// (and was throttled), times it hit memory.max, and processes the OOM
// killer took.
type Events struct {
	High     uint64 `json:"high"`
	Max      uint64 `json:"max"`
	OOMKills uint64 `json:"oom_kill"`
}

// ModeSummary is the mean of a mode's trials.
type ModeSummary struct {
	Mode string  `json:"mode"`
	P99  float64 `json:"p99_ms"`
	RPS  float64 `json:"rps"`
}

// Results is what Run returns.
type Results struct {
	CgroupVersion int         `json:"cgroup_version"`
	Config        string      `json:"config"`
	Values        []string    `json:"auto_values"` // what auto wrote
	Trials        []Trial     `json:"trials"`
	Off, Auto     ModeSummary `json:"-"`
	P99Change     [3]float64  `json:"p99_change"` // auto vs off: estimate, 95% CI low, high
	RPSChange     [3]float64  `json:"rps_change"`
	P99Verdict    string      `json:"p99_verdict"` // auto vs off, by the lab's rule: better, worse, same or "" without an interval
	RPSVerdict    string      `json:"rps_verdict"`
}

// Run runs Repeats trials per mode, interleaved in ABBA order so drift on
// a shared machine and carry-over from the previous trial fall on both alike. Everything it starts and creates is
// gone when it returns, also on error or cancellation.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if cfg.Exe == "" || cfg.SampleArgs == nil {
		return nil, errors.New("qoslab: no binary to run the sample and the hog")
	}
	if cfg.Repeats < 1 || cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.NodeLimit <= 0 || cfg.LSLimit <= 0 || cfg.LSRequest <= 0 || cfg.HogBytes <= 0 {
		return nil, fmt.Errorf("qoslab: sizes, rate, duration and repeats must be positive: %+v", cfg)
	}
	self, err := cgroup.NewFS("/").Self()
	if err != nil {
		return nil, err
	}
	res := &Results{CgroupVersion: self.Version(),
		Config: fmt.Sprintf("node %dMiB, LS request %dMiB limit %dMiB, BE hog %dMiB, %.0f req/s open loop for %v, %d repeats",
			cfg.NodeLimit>>20, cfg.LSRequest>>20, cfg.LSLimit>>20, cfg.HogBytes>>20, cfg.Rate, cfg.Duration, cfg.Repeats)}
	for rep := 0; rep < cfg.Repeats; rep++ {
		// The order flips every repeat: a trial inherits the page cache
		// and kernel state the one before it left.
		order := []string{"off", "auto"}
		if rep%2 == 1 {
			order = []string{"auto", "off"}
		}
		for _, mode := range order {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			tr, vals, err := trial(ctx, self, cfg, mode, rep)
			if err != nil {
				return res, fmt.Errorf("%s trial %d: %w", mode, rep+1, err)
			}
			if mode == "auto" && res.Values == nil {
				res.Values = vals
			}
			res.Trials = append(res.Trials, tr)
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "%-4s rep %d: p50 %.2fms p99 %.2fms %.1f ok/s errors %d hog restarts %d LS killed %v; events high/max/oom_kill: LS %d/%d/%d BE %d/%d/%d node %d/%d/%d\n",
					mode, rep+1, tr.P50, tr.P99, tr.RPS, tr.Errors, tr.HogOOMs, tr.LSOOMKill,
					tr.LS.High, tr.LS.Max, tr.LS.OOMKills, tr.BE.High, tr.BE.Max, tr.BE.OOMKills, tr.Node.High, tr.Node.Max, tr.Node.OOMKills)
			}
		}
	}
	var offP, autoP, offR, autoR []float64
	var off, auto stats.Sample
	for _, t := range res.Trials {
		if t.Mode == "off" {
			offP, offR, off = append(offP, t.P99), append(offR, t.RPS), append(off, t.blocks)
		} else {
			autoP, autoR, auto = append(autoP, t.P99), append(autoR, t.RPS), append(auto, t.blocks)
		}
	}
	res.Off = ModeSummary{"off", stats.Mean(offP), stats.Mean(offR)}
	res.Auto = ModeSummary{"auto", stats.Mean(autoP), stats.Mean(autoR)}
	boot := stats.NewBootstrap(2000, 1)
	res.P99Change, res.P99Verdict = change(boot, auto, off, stats.StatP99)
	res.RPSChange, res.RPSVerdict = change(boot, auto, off, stats.StatRPS)
	return res, nil
}

// trial builds node/ls and node/be, applies the mode's values, starts the
// sample and the hog, drives load, and removes it all.
func trial(ctx context.Context, self *cgroup.Cgroups, cfg Config, mode string, rep int) (Trial, []string, error) {
	tr := Trial{Mode: mode, Rep: rep + 1}
	node, err := manage.NewChild(self, fmt.Sprintf("gofit-memqos-%d-%s-%d", os.Getpid(), mode, rep))
	if err != nil {
		return tr, nil, err
	}
	r := &trialRun{cfg: cfg, node: node}
	defer r.cleanup()
	if err := r.groups(); err != nil {
		return tr, nil, err
	}
	var vals []string
	if mode == "auto" {
		if vals, err = applyAuto(r.node, r.ls, r.be, cfg); err != nil {
			return tr, nil, err
		}
	}
	url, svcDone, err := r.startService(ctx)
	if err != nil {
		return tr, nil, err
	}
	hogErr, restarts := r.startHog(ctx)
	if err := r.fillNode(ctx, hogErr); err != nil {
		return tr, nil, err
	}
	if err := r.measure(ctx, &tr, url, hogErr); err != nil {
		return tr, nil, err
	}
	tr.HogOOMs = int(restarts.Load())
	if err := r.events(&tr); err != nil {
		return tr, nil, err
	}
	select {
	case <-svcDone:
		tr.LSOOMKill = true
	default:
	}
	return tr, vals, nil
}

// trialRun is one trial's groups, and what undoes what it started, last
// first.
type trialRun struct {
	cfg          Config
	node, ls, be *manage.Group
	cleanups     []func()
}

// cleanup stops what the trial started and removes its groups.
func (r *trialRun) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.node.Remove(rctx)
}

// groups limits the node and makes its ls and be groups, ls limited.
func (r *trialRun) groups() error {
	if err := r.node.SetMemoryMax(r.cfg.NodeLimit); err != nil {
		return err
	}
	var err error
	if r.ls, err = manage.NewChild(r.node.Cgroups, "ls"); err != nil {
		return err
	}
	ls := r.ls
	r.cleanups = append(r.cleanups, func() { _ = ls.Remove(context.Background()) })
	if r.be, err = manage.NewChild(r.node.Cgroups, "be"); err != nil {
		return err
	}
	be := r.be
	r.cleanups = append(r.cleanups, func() { _ = be.Remove(context.Background()) })
	return r.ls.SetMemoryMax(r.cfg.LSLimit)
}

// startService starts the LS service (the lab's sample) in ls and waits
// until it answers: it gives its URL and a channel closed when it exits.
func (r *trialRun) startService(ctx context.Context) (string, <-chan struct{}, error) {
	cfg, ls := r.cfg, r.ls
	port, err := load.FreePort()
	if err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + port
	svc := ls.Command(cfg.Exe, cfg.SampleArgs(addr)...)
	svc.Env = append(load.CleanEnv(), fmt.Sprintf("GOMEMLIMIT=%d", cfg.LSLimit*9/10))
	// Added to, not replaced: on v2 Command starts the process in the
	// group through these attributes (CLONE_INTO_CGROUP).
	svc.SysProcAttr.Setpgid, svc.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	if err := svc.Start(); err != nil {
		return "", nil, err
	}
	svcDone := make(chan struct{})
	go func() { _ = svc.Wait(); close(svcDone) }()
	r.cleanups = append(r.cleanups, func() { _ = svc.Process.Kill(); <-svcDone })
	url := "http://" + addr + "/work"
	if err := load.WaitReady(ctx, load.Readiness{URL: url, Exited: svcDone}); err != nil {
		return "", nil, fmt.Errorf("the LS service: %w", err)
	}
	// The service must run in its own group, or the trial measures nothing.
	if pids, err := ls.PIDs(); err != nil || !slices.Contains(pids, svc.Process.Pid) {
		return "", nil, fmt.Errorf("the LS service (pid %d) is not in %s: %v %v", svc.Process.Pid, ls.Memory.Dir, pids, err)
	}
	return url, svcDone, nil
}

// startHog starts the BE hog in be. It is restarted whenever the OOM
// killer takes it, so the node stays overcommitted for the whole window:
// it gives the channel a failed start is sent on and the restarts.
func (r *trialRun) startHog(ctx context.Context) (<-chan error, *atomic.Int64) {
	cfg, be := r.cfg, r.be
	hctx, stopHog := context.WithCancel(ctx)
	var hogWG sync.WaitGroup
	restarts := new(atomic.Int64)
	hogErr := make(chan error, 1)
	hogWG.Add(1)
	go func() {
		defer hogWG.Done()
		for first := true; hctx.Err() == nil; first = false {
			if !first {
				restarts.Add(1)
			}
			cmd := be.Command(cfg.Exe, "node", HogCommand, "--bytes", fmt.Sprint(cfg.HogBytes))
			cmd.Env = load.CleanEnv()
			cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
			if err := cmd.Start(); err != nil {
				hogErr <- fmt.Errorf("start the BE hog: %w", err)
				return
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-hctx.Done():
				_ = cmd.Process.Kill()
				<-done
				return
			case <-done:
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	r.cleanups = append(r.cleanups, func() { stopHog(); hogWG.Wait() })
	return hogErr, restarts
}

// fillNode lets the hog fill the node: at least 2s, and until it holds a
// quarter of what it can (memory.high may stop it at half the node),
// however slow the machine (an emulated one is ~50x slower). A hog that
// never gets there is not running in its group, and the trial would
// measure nothing.
func (r *trialRun) fillNode(ctx context.Context, hogErr <-chan error) error {
	be := r.be
	fill := uint64(min(r.cfg.HogBytes, r.cfg.NodeLimit) / 4)
	time.Sleep(2 * time.Second)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		select {
		case err := <-hogErr:
			return err
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		ms, err := be.MemoryStats()
		if err != nil {
			return fmt.Errorf("the BE hog's group: %w", err)
		}
		if ms.Peak >= fill {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the BE hog did not fill %s: peak %d bytes after a minute, want %d", be.Memory.Dir, ms.Peak, fill)
		}
	}
}

// measure drives the open-loop load at the LS service and puts its
// figures in tr; it fails if a hog restart failed meanwhile (the node was
// not kept full).
func (r *trialRun) measure(ctx context.Context, tr *Trial, url string, hogErr <-chan error) error {
	ld := load.NewLoader(load.MaxOpenInFlight, nil)
	res := ld.Open(ctx, load.NewMix(load.Get(url, nil), 1), r.cfg.Rate, r.cfg.Duration)
	ld.Close()
	select {
	case err := <-hogErr: // a restart failed: the node was not kept full
		return err
	default:
	}
	// Failed and cut-short requests count in the latencies with the time
	// they took, so a service the OOM killer took is as slow as the
	// client's patience, not missing from the figures.
	tr.P50, tr.P99, tr.RPS, tr.Errors, tr.blocks = res.P50, res.P99, res.RPS, res.Errors, res.Blocks
	if res.Requests == 0 {
		// A service that answered nothing (killed at once) refuses
		// connections fast: it is as slow as the client's patience.
		ms := float64(load.RequestTimeout.Milliseconds())
		tr.P50, tr.P99 = ms, ms
	}
	return nil
}

// events puts in tr what the kernel counted in each group: the groups
// were made for this trial, so their counters are its own.
func (r *trialRun) events(tr *Trial) error {
	for _, c := range []struct {
		g   *manage.Group
		out *Events
	}{{r.ls, &tr.LS}, {r.be, &tr.BE}, {r.node, &tr.Node}} {
		ms, err := c.g.MemoryStats()
		if err != nil {
			return fmt.Errorf("read memory events: %w", err)
		}
		*c.out = Events{High: ms.HighHits, Max: ms.MaxHits, OOMKills: ms.OOMKills}
	}
	return nil
}

// applyAuto writes what the agent's auto policy gives an LS pod (the
// service) and a BE pod (the hog) on this node, with the node cgroup in
// the place of kubepods.
func applyAuto(node, ls, be *manage.Group, cfg Config) ([]string, error) {
	q := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.BinarySI) }
	lsPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ls", Namespace: "lab", UID: "ls"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "svc",
			Env:       []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: fmt.Sprint(cfg.LSLimit * 9 / 10)}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q(cfg.LSRequest)}, Limits: corev1.ResourceList{corev1.ResourceMemory: q(cfg.LSLimit)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	bePod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "be", Namespace: "lab", UID: "be"},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "hog"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	res, err := memqos.Compute(memqos.Input{Pods: []*corev1.Pod{lsPod, bePod}, Policy: memqos.PolicyAuto,
		NodeAllocatable: cfg.NodeLimit, CgroupVersion: node.Version(), PageSize: int64(os.Getpagesize())})
	if err != nil {
		return nil, err
	}
	vals := memqos.Values(node.Memory.Dir, memqos.LevelKubepods, res.Kubepods)
	for _, p := range res.Pods {
		g := ls
		if p.Name == "be" {
			g = be
		}
		vals = append(vals, memqos.Values(g.Memory.Dir, memqos.LevelQoS, p.Containers[0].Settings)...)
	}
	w := manage.NewWriter(nil, node.Version() == 1)
	ar := w.Apply(vals)
	if len(ar.Errors) > 0 {
		return nil, errors.Join(ar.Errors...)
	}
	// Read everything back: a value the kernel did not keep would make
	// the "auto" trials silently measure something else.
	check := manage.NewWriter(nil, node.Version() == 1)
	check.DryRun = true
	if again := check.Apply(vals); len(again.Changed) > 0 || len(again.Errors) > 0 {
		var errs []error
		for _, c := range again.Changed {
			errs = append(errs, fmt.Errorf("%s holds %d after writing %d", c.Path(), c.Old, c.Value.Value))
		}
		return nil, errors.Join(append(errs, again.Errors...)...)
	}
	var out []string
	for _, c := range ar.Changed {
		out = append(out, fmt.Sprintf("%s/%s=%d (%s)", filepath.Base(c.Dir), c.File, c.Value.Value, c.Reason))
	}
	for _, m := range w.MissingFiles() {
		out = append(out, m+": not on this kernel")
	}
	return out, nil
}

// change is auto relative to off (ratio - 1) with its 95% bootstrap
// interval, resampling trials and one-second blocks within them, and the
// verdict by the lab's rule. With too few trials or blocks for an interval
// both ends are the estimate and the verdict is "".
func change(boot *stats.Bootstrap, auto, off stats.Sample, st stats.Stat) ([3]float64, string) {
	r := boot.Ratio(auto, off, st)
	if !r.Finite() {
		est := r.Value - 1
		if math.IsInf(est, 0) || math.IsNaN(est) {
			est = 0
		}
		return [3]float64{est, est, est}, ""
	}
	v, _ := stats.Verdict(r, st, st.Margin())
	return [3]float64{r.Value - 1, r.Low - 1, r.High - 1}, v
}

// WriteSummary prints the comparison beside koordinator's published one.
func WriteSummary(w io.Writer, r *Results) {
	fmt.Fprintf(w, "memory QoS experiment on cgroup v%d: %s\n", r.CgroupVersion, r.Config)
	for _, v := range r.Values {
		fmt.Fprintf(w, "  auto: %s\n", v)
	}
	fmt.Fprintf(w, "QoS off:  p99 %.2fms, %.1f ok/s (mean of %d)\n", r.Off.P99, r.Off.RPS, len(r.Trials)/2)
	fmt.Fprintf(w, "QoS auto: p99 %.2fms, %.1f ok/s\n", r.Auto.P99, r.Auto.RPS)
	for _, mode := range []string{"off", "auto"} {
		var n, killed, hogKills int
		var beHigh uint64
		for _, t := range r.Trials {
			if t.Mode != mode {
				continue
			}
			n++
			if t.LSOOMKill {
				killed++
			}
			hogKills += t.HogOOMs
			beHigh += t.BE.High
		}
		fmt.Fprintf(w, "  %-4s kernel: LS OOM-killed in %d of %d trials; hog OOM-killed %d times; BE over memory.high %d times\n",
			mode, killed, n, hogKills, beHigh)
	}
	verdict := func(v string) string {
		switch v {
		case "":
			return "too few trials for an interval: no conclusion"
		case stats.Same:
			return "no difference shown: the interval includes zero"
		}
		return v + ": the interval excludes zero"
	}
	fmt.Fprintf(w, "p99 latency %+.1f%% [95%% CI %+.1f%%, %+.1f%%] (%s); koordinator published -7.9%%\n",
		100*r.P99Change[0], 100*r.P99Change[1], 100*r.P99Change[2], verdict(r.P99Verdict))
	fmt.Fprintf(w, "throughput  %+.1f%% [95%% CI %+.1f%%, %+.1f%%] (%s); koordinator published +8.7%%\n",
		100*r.RPSChange[0], 100*r.RPSChange[1], 100*r.RPSChange[2], verdict(r.RPSVerdict))
}

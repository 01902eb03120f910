//go:build !nokube

package pods

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/kube/agent"
)

// The pod runner: `gofit lab --kube` runs each trial as an ordinary pod
// through the API server, on a node picked by --node-selector, one trial
// per node at a time; the load comes from a load pod (gofit lab-load) on
// another node where there is one; the counters come from the gofit node
// agent on the trial's node (agent.StatsHandler): read by the load pod
// at a CPU window's very edges over the pod network, and through the API
// server's pod proxy after a memory trial. Every object a run makes is owned by one ConfigMap,
// so deleting it (as the run does when it ends, and the garbage collector
// when the run was killed) deletes the rest.

const (
	// podPort is {port} in a pod: each trial has its own network
	// namespace, so every trial can use the same one.
	podPort = 8080
	// The load pod's requests: a share of a node's CPU and memory, no
	// limit (a generator throttled by a quota would time the quota).
	loadCPURequest    = "250m"
	loadMemoryRequest = "128Mi"
	loadPort          = 8081
	labelApp          = "app.kubernetes.io/name"
	labelRun          = "gofit.dev/lab-run"
	labelRole         = "gofit.dev/lab-role"
	appName           = "gofit-lab"
	agentLabel        = "app.kubernetes.io/name=gofit-node"
	// annHeartbeat is the owner's last sign of life (RFC 3339), renewed
	// every heartbeatEvery: a run killed outright (SIGKILL, a lost
	// machine) stops renewing, and the next run in the namespace deletes
	// its owner, and with it the rest, once it is staleAfter old.
	annHeartbeat   = "gofit.dev/lab-heartbeat"
	heartbeatEvery = 30 * time.Second
	staleAfter     = 3 * time.Minute
	roleTrial      = "trial"
	roleLoad       = "load"
	podSchedule    = 5 * time.Minute // scheduling and pulling, not counted against readiness
)

// runNamespace is where the run's pods go: --namespace, else
// DefaultNamespace (never the kubeconfig context's).
func runNamespace(ko Options) string {
	if ko.Namespace != "" {
		return ko.Namespace
	}
	return DefaultNamespace
}

// defaultAgentNamespaces are where deploy/node and the chart run the
// agent, tried in order when --agent-namespace is not given.
var defaultAgentNamespaces = []string{"gofit-node", "gofit-system"}

// podTarget is what a trial pod runs: an image with its arguments (nil:
// the image's own cmd) and env, serving on its pod IP.
type podTarget struct {
	image string
	flag  string // the flag that named image, for errors: "--image" or "--kube-image"
	args  []string
	env   []corev1.EnvVar
	mix   []load.Target // {port} and the host still to set
	ready string        // the readiness URL, the same
}

// podRunner is the runner of `gofit lab --kube`. Its parts: the run's
// owner (the object every other is owned by, deleted at close), its pods
// (their spec and their life through the API server), the trial nodes
// (one trial on each at a time), the node agents (a trial's counters and
// cgroup) and the load pod (every trial's load).
type podRunner struct {
	cfg      trial.Study
	cs       kubernetes.Interface
	ns       string
	target   podTarget
	progress io.Writer
	owner    *runOwner
	pods     *runPods
	nodes    *trialNodes
	agents   *nodeAgents
	load     *loadPod
	mu       sync.Mutex
	slowest  time.Duration // the slowest start without a memory limit so far
	// info is what the study is designed by: the trial nodes' CPUs, the
	// target's binary (Open read them).
	info trial.Info
}

// newPodRunner connects, makes the run's owner and its load pod; the
// caller must call close, which deletes everything.
func newPodRunner(ctx context.Context, cfg trial.Study, ko Options, progress io.Writer) (*podRunner, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if ko.Kubeconfig != "" {
		rules.ExplicitPath = ko.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: ko.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	rc.UserAgent = "gofit-lab"
	ns := runNamespace(ko)
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	sel, err := parseSelector(ko.NodeSelector)
	if err != nil {
		return nil, err
	}
	agentNS := defaultAgentNamespaces
	if ko.AgentNamespace != "" {
		agentNS = []string{ko.AgentNamespace}
	}
	owner := &runOwner{cs: cs, ns: ns, progress: progress}
	r := &podRunner{cfg: cfg, cs: cs, ns: ns, progress: progress, owner: owner,
		pods:   &runPods{cs: cs, ns: ns, owner: owner, selector: sel, budget: cfg.Budget},
		nodes:  &trialNodes{cs: cs, selector: sel},
		agents: newNodeAgents(cs, ns, agentNS, cmp.Or(ko.AgentAccount, DefaultAgentAccount), cfg.Budget),
		load:   &loadPod{cs: cs, ns: ns, image: ko.Image}}
	if r.target, err = podTargetOf(cfg, ko.Image); err != nil {
		return nil, err
	}
	if err := r.start(ctx); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// podTargetOf is the trial pods' container: --image with --args, or the
// embedded sample from the gofit image.
func podTargetOf(cfg trial.Study, gofitImage string) (podTarget, error) {
	port := strconv.Itoa(podPort)
	t := podTarget{env: []corev1.EnvVar{{Name: "PORT", Value: port}}}
	if cfg.ImageRef == "" {
		if gofitImage == "" {
			return t, usagef("--kube-image: no gofit image to run the sample and the load from (this build has no release version to default to)")
		}
		t.image, t.flag, t.args = gofitImage, "--kube-image", []string{trial.SampleCommand, ":" + port}
		t.mix, t.ready = load.Get("http://127.0.0.1:{port}/work", nil), "http://127.0.0.1:{port}/work"
		return t, nil
	}
	if strings.HasPrefix(cfg.ImageRef, "oci:") || strings.HasPrefix(cfg.ImageRef, "oci-archive:") || strings.HasPrefix(cfg.ImageRef, "docker-archive:") {
		return t, usagef("--image %s: --kube runs images the nodes pull; give a registry reference", cfg.ImageRef)
	}
	if gofitImage == "" {
		return t, usagef("--kube-image: no gofit image for the load pod (this build has no release version to default to)")
	}
	t.image, t.flag = cfg.ImageRef, "--image"
	if cfg.ImageArgs != nil {
		t.args = make([]string, len(cfg.ImageArgs))
		for i, a := range cfg.ImageArgs {
			t.args[i] = strings.ReplaceAll(a, "{port}", port)
		}
	}
	t.mix, t.ready = cfg.Target.Mix(), cfg.Target.Ready()
	return t, nil
}

// onPod points a URL at a pod: {port} becomes podPort and the host the
// pod's IP, the port kept.
func onPod(raw, ip string) (string, string, error) {
	u, err := url.Parse(strings.ReplaceAll(raw, "{port}", strconv.Itoa(podPort)))
	if err != nil {
		return "", "", err
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	u.Host = net.JoinHostPort(ip, port)
	return u.String(), port, nil
}

func runID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// start makes the owner, finds the nodes and starts the load pod.
func (r *podRunner) start(ctx context.Context) error {
	r.owner.id = runID()
	tok := make([]byte, 16)
	rand.Read(tok)
	r.load.token = hex.EncodeToString(tok)
	if err := r.owner.create(ctx); err != nil {
		return err
	}
	loadNode, listed, err := r.nodes.choose(ctx)
	if err != nil {
		return err
	}
	if err := r.load.start(ctx, r.pods, loadNode, listed); err != nil {
		return err
	}
	fmt.Fprintf(r.progress, "lab: pods in %s (run %s): trials on %s, one at a time each; load from %s on %s\n",
		r.ns, r.owner.id, nodeList(r.nodes.names), r.load.pod.Name, r.load.on)
	return nil
}

// close deletes the run's owner, and with it every pod of the run.
func (r *podRunner) close() error { return r.owner.close() }

// Info says one trial on each trial node at a time, and what a pod's
// start cost before any trial pod started: the load pod's, from its
// creation to Ready (the planner keeps the memory study's time back at
// this price until trials measure theirs). Open read the rest.
func (r *podRunner) Info() trial.Info {
	info := r.info
	info.Parallel, info.StartCost = len(r.nodes.names), r.load.took
	return info
}

// where names the nodes the trials ran on, their kernels and CPUs.
func (r *podRunner) where() string {
	used := r.nodes.usedNodes()
	var parts []string
	for _, n := range used {
		info := r.agents.node(n)
		parts = append(parts, fmt.Sprintf("%s (kernel %s, %d× %s)", n, info.Kernel, info.CPUs, info.CPUModel))
	}
	if len(parts) == 0 {
		parts = []string{"no node yet"}
	}
	load := "load from pod " + r.load.name() + " on " + r.load.on
	if slices.Contains(used, r.load.on) {
		load += ", a trial node: it shares the trials' CPUs"
	} else {
		load += ", another node"
	}
	return fmt.Sprintf("pods in namespace %s on %s; %s", r.ns, strings.Join(parts, ", "), load)
}

// placement is the report's isolation line for a pod run.
func (r *podRunner) placement() *result.Placement {
	shared := slices.Contains(r.nodes.usedNodes(), r.load.on)
	p := &result.Placement{Isolated: !shared}
	if shared {
		p.Note = "the load pod ran on a trial node (no other node was available): it competes with the trial for the node's CPUs"
	} else {
		p.Note = "one trial per node at a time; the load pod on node " + r.load.on + ", apart from every trial"
	}
	return p
}

// trialPod is a started trial: its pod, Ready, and the mix pointed at it.
type trialPod struct {
	pod  *corev1.Pod
	node string
	mix  []wireTarget
	took time.Duration
	vars string // the target's /debug/vars on its pod IP, on its ready URL's scheme and port
}

// startTrial takes a node, creates the trial pod there and waits until
// it is ready; the caller must call r.stopTrial.
func (r *podRunner) startTrial(ctx context.Context, env map[string]string, cpuLimit, cpuRequest float64, memLimit int64, ready time.Duration) (*trialPod, error) {
	node, err := r.nodes.take(ctx)
	if err != nil {
		return nil, err
	}
	readyURL, _, err := onPod(r.target.ready, "0.0.0.0")
	if err != nil {
		r.nodes.give(node)
		return nil, err
	}
	u, _ := url.Parse(readyURL)
	spec := r.pods.pod(roleTrial, node, r.target, env, cpuLimit, cpuRequest, memLimit, u)
	p, err := r.cs.CoreV1().Pods(r.ns).Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		r.nodes.give(node)
		return nil, fmt.Errorf("create a trial pod: %w", err)
	}
	tp := &trialPod{pod: p, node: node}
	t0 := time.Now()
	p, err = r.pods.waitReady(ctx, p.Name, r.target.flag+" "+r.target.image, ready)
	if p != nil {
		tp.pod = p
	}
	tp.took = time.Since(t0)
	if err != nil {
		return tp, err
	}
	if tp.node == "" {
		tp.node = p.Spec.NodeName
	}
	r.nodes.ranOn(p.Spec.NodeName)
	for _, t := range r.target.mix {
		u, _, err := onPod(t.URL, p.Status.PodIP)
		if err != nil {
			return tp, err
		}
		t.URL = u
		tp.mix = append(tp.mix, wireTarget{Target: t, Body: t.Body})
	}
	// /debug/vars beside the ready URL, as the local sandbox finds it.
	v, _, err := onPod(r.target.ready, p.Status.PodIP)
	if err != nil {
		return tp, err
	}
	vu, _ := url.Parse(v)
	tp.vars = vu.Scheme + "://" + vu.Host + "/debug/vars"
	return tp, nil
}

// stopTrial deletes the trial's pod and frees its node.
func (r *podRunner) stopTrial(tp *trialPod) {
	if tp == nil {
		return
	}
	r.pods.delete(tp.pod.Name)
	r.nodes.give(tp.node)
}

func (r *podRunner) CPU(ctx context.Context, c trial.CPUConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	ready := r.cfg.Target.ReadyTimeout
	if ready <= 0 {
		ready = sandbox.DefaultReadyTimeout
	}
	tp, err := r.startTrial(ctx, c.Env, c.Quota, c.Request, 0, ready)
	defer r.stopTrial(tp)
	if err != nil {
		return result.CPUCell{}, err
	}
	counters, counterAuth, err := r.agents.counters(ctx, tp.pod.Spec.NodeName, tp.pod.UID)
	if err != nil {
		return result.CPUCell{}, err
	}
	// One request: the warm-up and the window on the same connections,
	// the counters and /debug/vars read by the load pod right at the
	// window's edges, so no API server round trip falls inside it.
	q := loadRequest{Targets: tp.mix, Seed: r.cfg.Seed, Open: mode == result.Open, Rate: offered, Window: window, Warmup: r.cfg.Warmup,
		Concurrency: r.cfg.Concurrency, InFlight: r.cfg.Concurrency, Marks: []string{counters, tp.vars}, MarkAuth: []string{counterAuth, ""}}
	if mode == result.Open {
		q.InFlight = load.MaxOpenInFlight
	} else {
		q.Requests = r.cfg.Requests
	}
	rp, err := r.load.drive(ctx, q)
	if err != nil {
		return result.CPUCell{}, err
	}
	if ctx.Err() != nil {
		return result.CPUCell{}, ctx.Err()
	}
	if len(rp.Marks) != len(q.Marks) {
		return result.CPUCell{}, fmt.Errorf("--kube-image %s: its load pod answered %d of the window's %d counter reads: it is older than this gofit (run the image of this release, or build one from this source)", r.load.image, len(rp.Marks), len(q.Marks))
	}
	var s0, s1 agent.PodCgroup
	if m := rp.Marks[0]; m.Error != "" || json.Unmarshal(m.Start, &s0) != nil || json.Unmarshal(m.End, &s1) != nil {
		return result.CPUCell{}, fmt.Errorf("the load pod %s reads the trial's counters from the gofit node agent at %s at the window's edges, and could not (%s): let pods in namespace %s reach the agent's metrics port (a NetworkPolicy?)",
			r.load.pod.Name, counters, m.Error, r.ns)
	}
	procs := c.Procs
	w := trial.Window{Load: rp.Result, Periods: s1.CPU.Periods - s0.CPU.Periods, ThrottledPeriods: s1.CPU.ThrottledPeriods - s0.CPU.ThrottledPeriods,
		ThrottledSec: s1.CPU.ThrottledSeconds - s0.CPU.ThrottledSeconds, UsedSec: s1.CPU.UsageSeconds - s0.CPU.UsageSeconds, WindowSec: rp.WindowSeconds,
		Isolated: r.load.on != tp.pod.Spec.NodeName}
	if m := rp.Marks[1]; m.Error == "" {
		v0, err0 := sandbox.ParseVars(bytes.NewReader(m.Start), "pod "+tp.pod.Name+" /debug/vars")
		v1, err1 := sandbox.ParseVars(bytes.NewReader(m.End), "pod "+tp.pod.Name+" /debug/vars")
		if err0 == nil && err1 == nil {
			w.V0, w.V1 = v0, v1
			if v0.GOMAXPROCS > 0 {
				procs = v0.GOMAXPROCS // what the target really runs with
			}
		}
	}
	cur, _ := r.cs.CoreV1().Pods(r.ns).Get(ctx, tp.pod.Name, metav1.GetOptions{})
	w.Exited = cur != nil && podEnded(cur) != ""
	return trial.Cell(c, mode, offered, rep, procs, w), nil
}

// Memory runs the specs side by side where there are nodes for them, one
// per node; with fewer nodes, the rest wait for one (trials never share
// a node's CPUs).
//
// With a node for each, their loads start together once every pod is
// ready (or failed to be), as the sandbox starts a pair and then drives
// both: the pair's two windows see the same moment of the cluster. A
// barrier on one node would wait forever for the second trial's slot.
func (r *podRunner) Memory(ctx context.Context, specs ...trial.MemSpec) []trial.MemRun {
	out := make([]trial.MemRun, len(specs))
	sideBySide(len(specs), len(specs) > 1 && len(specs) <= len(r.nodes.names), func(i int, started func()) {
		out[i] = r.memTrial(ctx, specs[i], started)
	})
	return out
}

// sideBySide runs n trials, each on its own goroutine. run(i, started)
// calls started once its trial's pod has started (or failed to); with
// together, started returns only when every trial has called it (or
// returned), so that their loads begin together.
func sideBySide(n int, together bool, run func(i int, started func())) {
	var gate, wg sync.WaitGroup
	gate.Add(n)
	for i := range n {
		wg.Go(func() {
			var once sync.Once
			done := func() { once.Do(gate.Done) }
			defer done() // a run that never calls started holds no one
			run(i, func() {
				done()
				if together {
					gate.Wait()
				}
			})
		})
	}
	wg.Wait()
}

// memTrial runs one memory trial, calling started between its pod's
// start and its load.
func (r *podRunner) memTrial(ctx context.Context, s trial.MemSpec, started func()) trial.MemRun {
	t := result.MemTrial{LimitBytes: s.Limit}
	began := time.Now()
	r.mu.Lock()
	slowest := r.slowest
	r.mu.Unlock()
	wait := trial.StartWait(r.cfg.Target, s.Limit, slowest)
	tp, err := r.startTrial(ctx, s.Env, s.CPU, 0, s.Limit, wait)
	defer r.stopTrial(tp)
	started()
	ng := trial.NonGoProbe{Err: errors.New("not measured in pods: the lab reads the target's memory maps on this machine only")}
	if err != nil {
		t.Seconds = time.Since(began).Seconds()
		t.Outcome, t.Detail = result.Errored, err.Error()
		var se *sandbox.StartError
		switch {
		case tp != nil && oomKilled(tp.pod):
			t.Outcome, t.Detail = result.OOMKilled, "OOM-killed while starting: "+podEnded(tp.pod)
		case errors.As(err, &se) && se.TimedOut && s.Limit > 0 && slowest > 0:
			t.Outcome = result.Stalled
			t.Detail = fmt.Sprintf("not ready within %v (its slowest start without a limit took %v)", wait, slowest.Round(10*time.Millisecond))
		}
		return trial.MemRun{Trial: t, NonGo: ng}
	}
	if s.Limit == 0 {
		r.mu.Lock()
		r.slowest = max(r.slowest, tp.took)
		r.mu.Unlock()
	}
	ml := s.Load
	q := loadRequest{Targets: tp.mix, Seed: r.cfg.Seed, MinRate: ml.ProbeRPS * trial.StallShare}
	if ml.Rate > 0 {
		q.Open, q.Rate, q.Window, q.InFlight = true, ml.Rate, ml.Window, load.MaxOpenInFlight
	} else {
		q.Requests, q.Window, q.Concurrency, q.InFlight = ml.Requests, ml.MaxDur, trial.MemConcurrency, trial.MemConcurrency
	}
	rp, lerr := r.load.drive(ctx, q)
	res := rp.Result
	st, serr := r.agents.cgroupOf(ctx, tp.pod)
	cur := r.pods.settle(ctx, tp.pod, lerr != nil || res.Errors > 0 || res.Stalled)
	t.RPS, t.P99, t.Errors = res.RPS, res.P99, res.Errors
	t.PeakBytes, t.PageCacheBytes, t.MajorFaults, t.LimitHits = st.Memory.Peak, st.Memory.File, st.Memory.MajorFaults, st.Memory.MaxHits
	t.Seconds = time.Since(began).Seconds()
	switch {
	case oomKilled(cur) || st.Memory.OOMKills > 0:
		t.Outcome, t.Detail = result.OOMKilled, fmt.Sprintf("OOM-killed (%d kills in the pod's cgroup; the kubelet says %q)", st.Memory.OOMKills, podEnded(cur))
	case lerr != nil:
		t.Outcome, t.Detail = result.Errored, lerr.Error()
	case res.Stalled:
		t.Outcome, t.Detail = result.Stalled, fmt.Sprintf("no request completed for %v while major faults reached %d", 2*load.StallWindow, st.Memory.MajorFaults)
	case podEnded(cur) != "":
		t.Outcome, t.Detail = result.Errored, "the target exited during the load: "+podEnded(cur)
	case float64(res.Errors) > trial.MaxErrorShare*float64(res.Errors+res.Requests) || res.Requests == 0:
		t.Outcome, t.Detail = result.Errored, fmt.Sprintf("%d errors in %d requests (%s)", res.Errors, res.Errors+res.Requests, res.ErrorSummary())
	case serr != nil:
		t.Outcome, t.Detail = result.Errored, "could not read the pod's cgroup: "+serr.Error()
	default:
		t.Outcome = result.OK
	}
	return trial.MemRun{Trial: t, Load: res, NonGo: ng}
}

// Where names the nodes the trials ran on and the load pod, with the
// first trial node's facts as the machine, the load's placement and the
// target as the image the pods ran.
func (r *podRunner) Where() trial.Where {
	e := &trial.Remote{Placement: r.placement(),
		Command: strings.Join(append([]string{r.target.image}, r.target.args...), " "), Image: r.target.image,
		PageCache: "as the node has it (pods start with whatever page cache the node holds)"}
	// The generator is the load pod, not this process.
	if cpu, err := r.load.cpuSeconds(); err == nil {
		e.GeneratorCPUSeconds = &cpu
	}
	if used := r.nodes.usedNodes(); len(used) > 0 {
		n := r.agents.node(used[0])
		e.Node = &result.Machine{Host: used[0], Kernel: n.Kernel, CPUModel: n.CPUModel, CPUs: n.CPUs, CgroupVersion: n.Cgroup}
		if r.nodes.cpus == 0 {
			e.NCPU = max(n.CPUs, 1) // else as the study was designed: the fewest of the trial nodes'
		}
	}
	return trial.Where{Runner: r.where(), Remote: e}
}

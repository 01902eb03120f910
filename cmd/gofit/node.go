//go:build !nokube

package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/buildinfo"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/qoslab"
	"github.com/gofit-dev/gofit/kube/agent"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// runNode is `gofit node`: the memory-QoS agent (default), `plan`, the
// `experiment` and the hidden `memhog` the experiment starts.
func runNode(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "plan":
			return runNodePlan(args[1:], stdout, stderr)
		case "reset":
			return runNodeReset(args[1:], stdout, stderr)
		case "experiment":
			return runNodeExperiment(args[1:], stdout, stderr)
		case qoslab.HogCommand:
			return runNodeHog(args[1:], stderr)
		}
	}
	o, err := parseNodeFlags(args, stderr)
	if err != nil {
		return err
	}
	return runNodeAgent(o, stderr)
}

// nodeFlags are the agent's flags, checked.
type nodeFlags struct {
	root, cgRoot, driver, nodeName string
	cmNS, cmName                   string
	noCM                           bool
	policy                         memqos.Policy
	ratio                          float64
	interval, syncTimeout          time.Duration
	kubeletConfig, kubeletMode     string
	takeOver                       bool
	overrides                      memqos.PodOverrides
	resetAfter                     time.Duration
	daemonSet                      string
	metricsAddr                    string
	metricsSecure                  bool
	kubeconfig                     string
	logLevel                       slog.Level
}

func parseNodeFlags(args []string, stderr io.Writer) (nodeFlags, error) {
	fs := newFlags("node", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gofit node [flags]            run the memory-QoS agent (a DaemonSet, one per node)")
		fmt.Fprintln(stderr, "       gofit node plan [flags]       print the values the agent would write; change nothing")
		fmt.Fprintln(stderr, "       gofit node reset [flags]      undo what the agent wrote on this node (uninstall)")
		fmt.Fprintln(stderr, "       gofit node experiment [flags] LS service beside a BE memory hog, QoS off vs auto")
		fs.PrintDefaults()
	}
	root := fs.String("root", "/", "host root: cgroups are read at ROOT/sys/fs/cgroup")
	cgRoot := fs.String("cgroup-root", "/", "the kubelet's --cgroup-root")
	driver := fs.String("cgroup-driver", "", "the kubelet's cgroup driver, systemd or cgroupfs (default: whichever pod root exists)")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME, from the downward API)")
	cmNS := fs.String("configmap-namespace", "koordinator-system", "namespace of the koordinator ConfigMap")
	cmName := fs.String("configmap-name", "slo-controller-config", "name of the ConfigMap with resource-qos-config and memory-qos")
	noCM := fs.Bool("no-configmap", false, "read no ConfigMap: run on the built-in defaults (every class disabled). Without it a ConfigMap that is missing or forbidden is a bad one: nothing is written")
	policy := fs.String("policy", "default", "policy for pods without a memoryQOS annotation: default (follow the ConfigMap) or auto")
	ratio := fs.Float64("max-protected-ratio", 0.8, "cap on the node's total memory.min, as a share of allocatable memory")
	interval := fs.Duration("interval", agent.DefaultInterval, "reconcile interval when nothing changes")
	syncTimeout := fs.Duration("sync-timeout", agent.DefaultSyncTimeout, "how long to wait for the first list of the node's pods and the node before failing")
	kubeletConfig := fs.String("kubelet-config", "", "the kubelet's config file as mounted (e.g. /host/var/lib/kubelet/config.yaml), read for its own Memory QoS")
	kubeletMode := fs.String("kubelet-memory-qos", agent.KubeletAuto, kubeletModeUsage)
	takeOver := fs.Bool("take-over-kubelet-memory-qos", false, "write memory.min/low/high even at levels the kubelet's own Memory QoS writes (default: leave those to it)")
	overrides := fs.String("pod-overrides", memqos.DefaultPodOverrides, podOverridesUsage)
	resetAfter := fs.Duration("reset-after", agent.DefaultResetAfter, "how long a pod cgroup must be empty and out of the API's view before its values go back to the kernel defaults")
	daemonSet := fs.String("daemonset", "", "the agent's DaemonSet, in namespace $POD_NAMESPACE: when it is gone or being deleted as the agent stops (an uninstall, not a rolling update), the agent resets what it wrote (empty: never)")
	metricsAddr := fs.String("metrics-addr", ":9464", "address for /metrics and /healthz (empty: off)")
	metricsSecure := fs.Bool("metrics-secure", false, "serve --metrics-addr over TLS (a certificate made at start), and /metrics and /v1/ only to callers whose token the API server accepts and who may get the path (TokenReview, SubjectAccessReview); /healthz and /livez stay open")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: in-cluster config)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return nodeFlags{}, err
	}
	if fs.NArg() > 0 {
		return nodeFlags{}, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	pol, err := parsePolicy(*policy)
	if err != nil {
		return nodeFlags{}, err
	}
	if err := checkRatio(*ratio); err != nil {
		return nodeFlags{}, err
	}
	ov, err := parsePodOverrides(*overrides)
	if err != nil {
		return nodeFlags{}, err
	}
	if *resetAfter < time.Second {
		return nodeFlags{}, fmt.Errorf("%w: --reset-after %v: must be at least 1s", errUsage, *resetAfter)
	}
	if *interval < time.Second {
		return nodeFlags{}, fmt.Errorf("%w: --interval %v: must be at least 1s", errUsage, *interval)
	}
	if *syncTimeout < time.Second {
		return nodeFlags{}, fmt.Errorf("%w: --sync-timeout %v: must be at least 1s", errUsage, *syncTimeout)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return nodeFlags{}, fmt.Errorf("%w: --log-level %q: %v", errUsage, *logLevel, err)
	}
	return nodeFlags{root: *root, cgRoot: *cgRoot, driver: *driver, nodeName: *nodeName, cmNS: *cmNS, cmName: *cmName, noCM: *noCM,
		policy: pol, ratio: *ratio, interval: *interval, syncTimeout: *syncTimeout, kubeletConfig: *kubeletConfig, kubeletMode: *kubeletMode,
		takeOver: *takeOver, overrides: ov, resetAfter: *resetAfter, daemonSet: *daemonSet, metricsAddr: *metricsAddr,
		metricsSecure: *metricsSecure, kubeconfig: *kubeconfig, logLevel: level}, nil
}

// runNodeAgent runs the agent until a signal, then, with --daemonset,
// resets what it wrote if the agent is being uninstalled.
func runNodeAgent(o nodeFlags, stderr io.Writer) error {
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	// client-go reports list and watch failures (a forbidden ConfigMap,
	// say) through klog: the same JSON log, not a second format.
	klog.SetSlogLogger(log)
	build := buildinfo.Read()
	log.Info("gofit node", "version", build.Version, "commit", build.Commit, "go", build.GoVersion)

	layout, err := agent.DetectDriver(o.root, o.cgRoot, o.driver)
	if err != nil {
		return err
	}
	if err := layout.Writable(); err != nil {
		return err
	}
	kernel, err := agent.KernelRelease()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	cfg.UserAgent = "gofit-node"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(build.Collector())
	m, err := agent.NewMetrics(reg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := agent.New(layout, agent.Options{Policy: o.policy, MaxProtectedRatio: o.ratio, KernelRelease: kernel, TakeOverKubelet: o.takeOver,
		PodOverrides: &o.overrides, ResetAfter: o.resetAfter, Log: log, Metrics: m})
	if o.metricsAddr != "" {
		srv, err := serveNode(o, a, layout, reg, cfg, log)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	var dsUID types.UID
	podNS := os.Getenv("POD_NAMESPACE")
	if o.daemonSet != "" {
		if podNS == "" {
			return fmt.Errorf("%w: --daemonset needs POD_NAMESPACE (from the downward API)", errUsage)
		}
		// The UID tells a DaemonSet deleted and created again from the
		// one this agent belongs to; unknown, it is not compared.
		if ds, err := cs.AppsV1().DaemonSets(podNS).Get(ctx, o.daemonSet, metav1.GetOptions{}); err == nil {
			dsUID = ds.UID
		}
	}
	if err := a.Run(ctx, cs, agent.Source{NodeName: o.nodeName, ConfigMapNamespace: o.cmNS, ConfigMapName: o.cmName, NoConfigMap: o.noCM, Interval: o.interval,
		SyncTimeout: o.syncTimeout, KubeletConfig: o.kubeletConfig, KubeletMode: o.kubeletMode}); err != nil || o.daemonSet == "" {
		return err
	}
	// Stopped by a signal: an uninstall resets, anything else keeps every
	// value (a rolling update must not drop protection).
	checkCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	uninstall, why := agent.Uninstalling(checkCtx, cs, podNS, o.daemonSet, dsUID)
	log.Info("stopping", "uninstall", uninstall, "reason", why)
	if !uninstall {
		return nil
	}
	rep := a.Reset()
	log.Info("reset to kernel defaults", "changed", len(rep.Apply.Changed), "errors", len(rep.Apply.Errors))
	return errors.Join(rep.Apply.Errors...)
}

// serveNode serves --metrics-addr: /metrics, the pod cgroup stats under
// /v1/, /healthz and /livez; over TLS and behind the API server's
// authorization with --metrics-secure.
func serveNode(o nodeFlags, a *agent.Agent, layout *agent.Layout, reg *prometheus.Registry, cfg *rest.Config, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// Read-only pod cgroup counters and node facts for `gofit lab
	// --kube`, reached through the API server's pod proxy.
	mux.Handle("/v1/", layout.StatsHandler())
	// Healthy while reconcile passes complete: before the first one
	// (the API not listed yet) and after three missed intervals it
	// says why with a 503, so the probes stop passing a stuck agent.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		text, err := a.Health(time.Now(), 3*o.interval)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, text+"\n")
	})
	// Alive while the loop comes round, whatever it writes: the
	// liveness and startup probes ask this, so that a bad ConfigMap
	// (503 on /healthz, the agent unready) does not crash-loop it.
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Live(time.Now(), 3*o.interval+o.syncTimeout); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	var h http.Handler = mux
	if o.metricsSecure {
		if h, err = agent.Guarded(cfg, mux, logr.FromSlogHandler(log.Handler()), "/healthz", "/livez"); err != nil {
			ln.Close()
			return nil, fmt.Errorf("--metrics-secure: %w", err)
		}
		host, _ := os.Hostname()
		tc, err := agent.SelfSignedTLS(host)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("--metrics-secure: %w", err)
		}
		ln = tls.NewListener(ln, tc)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return srv, nil
}

func runNodeReset(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("node reset", stderr)
	root := fs.String("root", "/", "host root: cgroups are read at ROOT/sys/fs/cgroup")
	cgRoot := fs.String("cgroup-root", "/", "the kubelet's --cgroup-root")
	driver := fs.String("cgroup-driver", "", "the kubelet's cgroup driver, systemd or cgroupfs (default: whichever pod root exists)")
	dryRun := fs.Bool("dry-run", false, "print the writes, in gofit node plan's format; change nothing")
	asJSON := fs.Bool("json", false, "print JSON")
	kf := kubeletFlags(fs, "the kubelet's config file, read for its own Memory QoS (default: ROOT/"+defaultKubeletConfig+" when it exists and --kubelet-memory-qos is not given)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	// As the agent would: the kubelet's own values stay its own, so
	// a reset must know what it writes without being told. Its config
	// file is where kubeadm and most installers put it.
	if *kf.config == "" && *kf.mode == agent.KubeletAuto {
		if def := filepath.Join(*root, defaultKubeletConfig); fileExists(def) {
			*kf.config = def
		}
	}
	k, err := kf.qos()
	if err != nil {
		return err
	}
	layout, err := agent.DetectDriver(*root, *cgRoot, *driver)
	if err != nil {
		return fmt.Errorf("--root: %w", err)
	}
	a := agent.New(layout, agent.Options{DryRun: *dryRun, Kubelet: k})
	rep := a.Reset()
	plan := a.PlanOf(rep)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(plan); err != nil {
			return err
		}
	} else {
		plan.WriteText(stdout)
	}
	if n := len(rep.Apply.Errors); n > 0 {
		return fmt.Errorf("%d cgroup writes failed (listed above)", n)
	}
	return nil
}

const kubeletModeUsage = "what the kubelet's own Memory QoS writes, without --kubelet-config: auto (its version's defaults: from v1.37 the MemoryQoS gate is on with memoryReservationPolicy None), off, none or tiered (TieredReservation); the agent never writes the files the kubelet owns at a level"

// defaultKubeletConfig is where `gofit node reset` looks for the
// kubelet's config under --root.
const defaultKubeletConfig = "var/lib/kubelet/config.yaml"

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// kubeletFlagSet are the flags plan and reset take to know what the
// kubelet writes (the agent itself learns its version from the Node).
type kubeletFlagSet struct{ config, mode, version *string }

func kubeletFlags(fs *flag.FlagSet, configUsage string) kubeletFlagSet {
	return kubeletFlagSet{
		config:  fs.String("kubelet-config", "", configUsage),
		mode:    fs.String("kubelet-memory-qos", agent.KubeletAuto, kubeletModeUsage),
		version: fs.String("kubelet-version", "", "the kubelet's version, e.g. v1.37.2 (kubectl get node -o jsonpath='{.status.nodeInfo.kubeletVersion}'; default: the newest this gofit knows)"),
	}
}

func (f kubeletFlagSet) qos() (agent.KubeletQoS, error) {
	if *f.config == "" {
		k, err := agent.KubeletMode(*f.mode, *f.version)
		if err != nil {
			return k, fmt.Errorf("%w: %v", errUsage, err)
		}
		return k, nil
	}
	if *f.mode != agent.KubeletAuto {
		return agent.KubeletQoS{}, fmt.Errorf("%w: --kubelet-config and --kubelet-memory-qos=%s: give one", errUsage, *f.mode)
	}
	b, err := os.ReadFile(*f.config)
	if err != nil {
		return agent.KubeletQoS{}, fmt.Errorf("--kubelet-config: %w", err)
	}
	k, err := agent.ParseKubeletConfig(*f.config, b, *f.version)
	if err != nil {
		return k, fmt.Errorf("--kubelet-config: %w", err)
	}
	return k, nil
}

func parsePolicy(s string) (memqos.Policy, error) {
	switch p := memqos.Policy(s); p {
	case memqos.PolicyDefault, memqos.PolicyAuto:
		return p, nil
	}
	return "", fmt.Errorf("%w: --policy %q: want default or auto", errUsage, s)
}

const podOverridesUsage = "what pods' koordinator.sh/memoryQOS annotation may set: none, all, or a list of policy, minLimitPercent, lowLimitPercent, throttlingPercent, kernelKnobs"

func parsePodOverrides(s string) (memqos.PodOverrides, error) {
	o, err := memqos.ParsePodOverrides(s)
	if err != nil {
		return o, fmt.Errorf("%w: --pod-overrides: %v", errUsage, err)
	}
	return o, nil
}

func checkRatio(r float64) error {
	if !(r > 0 && r <= 1) {
		return fmt.Errorf("%w: --max-protected-ratio %v: want a share in (0, 1]", errUsage, r)
	}
	return nil
}

func runNodePlan(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("node plan", stderr)
	podsFile := fs.String("pods", "", "v1 PodList as `kubectl get pods -o json` prints it (required)")
	cfgFile := fs.String("config", "", "content of the resource-qos-config key, or the whole ConfigMap as JSON")
	root := fs.String("root", "/", "host root: cgroups are read at ROOT/sys/fs/cgroup")
	cgRoot := fs.String("cgroup-root", "/", "the kubelet's --cgroup-root")
	driver := fs.String("cgroup-driver", "", "the kubelet's cgroup driver, systemd or cgroupfs (default: whichever pod root exists)")
	nodeMem := fs.String("node-memory", "", "the node's allocatable memory in bytes (required)")
	kernel := fs.String("kernel", "", "the node's kernel release, uname -r (default: this machine's); below 5.9 memory.high stays max")
	policy := fs.String("policy", "default", "policy for pods without a memoryQOS annotation: default or auto")
	ratio := fs.Float64("max-protected-ratio", 0.8, "cap on the node's total memory.min, as a share of allocatable memory")
	overrides := fs.String("pod-overrides", memqos.DefaultPodOverrides, podOverridesUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	kf := kubeletFlags(fs, "the kubelet's config file, read for its own Memory QoS")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	k, err := kf.qos()
	if err != nil {
		return err
	}
	ov, err := parsePodOverrides(*overrides)
	if err != nil {
		return err
	}
	if *podsFile == "" {
		return fmt.Errorf("%w: --pods is required", errUsage)
	}
	mem, err := strconv.ParseInt(*nodeMem, 10, 64)
	if err != nil || mem <= 0 {
		return fmt.Errorf("%w: --node-memory %q: want a positive number of bytes", errUsage, *nodeMem)
	}
	pol, err := parsePolicy(*policy)
	if err != nil {
		return err
	}
	if err := checkRatio(*ratio); err != nil {
		return err
	}
	pods, err := agent.ReadPodList(*podsFile)
	if err != nil {
		return fmt.Errorf("--pods: %w", err)
	}
	cfg, nss := &memqos.Config{}, memqos.Namespaces{}
	if *cfgFile != "" {
		if cfg, nss, err = agent.ReadConfig(*cfgFile); err != nil {
			return fmt.Errorf("--config: %w", err)
		}
	}
	layout, err := agent.DetectDriver(*root, *cgRoot, *driver)
	if err != nil {
		return fmt.Errorf("--root: %w", err)
	}
	if *kernel == "" {
		if *kernel, err = agent.KernelRelease(); err != nil {
			return err
		}
	}
	a := agent.New(layout, agent.Options{Policy: pol, MaxProtectedRatio: *ratio, KernelRelease: *kernel, DryRun: true, ResetAfter: -1, PodOverrides: &ov, Kubelet: k})
	rep := a.Reconcile(agent.State{Pods: pods, Config: cfg, Namespaces: nss, NodeAllocatable: mem})
	if rep.Skip == agent.SkipBadInput {
		return fmt.Errorf("%w: %s", errUsage, rep.SkipReason)
	}
	plan := a.PlanOf(rep)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(plan)
	}
	plan.WriteText(stdout)
	return nil
}

func runNodeHog(args []string, stderr io.Writer) error {
	fs := newFlags("node "+qoslab.HogCommand, stderr)
	size := fs.Int64("bytes", 0, "bytes to keep allocated and touched")
	churn := fs.Float64("churn", 0.25, "share of the memory freed and allocated again each round")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := qoslab.Hog(ctx, *size, *churn)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func runNodeExperiment(args []string, stdout, stderr io.Writer) error {
	def := qoslab.DefaultConfig()
	fs := newFlags("node experiment", stderr)
	nodeMem := fs.Int64("node-memory", def.NodeLimit, "the node cgroup's memory limit, bytes")
	lsReq := fs.Int64("ls-request", def.LSRequest, "the LS service's memory request, bytes")
	lsLim := fs.Int64("ls-limit", def.LSLimit, "the LS service's memory limit, bytes")
	hog := fs.Int64("hog", def.HogBytes, "bytes the BE hog keeps allocated")
	rate := fs.Float64("rate", def.Rate, "open-loop requests per second")
	dur := fs.Duration("duration", def.Duration, "load per trial")
	reps := fs.Int("repeats", def.Repeats, "trials per mode (off and auto, interleaved)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	// Each bad value named by its flag, before any cgroup is made; NaN
	// fails the positive checks too.
	for _, f := range []struct {
		name string
		ok   bool
		v    any
	}{
		{"node-memory", *nodeMem > 0, *nodeMem}, {"ls-request", *lsReq > 0, *lsReq}, {"ls-limit", *lsLim > 0, *lsLim},
		{"hog", *hog > 0, *hog}, {"rate", *rate > 0 && !math.IsInf(*rate, 0), *rate}, {"duration", *dur > 0, *dur}, {"repeats", *reps > 0, *reps},
	} {
		if !f.ok {
			return fmt.Errorf("%w: --%s %v: must be positive", errUsage, f.name, f.v)
		}
	}
	if *lsReq > *lsLim {
		return fmt.Errorf("%w: --ls-request %d is above --ls-limit %d", errUsage, *lsReq, *lsLim)
	}
	if os.Geteuid() != 0 {
		return errors.New("the experiment creates cgroups: run it as root")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := qoslab.Config{Exe: exe, SampleArgs: func(addr string) []string { return []string{lab.SampleCommand, addr} },
		NodeLimit: *nodeMem, LSRequest: *lsReq, LSLimit: *lsLim, HogBytes: *hog, Rate: *rate, Duration: *dur, Repeats: *reps, Progress: stderr}
	ctx, stop := cleanupContext()
	defer stop()
	res, err := qoslab.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	qoslab.WriteSummary(stdout, res)
	return nil
}

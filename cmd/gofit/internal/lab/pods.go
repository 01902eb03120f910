//go:build !nokube

package lab

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
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/image"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/result"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/sandbox"
	"github.com/gofit-dev/gofit/cmd/gofit/internal/load"
	"github.com/gofit-dev/gofit/kube/agent"
	"github.com/gofit-dev/gofit/target"
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

// DefaultNamespace is the namespace deploy/lab makes, with the Roles the
// lab needs: --namespace's default, not the kubeconfig context's nor
// "default", where the run's pods would land beside the user's own.
const DefaultNamespace = "gofit-lab"

// runNamespace is where the run's pods go: --namespace, else
// DefaultNamespace (never the kubeconfig context's).
func runNamespace(ko KubeOptions) string {
	if ko.Namespace != "" {
		return ko.Namespace
	}
	return DefaultNamespace
}

// podDeadline is every pod's activeDeadlineSeconds: the study ends
// within its budget plus one trial (at most the budget), and a pod may
// wait podSchedule to be placed first. Past it the kubelet ends the pod
// by itself, so a run killed outright (SIGKILL, a lost laptop) leaves no
// pod running beyond its study's time; the next run's sweep deletes
// the objects.
func podDeadline(cfg Config) *int64 {
	d := int64((2*cfg.Budget + podSchedule + time.Second - 1) / time.Second)
	return &d
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

// podRunner is the runner of `gofit lab --kube`.
type podRunner struct {
	cfg      Config
	cs       kubernetes.Interface
	ns       string
	id       string
	owner    metav1.OwnerReference
	target   podTarget
	image    string
	token    string // the load pod's: it serves this run alone
	selector map[string]string
	agentNS  []string
	progress io.Writer
	// slots are the nodes trials may run on, one trial each at a time;
	// "" is one slot the scheduler places (the nodes could not be
	// listed).
	slots  chan string
	nslots int
	load   *corev1.Pod
	loadOn string
	// loadStarted is how long the load pod took to become ready.
	loadStarted time.Duration
	mu          sync.Mutex
	agents      map[string]string // node → agent pod name:port
	agentIP     map[string]string // node → the agent's IP:port on the pod network
	agentOf     map[string]string // node → the agent's namespace
	// agentSecure: the node's agent serves --metrics-secure (TLS, and a
	// token the API server vouches for); agentToken is the run's token
	// for it, minted once (agentAccount's).
	agentSecure  map[string]bool
	agentAccount string
	agentToken   string
	nodes        map[string]agent.NodeInfo
	used         []string // nodes trials ran on, in order of first use
	slowest      time.Duration
	// nodeCPUs and nodeAlloc are nodePlan's cpus and alloc (0: the nodes
	// could not be listed), less the load pod's request where it shares.
	nodeCPUs  int
	nodeAlloc float64
	// stopHeartbeat ends the owner's heartbeat (close).
	stopHeartbeat func()
}

// heartbeat renews the owner's annHeartbeat until ctx ends.
func (r *podRunner) heartbeat(ctx context.Context, name string) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, annHeartbeat, time.Now().UTC().Format(time.RFC3339))
		if _, err := r.cs.CoreV1().ConfigMaps(r.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
			fmt.Fprintf(r.progress, "lab: warning: renewing %s/%s's heartbeat: %v (a later run may take this one for dead after %v)\n", r.ns, name, err, staleAfter)
		}
	}
}

// sweepStale deletes the owners of lab runs in ns (but keep) whose
// heartbeat is older than staleAfter at now, in the background, so the
// garbage collector deletes their pods; it returns their names. Both
// times are the API server's, never a run's own clock: now is the
// creation time of this run's owner, and a heartbeat is the latest
// time the server stamped on an owner's managed fields (each renewal
// changes its annotation, and the server stamps the change), so that a
// run on a machine whose clock is behind is not taken for dead.
func sweepStale(ctx context.Context, cs kubernetes.Interface, ns, keep string, now time.Time) []string {
	l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: labelApp + "=" + appName})
	if err != nil {
		return nil
	}
	var out []string
	bg := metav1.DeletePropagationBackground
	for _, cm := range l.Items {
		if cm.Name == keep || cm.Labels[labelRun] == "" {
			continue
		}
		if now.Sub(lastWrite(&cm)) < staleAfter {
			continue
		}
		uid := cm.UID
		if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}}); err == nil {
			out = append(out, cm.Name)
		}
	}
	return out
}

// lastWrite is the latest time the API server stamped on o: its
// creation, or a later write's managed fields.
func lastWrite(o metav1.Object) time.Time {
	t := o.GetCreationTimestamp().Time
	for _, m := range o.GetManagedFields() {
		if m.Time != nil && m.Time.After(t) {
			t = m.Time.Time
		}
	}
	return t
}

// newPodRunner connects, makes the run's owner and its load pod; the
// caller must call close, which deletes everything.
func newPodRunner(ctx context.Context, cfg Config, ko KubeOptions, progress io.Writer) (*podRunner, error) {
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
	r := &podRunner{cfg: cfg, cs: cs, ns: ns, selector: sel, image: ko.Image, progress: progress,
		agents: map[string]string{}, agentIP: map[string]string{}, agentOf: map[string]string{}, nodes: map[string]agent.NodeInfo{},
		agentSecure: map[string]bool{}, agentAccount: cmp.Or(ko.AgentAccount, DefaultAgentAccount)}
	r.agentNS = defaultAgentNamespaces
	if ko.AgentNamespace != "" {
		r.agentNS = []string{ko.AgentNamespace}
	}
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
func podTargetOf(cfg Config, gofitImage string) (podTarget, error) {
	port := strconv.Itoa(podPort)
	t := podTarget{env: []corev1.EnvVar{{Name: "PORT", Value: port}}}
	if cfg.ImageRef == "" {
		if gofitImage == "" {
			return t, usagef("--kube-image: no gofit image to run the sample and the load from (this build has no release version to default to)")
		}
		t.image, t.flag, t.args = gofitImage, "--kube-image", []string{SampleCommand, ":" + port}
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
	r.id = runID()
	tok := make([]byte, 16)
	rand.Read(tok)
	r.token = hex.EncodeToString(tok)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gofit-lab-" + r.id, Namespace: r.ns,
		Labels: map[string]string{labelApp: appName, labelRun: r.id}},
		Data: map[string]string{"owner": "gofit lab --kube: deleting this deletes the run's pods"}}
	cm.Annotations = map[string]string{annHeartbeat: time.Now().UTC().Format(time.RFC3339)}
	cm, err := r.cs.CoreV1().ConfigMaps(r.ns).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("--namespace %s: create the run's owner: %w", r.ns, err)
	}
	r.owner = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
	for _, name := range sweepStale(ctx, r.cs, r.ns, cm.Name, cm.CreationTimestamp.Time) {
		fmt.Fprintf(r.progress, "lab: deleted %s/%s, the owner of a run that stopped renewing its heartbeat (and with it that run's pods)\n", r.ns, name)
	}
	hbCtx, stopHB := context.WithCancel(context.Background())
	r.stopHeartbeat = stopHB
	go r.heartbeat(hbCtx, cm.Name)
	nodes, listed := r.listNodes(ctx)
	loadNode := ""
	if listed {
		if len(nodes.trial) == 0 {
			return fmt.Errorf("--node-selector %q: no Ready, schedulable node without a NoSchedule or NoExecute taint matches (the lab's pods tolerate none)", labels.Set(r.selector).String())
		}
		loadNode = nodes.load
		if loadNode == "" && len(nodes.trial) > 1 {
			// Give the load a node of its own; the trials keep the rest.
			loadNode, nodes.trial = nodes.trial[len(nodes.trial)-1], nodes.trial[:len(nodes.trial)-1]
		}
	} else {
		nodes.trial = []string{""}
	}
	r.nslots = len(nodes.trial)
	r.nodeCPUs, r.nodeAlloc = nodes.cpus, nodes.alloc
	if listed && loadNode == "" {
		// The load pod's request shares a trial node.
		q := resource.MustParse(loadCPURequest)
		r.nodeAlloc -= q.AsApproximateFloat64()
	}
	r.slots = make(chan string, r.nslots)
	for _, n := range nodes.trial {
		r.slots <- n
	}
	lp := r.pod(roleLoad, loadNode, podTarget{image: r.image, flag: "--kube-image", args: []string{LoadCommand, ":" + strconv.Itoa(loadPort)},
		env: []corev1.EnvVar{{Name: LoadTokenEnv, Value: r.token}}}, nil, 0, 0, 0,
		&url.URL{Scheme: "http", Host: net.JoinHostPort("0.0.0.0", strconv.Itoa(loadPort)), Path: "/healthz"})
	// Burstable, not BestEffort: the node neither evicts nor OOM-kills
	// the generator first, and the scheduler counts a share of CPU for it.
	lp.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(loadCPURequest), corev1.ResourceMemory: resource.MustParse(loadMemoryRequest)}
	if listed {
		// Anywhere (it shares a trial node), or pinned to its node alone:
		// that node is usually one the trials' --node-selector does not
		// match.
		lp.Spec.NodeSelector = nil
	}
	if r.load, err = r.cs.CoreV1().Pods(r.ns).Create(ctx, lp, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the load pod: %w", err)
	}
	began := time.Now()
	if r.load, err = r.waitReady(ctx, r.load.Name, "--kube-image "+r.image, 2*time.Minute); err != nil {
		return fmt.Errorf("the load pod %s/%s: %w", r.ns, r.load.Name, err)
	}
	r.loadOn = r.load.Spec.NodeName
	r.loadStarted = time.Since(began)
	fmt.Fprintf(r.progress, "lab: pods in %s (run %s): trials on %s, one at a time each; load from %s on %s\n",
		r.ns, r.id, nodeList(nodes.trial), r.load.Name, r.loadOn)
	return nil
}

func nodeList(ns []string) string {
	if len(ns) == 1 && ns[0] == "" {
		return "the node the scheduler picks (nodes cannot be listed)"
	}
	return strings.Join(ns, ", ")
}

type nodePlan struct {
	trial []string // Ready, schedulable, untainted nodes matching the selector
	load  string   // such a node outside them, if any
	// cpus and alloc are the fewest CPUs and allocatable cores of a
	// trial node: what a pod's runtime counts, and the largest quota a
	// trial pod can be scheduled with.
	cpus  int
	alloc float64
}

// listNodes finds the trial nodes; listed is false when this user may
// not list nodes (a namespace-scoped Role): the scheduler then picks.
// The lab's pods tolerate no taint, so a node with a NoSchedule or
// NoExecute taint (a control plane, a dedicated pool) is none of them:
// a trial waiting there would never start.
func (r *podRunner) listNodes(ctx context.Context) (nodePlan, bool) {
	var p nodePlan
	nl, err := r.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return p, false
	}
	sel := labels.SelectorFromSet(r.selector)
	for _, n := range nl.Items {
		if n.Spec.Unschedulable || !nodeReady(&n) || repels(&n) {
			continue
		}
		if sel.Matches(labels.Set(n.Labels)) {
			p.trial = append(p.trial, n.Name)
			// What a pod can still ask for there: allocatable less what
			// the node's pods already ask (the agent's, the network's),
			// where this user may list them; else allocatable, and a
			// pod that will not fit fails its wait naming --quotas.
			c, a := int(n.Status.Capacity.Cpu().Value()), n.Status.Allocatable.Cpu().AsApproximateFloat64()
			if asked, err := r.requestedCPU(ctx, n.Name); err == nil {
				a -= asked
			}
			if len(p.trial) == 1 || c < p.cpus {
				p.cpus = c
			}
			if len(p.trial) == 1 || a < p.alloc {
				p.alloc = a
			}
		} else if p.load == "" && len(r.selector) > 0 {
			p.load = n.Name
		}
	}
	slices.Sort(p.trial)
	return p, true
}

// requestedCPU is the CPU the pods on node ask for, as the scheduler
// counts it: each pod's containers' requests, or its largest init
// container's if more, and its overhead.
func (r *podRunner) requestedCPU(ctx context.Context, node string) (float64, error) {
	pl, err := r.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, err
	}
	sum := 0.0
	for _, p := range pl.Items {
		if p.Spec.NodeName != node || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		run, ini := 0.0, 0.0
		for _, c := range p.Spec.Containers {
			run += c.Resources.Requests.Cpu().AsApproximateFloat64()
		}
		for _, c := range p.Spec.InitContainers {
			ini = max(ini, c.Resources.Requests.Cpu().AsApproximateFloat64())
		}
		sum += max(run, ini) + p.Spec.Overhead.Cpu().AsApproximateFloat64()
	}
	return sum, nil
}

// repels says whether a taint keeps pods without tolerations off n.
func repels(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pod is a trial or load pod: the run's labels and owner, on node (""
// anywhere the selector allows), with these limits (0: none) and env.
func (r *podRunner) pod(role, node string, t podTarget, env map[string]string, cpuLimit, cpuRequest float64, memLimit int64, ready *url.URL) *corev1.Pod {
	no := false
	port, _ := strconv.Atoi(ready.Port())
	scheme := corev1.URISchemeHTTP
	if ready.Scheme == "https" {
		scheme = corev1.URISchemeHTTPS
	}
	c := corev1.Container{Name: "target", Image: t.image, Args: t.args, Env: slices.Clone(t.env),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: ready.RequestURI(), Port: intstr.FromInt32(int32(port)), Scheme: scheme}},
			PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 1, SuccessThreshold: 1},
		Resources:       corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	if role == roleTrial {
		c.Name = "target"
	} else {
		c.Name = "load"
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: env[k]})
	}
	if cpuLimit > 0 {
		q := *resource.NewMilliQuantity(int64(cpuLimit*1000+0.5), resource.DecimalSI)
		c.Resources.Limits[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceCPU] = q, q
	}
	if cpuRequest > 0 {
		c.Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(cpuRequest*1000+0.5), resource.DecimalSI)
	}
	if memLimit > 0 {
		q := *resource.NewQuantity(memLimit, resource.BinarySI)
		c.Resources.Limits[corev1.ResourceMemory], c.Resources.Requests[corev1.ResourceMemory] = q, q
	}
	sel := map[string]string{}
	for k, v := range r.selector {
		sel[k] = v
	}
	var aff *corev1.Affinity
	if node != "" {
		// By the node's name, which a kubernetes.io/hostname label need
		// not equal (cloud nodes are often named otherwise).
		aff = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
	}
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gofit-lab-" + r.id + "-" + role + "-", Namespace: r.ns,
			Labels:          map[string]string{labelApp: appName, labelRun: r.id, labelRole: role},
			OwnerReferences: []metav1.OwnerReference{r.owner}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{c}, RestartPolicy: corev1.RestartPolicyNever, NodeSelector: sel, Affinity: aff,
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			TerminationGracePeriodSeconds: &grace, EnableServiceLinks: &no, AutomountServiceAccountToken: &no,
			ActiveDeadlineSeconds: podDeadline(r.cfg)},
	}
}

// waitReady waits until pod name is Ready: scheduling and pulling within
// podSchedule, then readiness within ready. A pod whose container ended,
// or that waits for what will not come (its image cannot be pulled or
// named, its config is wrong), fails at once with a *sandbox.StartError
// naming image (the flag and the image: "--image REF"), as a local
// target that will not start does: the study then stops on the
// target's fault. Not ready in time is a StartError with TimedOut.
func (r *podRunner) waitReady(ctx context.Context, name, image string, ready time.Duration) (*corev1.Pod, error) {
	var running, unschedulable time.Time
	deadline := time.Now().Add(podSchedule)
	for {
		p, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if why := podUnschedulable(p); why == "" {
			unschedulable = time.Time{}
		} else if unschedulable.IsZero() {
			unschedulable = time.Now()
		} else if time.Since(unschedulable) >= unschedulableFor {
			return p, fmt.Errorf("pod %s (%s) cannot be scheduled: %s: lower --quotas, or choose nodes with room with --node-selector", name, image, why)
		}
		if why := podEnded(p); why != "" {
			out := result.Errored
			if oomKilled(p) {
				out = result.OOMKilled
			}
			return p, &sandbox.StartError{Outcome: out, Detail: fmt.Sprintf("pod %s (%s) ended before it was ready: %s", name, image, why)}
		}
		if why := podStuck(p); why != "" {
			return p, &sandbox.StartError{Outcome: result.Errored, Detail: fmt.Sprintf("%s: pod %s cannot start: %s", image, name, why)}
		}
		if running.IsZero() && p.Status.Phase == corev1.PodRunning {
			running = time.Now()
			deadline = running.Add(ready)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Status.PodIP != "" {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			if running.IsZero() {
				return p, fmt.Errorf("pod %s not running within %v: %s", name, podSchedule, podWaiting(p))
			}
			return p, &sandbox.StartError{Outcome: result.Stalled, TimedOut: true, Detail: fmt.Sprintf("pod %s (%s) running, not ready within %v", name, image, ready)}
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unschedulableFor is how long a pod may stay unschedulable before the
// wait gives up: long enough for a trial pod just deleted on the node to
// free its CPU, far shorter than podSchedule.
var unschedulableFor = time.Minute

// podUnschedulable is the scheduler's reason p has no node, or "".
func podUnschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

// stuckReasons are a container's waiting reasons that waiting does not
// cure: the kubelet has given up pulling for now (ImagePullBackOff,
// after ErrImagePull, which alone may be a registry's hiccup), or the
// image or the pod's config is wrong. (CreateContainerError and
// RunContainerError are often a busy runtime's, and retried: they are
// waited on.)
var stuckReasons = []string{"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}

// podStuck says why a pod's container waits for what will not come, or "".
func podStuck(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && slices.Contains(stuckReasons, w.Reason) {
			return strings.TrimSpace(w.Reason + ": " + w.Message)
		}
	}
	return ""
}

// podEnded says how a pod's container ended ("" while it has not).
func podEnded(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil {
			return fmt.Sprintf("container %s exited %d (%s) %s", s.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message))
		}
	}
	if p.Status.Phase == corev1.PodFailed {
		return "pod failed: " + p.Status.Reason + " " + p.Status.Message
	}
	return ""
}

// oomKilled says whether the kubelet reports the container OOM-killed.
func oomKilled(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil && t.Reason == "OOMKilled" {
			return true
		}
	}
	return false
}

func podWaiting(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			return w.Reason + ": " + w.Message
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return string(c.Type) + ": " + c.Message
		}
	}
	return "phase " + string(p.Status.Phase)
}

// delete deletes a pod now and waits until it is gone, so the next
// trial on its node meets none of its processes.
func (r *podRunner) delete(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The pod's own 1 s grace, not 0: a zero grace period force-deletes
	// the object before the kubelet has stopped the container, and the
	// node's next trial would meet it.
	err := r.cs.CoreV1().Pods(r.ns).Delete(ctx, name, metav1.DeleteOptions{})
	for err == nil && ctx.Err() == nil {
		_, err = r.cs.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			time.Sleep(250 * time.Millisecond)
		}
	}
}

// close deletes the owner, and with it (the garbage collector's
// background deletion) every pod of the run; the pods are deleted here
// too so the run does not end with them still on the nodes.
func (r *podRunner) close() error {
	if r.stopHeartbeat != nil {
		r.stopHeartbeat()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	sel := labelRun + "=" + r.id
	if r.id != "" {
		zero := int64(0)
		if err := r.cs.CoreV1().Pods(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: sel}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the run's pods (%s): %w", sel, err))
		}
		bg := metav1.DeletePropagationBackground
		if err := r.cs.CoreV1().ConfigMaps(r.ns).Delete(ctx, "gofit-lab-"+r.id, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the run's owner %s/gofit-lab-%s: %w", r.ns, r.id, err))
		}
	}
	return errors.Join(errs...)
}

// where names the nodes the trials ran on, their kernels and CPUs.
func (r *podRunner) where() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, n := range r.used {
		info := r.nodes[n]
		parts = append(parts, fmt.Sprintf("%s (kernel %s, %d× %s)", n, info.Kernel, info.CPUs, info.CPUModel))
	}
	if len(parts) == 0 {
		parts = []string{"no node yet"}
	}
	load := "load from pod " + r.loadName() + " on " + r.loadOn
	if slices.Contains(r.used, r.loadOn) {
		load += ", a trial node: it shares the trials' CPUs"
	} else {
		load += ", another node"
	}
	return fmt.Sprintf("pods in namespace %s on %s; %s", r.ns, strings.Join(parts, ", "), load)
}

func (r *podRunner) loadName() string {
	if r.load == nil {
		return ""
	}
	return r.load.Name
}

// placement is the report's isolation line for a pod run.
func (r *podRunner) placement() *result.Placement {
	r.mu.Lock()
	shared := slices.Contains(r.used, r.loadOn)
	r.mu.Unlock()
	p := &result.Placement{Isolated: !shared}
	if shared {
		p.Note = "the load pod ran on a trial node (no other node was available): it competes with the trial for the node's CPUs"
	} else {
		p.Note = "one trial per node at a time; the load pod on node " + r.loadOn + ", apart from every trial"
	}
	return p
}

// agentFor finds the gofit node agent on node and reads the node's facts
// once.
func (r *podRunner) agentFor(ctx context.Context, node string) (ns, pod string, err error) {
	r.mu.Lock()
	pod, ok := r.agents[node]
	ns = r.agentOf[node]
	r.mu.Unlock()
	if ok {
		return ns, pod, nil
	}
	var tried []string
	for _, ans := range r.agentNS {
		pl, err := r.cs.CoreV1().Pods(ans).List(ctx, metav1.ListOptions{LabelSelector: agentLabel, FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", ans, err))
			continue
		}
		for _, p := range pl.Items {
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == "metrics" {
						pod = p.Name + ":" + strconv.Itoa(int(cp.ContainerPort))
					}
				}
			}
			if pod != "" {
				secure := servesSecure(&p)
				tok := ""
				if secure {
					if tok, err = r.tokenForAgents(ctx); err != nil {
						return "", "", fmt.Errorf("the gofit node agent %s/%s on %s serves --metrics-secure: %w", ans, p.Name, node, err)
					}
				}
				var info agent.NodeInfo
				if err := r.proxyJSON(ctx, ans, pod, tok, agent.NodeInfoPath, &info); err != nil {
					return "", "", fmt.Errorf("the gofit node agent %s/%s on %s: %w (is it this version or later?%s)", ans, p.Name, node, err, forbiddenHint(err, secure, r.ns, r.agentAccount))
				}
				r.mu.Lock()
				r.agents[node], r.agentOf[node], r.nodes[node], r.agentSecure[node] = pod, ans, info, secure
				r.agentIP[node] = net.JoinHostPort(p.Status.PodIP, pod[strings.LastIndexByte(pod, ':')+1:])
				r.mu.Unlock()
				return ans, pod, nil
			}
		}
		tried = append(tried, ans+": no running agent pod there")
	}
	return "", "", fmt.Errorf("node %s: --kube reads each trial's cgroup through the gofit node agent on its node, and found none (%s); install it (docs/install.md) or name its namespace with --agent-namespace", node, strings.Join(tried, "; "))
}

// proxyJSON GETs path from pod (name:port) in ns through the API server;
// with a token, over https with it in agent.TokenHeader, to an agent that
// serves --metrics-secure (the API server keeps the Authorization header).
func (r *podRunner) proxyJSON(ctx context.Context, ns, pod, tok, path string, v any) error {
	req := r.cs.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").SubResource("proxy").Suffix(path)
	if tok != "" {
		req = req.Name("https:"+pod).SetHeader(agent.TokenHeader, tok)
	} else {
		req = req.Name(pod)
	}
	b, err := req.DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return json.Unmarshal(b, v)
}

// servesSecure says whether an agent pod runs with --metrics-secure.
func servesSecure(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, a := range c.Args {
			if a == "--metrics-secure" || a == "--metrics-secure=true" || a == "-metrics-secure" || a == "-metrics-secure=true" {
				return true
			}
		}
	}
	return false
}

// tokenForAgents mints, once, a token of the run's ServiceAccount that
// lasts the study's budget and an hour more: the agents review it
// (TokenReview) and check its right to get /v1/ (SubjectAccessReview).
func (r *podRunner) tokenForAgents(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.agentToken != "" {
		return r.agentToken, nil
	}
	secs := int64((r.cfg.Budget + time.Hour) / time.Second)
	tr, err := r.cs.CoreV1().ServiceAccounts(r.ns).CreateToken(ctx, r.agentAccount, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of ServiceAccount %s/%s to read it (--agent-account; deploy/lab makes it and grants create on its serviceaccounts/token): %w", r.ns, r.agentAccount, err)
	}
	r.agentToken = tr.Status.Token
	return r.agentToken, nil
}

// forbiddenHint names the binding an agent's 403 asks for.
func forbiddenHint(err error, secure bool, ns, account string) string {
	if !secure || !apierrors.IsForbidden(err) {
		return ""
	}
	return fmt.Sprintf("; 403 from the agent: ServiceAccount %s/%s needs get on the nonResourceURLs /v1/* (deploy/lab's ClusterRole gofit-lab-agent-reader)", ns, account)
}

// cgroupOf reads pod's cgroup through its node's agent.
func (r *podRunner) cgroupOf(ctx context.Context, p *corev1.Pod) (agent.PodCgroup, error) {
	var out agent.PodCgroup
	ns, ap, err := r.agentFor(ctx, p.Spec.NodeName)
	if err != nil {
		return out, err
	}
	r.mu.Lock()
	tok := ""
	if r.agentSecure[p.Spec.NodeName] {
		tok = r.agentToken
	}
	r.mu.Unlock()
	err = r.proxyJSON(ctx, ns, ap, tok, agent.PodStatsPath+string(p.UID), &out)
	return out, err
}

// drive has the load pod run one window.
func (r *podRunner) drive(ctx context.Context, q loadRequest) (loadReply, error) {
	var rep loadReply
	body, err := json.Marshal(q)
	if err != nil {
		return rep, err
	}
	b, err := r.cs.CoreV1().RESTClient().Post().Namespace(r.ns).Resource("pods").Name(r.load.Name+":"+strconv.Itoa(loadPort)).
		SubResource("proxy").Suffix(loadPath).Body(body).SetHeader("Content-Type", "application/json").SetHeader(loadTokenHeader, r.token).DoRaw(ctx)
	if err != nil {
		return rep, fmt.Errorf("the load pod %s: %w: %s", r.load.Name, err, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("the load pod %s: %w", r.load.Name, err)
	}
	rep.Result.Blocks = rep.Blocks
	rep.Result.Duration = time.Duration(rep.Result.Seconds * float64(time.Second))
	return rep, nil
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
	var node string
	select {
	case node = <-r.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	readyURL, _, err := onPod(r.target.ready, "0.0.0.0")
	if err != nil {
		r.slots <- node
		return nil, err
	}
	u, _ := url.Parse(readyURL)
	spec := r.pod(roleTrial, node, r.target, env, cpuLimit, cpuRequest, memLimit, u)
	p, err := r.cs.CoreV1().Pods(r.ns).Create(ctx, spec, metav1.CreateOptions{})
	if err != nil {
		r.slots <- node
		return nil, fmt.Errorf("create a trial pod: %w", err)
	}
	tp := &trialPod{pod: p, node: node}
	t0 := time.Now()
	p, err = r.waitReady(ctx, p.Name, r.target.flag+" "+r.target.image, ready)
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
	r.mu.Lock()
	if !slices.Contains(r.used, p.Spec.NodeName) {
		r.used = append(r.used, p.Spec.NodeName)
	}
	r.mu.Unlock()
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
	r.delete(tp.pod.Name)
	r.slots <- tp.node
}

func (r *podRunner) cpu(ctx context.Context, c cpuConfig, mode result.Mode, offered float64, window time.Duration, rep int) (result.CPUCell, error) {
	ready := r.cfg.Target.ReadyTimeout
	if ready <= 0 {
		ready = sandbox.DefaultReadyTimeout
	}
	tp, err := r.startTrial(ctx, c.env, c.quota, c.request, 0, ready)
	defer r.stopTrial(tp)
	if err != nil {
		return result.CPUCell{}, err
	}
	if _, _, err := r.agentFor(ctx, tp.pod.Spec.NodeName); err != nil {
		return result.CPUCell{}, err
	}
	r.mu.Lock()
	counters, counterAuth := "http://"+r.agentIP[tp.pod.Spec.NodeName]+agent.PodStatsPath+string(tp.pod.UID), ""
	if r.agentSecure[tp.pod.Spec.NodeName] {
		counters, counterAuth = "https"+counters[len("http"):], r.agentToken
	}
	r.mu.Unlock()
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
	rp, err := r.drive(ctx, q)
	if err != nil {
		return result.CPUCell{}, err
	}
	if ctx.Err() != nil {
		return result.CPUCell{}, ctx.Err()
	}
	if len(rp.Marks) != len(q.Marks) {
		return result.CPUCell{}, fmt.Errorf("--kube-image %s: its load pod answered %d of the window's %d counter reads: it is older than this gofit (run the image of this release, or build one from this source)", r.image, len(rp.Marks), len(q.Marks))
	}
	var s0, s1 agent.PodCgroup
	if m := rp.Marks[0]; m.Error != "" || json.Unmarshal(m.Start, &s0) != nil || json.Unmarshal(m.End, &s1) != nil {
		return result.CPUCell{}, fmt.Errorf("the load pod %s reads the trial's counters from the gofit node agent at %s at the window's edges, and could not (%s): let pods in namespace %s reach the agent's metrics port (a NetworkPolicy?)",
			r.load.Name, counters, m.Error, r.ns)
	}
	procs := c.procs
	w := cpuWindow{res: rp.Result, periods: s1.CPU.Periods - s0.CPU.Periods, throttledPeriods: s1.CPU.ThrottledPeriods - s0.CPU.ThrottledPeriods,
		throttledSec: s1.CPU.ThrottledSeconds - s0.CPU.ThrottledSeconds, usedSec: s1.CPU.UsageSeconds - s0.CPU.UsageSeconds, windowSec: rp.WindowSeconds,
		isolated: r.loadOn != tp.pod.Spec.NodeName}
	if m := rp.Marks[1]; m.Error == "" {
		v0, err0 := sandbox.ParseVars(bytes.NewReader(m.Start), "pod "+tp.pod.Name+" /debug/vars")
		v1, err1 := sandbox.ParseVars(bytes.NewReader(m.End), "pod "+tp.pod.Name+" /debug/vars")
		if err0 == nil && err1 == nil {
			w.v0, w.v1 = v0, v1
			if v0.GOMAXPROCS > 0 {
				procs = v0.GOMAXPROCS // what the target really runs with
			}
		}
	}
	cur, _ := r.cs.CoreV1().Pods(r.ns).Get(ctx, tp.pod.Name, metav1.GetOptions{})
	w.exited = cur != nil && podEnded(cur) != ""
	return cpuCell(c, mode, offered, rep, procs, w), nil
}

// memory runs the specs side by side where there are nodes for them, one
// per node; with fewer nodes, the rest wait for one (trials never share
// a node's CPUs).
//
// With a node for each, their loads start together once every pod is
// ready (or failed to be), as the sandbox starts a pair and then drives
// both: the pair's two windows see the same moment of the cluster. A
// barrier on one node would wait forever for the second trial's slot.
func (r *podRunner) memory(ctx context.Context, specs ...memSpec) []memRun {
	out := make([]memRun, len(specs))
	sideBySide(len(specs), len(specs) > 1 && len(specs) <= r.nslots, func(i int, started func()) {
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
func (r *podRunner) memTrial(ctx context.Context, s memSpec, started func()) memRun {
	t := result.MemTrial{LimitBytes: s.limit}
	began := time.Now()
	r.mu.Lock()
	slowest := r.slowest
	r.mu.Unlock()
	wait := startWait(r.cfg.Target, s.limit, slowest)
	tp, err := r.startTrial(ctx, s.env, s.cpu, 0, s.limit, wait)
	defer r.stopTrial(tp)
	started()
	ng := probeNonGo{err: errors.New("not measured in pods: the lab reads the target's memory maps on this machine only")}
	if err != nil {
		t.Seconds = time.Since(began).Seconds()
		t.Outcome, t.Detail = result.Errored, err.Error()
		var se *sandbox.StartError
		switch {
		case tp != nil && oomKilled(tp.pod):
			t.Outcome, t.Detail = result.OOMKilled, "OOM-killed while starting: "+podEnded(tp.pod)
		case errors.As(err, &se) && se.TimedOut && s.limit > 0 && slowest > 0:
			t.Outcome = result.Stalled
			t.Detail = fmt.Sprintf("not ready within %v (its slowest start without a limit took %v)", wait, slowest.Round(10*time.Millisecond))
		}
		return memRun{trial: t, nonGo: ng}
	}
	if s.limit == 0 {
		r.mu.Lock()
		r.slowest = max(r.slowest, tp.took)
		r.mu.Unlock()
	}
	ml := s.load
	q := loadRequest{Targets: tp.mix, Seed: r.cfg.Seed, MinRate: ml.probeRPS * stallShare}
	if ml.rate > 0 {
		q.Open, q.Rate, q.Window, q.InFlight = true, ml.rate, ml.window, load.MaxOpenInFlight
	} else {
		q.Requests, q.Window, q.Concurrency, q.InFlight = ml.requests, ml.maxDur, memConcurrency, memConcurrency
	}
	rp, lerr := r.drive(ctx, q)
	res := rp.Result
	st, serr := r.cgroupOf(ctx, tp.pod)
	cur := r.settle(ctx, tp.pod, lerr != nil || res.Errors > 0 || res.Stalled)
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
	case float64(res.Errors) > maxErrorShare*float64(res.Errors+res.Requests) || res.Requests == 0:
		t.Outcome, t.Detail = result.Errored, fmt.Sprintf("%d errors in %d requests (%s)", res.Errors, res.Errors+res.Requests, res.ErrorSummary())
	case serr != nil:
		t.Outcome, t.Detail = result.Errored, "could not read the pod's cgroup: "+serr.Error()
	default:
		t.Outcome = result.OK
	}
	return memRun{trial: t, load: res, nonGo: ng}
}

// settle reads the pod once more; after a load that went wrong it waits a
// little for the kubelet to report the container's end (an OOM kill's
// reason reaches the pod's status a sync later).
func (r *podRunner) settle(ctx context.Context, p *corev1.Pod, wrong bool) *corev1.Pod {
	deadline := time.Now().Add(5 * time.Second)
	for {
		cur, err := r.cs.CoreV1().Pods(r.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return p
		}
		if !wrong || podEnded(cur) != "" || time.Now().After(deadline) || ctx.Err() != nil {
			return cur
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runPodStudy runs the study with the trials as pods (gofit lab --kube).
func runPodStudy(ctx context.Context, cfg Config, ko KubeOptions, progress io.Writer) (*result.Results, *Records, error) {
	if err := cfg.Validate(); err != nil {
		return &result.Results{}, &Records{}, err
	}
	r, err := newPodRunner(ctx, cfg, ko, progress)
	if err != nil {
		return &result.Results{}, &Records{}, err
	}
	// The study is designed for the nodes' CPUs, not this machine's.
	cfg, err = nodeQuotas(cfg, r.nodeCPUs, r.nodeAlloc)
	var l *study
	if err == nil {
		l, err = newStudy(cfg)
	}
	if err != nil {
		return &result.Results{}, &Records{}, errors.Join(err, r.close())
	}
	if r.nodeCPUs > 0 {
		l.rec.NCPU = r.nodeCPUs
	}
	bin, err := podBinary(ctx, cfg, progress)
	if err != nil {
		l.rec.Lab.Warnings = append(l.rec.Lab.Warnings, err.Error())
		fmt.Fprintf(progress, "gofit lab: warning: %v\n", err)
	}
	l.rec.Binary = bin
	l.run = r
	res, rec, err := l.execute(ctx)
	if cerr := r.close(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	return res, rec, err
}

// nodeQuotas fits the study's CPU quotas to the trial nodes: cpus CPUs
// each, alloc cores a pod can still ask for (both 0: unknown, nothing
// changes). The default study's whole-machine row becomes the nodes'
// (their CPUs, or what a pod can ask for there if less); a quota from
// --quotas above that is an error, since its trial pod would never
// schedule.
func nodeQuotas(cfg Config, cpus int, alloc float64) (Config, error) {
	if cpus <= 0 {
		return cfg, nil
	}
	if cfg.QuotasGiven {
		for _, q := range cfg.Quotas {
			if q > alloc+1e-9 {
				return cfg, usagef("--quotas: %g cores is more than a trial node has allocatable (%.2f of %d CPUs, the load pod's request counted where it shares the node): its trial pod would never be scheduled", q, alloc, cpus)
			}
		}
		return cfg, nil
	}
	var qs []float64
	for _, q := range cfg.Quotas {
		// The defaults' only row above 1 is this machine's CPUs.
		if q <= 1 && q <= alloc+1e-9 {
			qs = append(qs, q)
		}
	}
	if top := math.Floor(min(float64(cpus), alloc)*100) / 100; cfg.WholeRow && top > 1 {
		qs = append(qs, top)
	}
	if len(qs) == 0 {
		return cfg, fmt.Errorf("--node-selector: the trial nodes have %.2f cores allocatable, less than the smallest quota %g", alloc, slices.Min(cfg.Quotas))
	}
	cfg.Quotas = qs
	if cfg.CPURequest > 0 {
		cfg.CPURequest = slices.Min(qs)
	}
	return cfg, nil
}

// podBinary is what the trial pods run, read here: this gofit for the
// sample (the image of this release runs this build's sample), else
// --image pulled and unpacked into a temporary directory, its entrypoint
// read. It is the Go version and module facts the study designs by; an
// error says why they are unknown.
func podBinary(ctx context.Context, cfg Config, progress io.Writer) (target.Binary, error) {
	if cfg.ImageRef == "" {
		self, err := os.Executable()
		if err != nil {
			return target.Binary{}, err
		}
		return target.Read(self)
	}
	dir, err := sandbox.TempDir() // a later lab run removes it if this one is killed
	if err != nil {
		return target.Binary{}, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	fmt.Fprintf(progress, "lab: reading --image %s here for its Go version\n", cfg.ImageRef)
	im, err := image.Load(ctx, cfg.ImageRef, filepath.Join(dir, "rootfs"), dir)
	if err != nil {
		return target.Binary{}, fmt.Errorf("%w: its Go version is unknown here, and the study plans as for an unknown one", err)
	}
	argv := im.Command(cfg.ImageArgs)
	if len(argv) == 0 {
		return target.Binary{}, fmt.Errorf("--image %s: no entrypoint to read", cfg.ImageRef)
	}
	_, onHost, err := im.Resolve(argv[0])
	if err != nil {
		return target.Binary{}, fmt.Errorf("--image %s: its command %q: %w", cfg.ImageRef, argv[0], err)
	}
	return target.Read(onHost)
}

// record says in the records where the trials ran: the first trial
// node's facts as the machine, the load's placement, the target as the
// image the pods ran.
func (r *podRunner) record(rec *Records) {
	rec.Placement = r.placement()
	rec.Machine.Where = r.where()
	// The generator is the load pod, not this process.
	var gen struct {
		CPU float64 `json:"cpu_seconds"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := r.proxyJSON(ctx, r.ns, r.load.Name+":"+strconv.Itoa(loadPort), "", loadCPUPath, &gen); err == nil {
		rec.Lab.GeneratorCPUSeconds = gen.CPU
	}
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.used) > 0 {
		n := r.nodes[r.used[0]]
		rec.Machine.Host, rec.Machine.Kernel, rec.Machine.CPUModel, rec.Machine.CPUs = r.used[0], n.Kernel, n.CPUModel, n.CPUs
		rec.Machine.CgroupVersion, rec.Machine.LoadAvg = n.Cgroup, ""
		if r.nodeCPUs == 0 {
			rec.NCPU = max(n.CPUs, 1) // else as the study was designed: the fewest of the trial nodes'
		}
	}

	rec.Target.Command = strings.Join(append([]string{r.target.image}, r.target.args...), " ")
	rec.Target.Image = r.target.image
	rec.Target.PageCache = "as the node has it (pods start with whatever page cache the node holds)"
	rec.Target.BinaryBytes = 0
}

// startCost is what a pod's start cost before any trial pod started:
// the load pod's, from its creation to Ready (the planner keeps the
// memory study's time back at this price until trials measure theirs).
func (r *podRunner) startCost() time.Duration { return r.loadStarted }

var _ startCoster = (*podRunner)(nil)

// parallel is the number of trial nodes: one trial on each at a time.
func (r *podRunner) parallel() int { return r.nslots }

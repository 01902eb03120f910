package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gofit-dev/gofit/cgroup/manage"
	"github.com/gofit-dev/gofit/kube/internal/qty"
	"github.com/gofit-dev/gofit/kube/memqos"
)

// Source says where the agent's inputs live in the cluster.
type Source struct {
	NodeName string
	// ConfigMap holding resource-qos-config and memory-qos; koordinator's
	// koordinator-system/slo-controller-config by default.
	ConfigMapNamespace string
	ConfigMapName      string
	// NoConfigMap is the administrator's explicit choice of the built-in
	// defaults (every class disabled): no ConfigMap is read. Without it a
	// ConfigMap that does not exist (404) or that the agent may not read
	// (403) is a bad ConfigMap, not the defaults: the defaults would write
	// min 0, low 0 and high max to every pod, dropping what the
	// configuration and the pods' overrides protect.
	NoConfigMap bool
	// Interval between reconciles without events (default 10s).
	Interval time.Duration
	// MinGap is the least time between two passes (default
	// DefaultMinGap): a burst of pod events (a Deployment rolling on a
	// busy node) is one pass, not one per event.
	MinGap time.Duration
	// SyncTimeout bounds the wait for the first list of the node's pods
	// and of the node (default 2m): past it Run fails, naming what did
	// not arrive and the API server's last answer, instead of waiting
	// forever behind a passing health check.
	SyncTimeout time.Duration
	// KubeletConfig, when set, is the kubelet's configuration file (as the
	// agent sees it, e.g. /host/var/lib/kubelet/config.yaml), read once
	// the node is known for the kubelet's own Memory QoS settings.
	KubeletConfig string
	// KubeletMode is what the kubelet's Memory QoS is taken to do without
	// a config file: KubeletAuto (its version's defaults; "" too), or
	// KubeletOff, KubeletNone or KubeletTiered as an administrator states.
	KubeletMode string
}

// DefaultInterval is the reconcile interval when nothing happens.
const DefaultInterval = 10 * time.Second

// DefaultMinGap spaces passes started by events.
const DefaultMinGap = time.Second

// DefaultSyncTimeout is how long Run waits for its first lists.
const DefaultSyncTimeout = 2 * time.Minute

// watchErrors keeps the last list/watch error of each informer, to say why
// one has not synced.
type watchErrors struct {
	mu   sync.Mutex
	last map[string]error
}

func (w *watchErrors) handler(name string) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		w.mu.Lock()
		if w.last == nil {
			w.last = map[string]error{}
		}
		w.last[name] = err
		w.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}
}

func (w *watchErrors) get(name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[name]
}

// Run watches the node's pods (an informer with the field selector
// spec.nodeName), the node and the ConfigMap, and reconciles on every
// change and every interval until ctx ends. It leaves cgroup values as
// they are on exit: a restart must not drop protection.
func (a *Agent) Run(ctx context.Context, cs kubernetes.Interface, src Source) error {
	if src.NodeName == "" {
		return errors.New("node name is empty (set --node-name or NODE_NAME from the downward API)")
	}
	src = src.withDefaults()
	w, err := newWatch(cs, src)
	if err != nil {
		return err
	}
	w.start()
	defer w.shutdown()
	if ok, err := w.waitForLists(ctx, &a.health); !ok {
		return err // nil when ctx ended
	}
	k, err := learnKubelet(src, w.nodes.Lister())
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.opts.Kubelet = k
	a.mu.Unlock()
	cmWhere := w.cmWhere
	if src.NoConfigMap {
		cmWhere = "none (--no-configmap: the built-in defaults)"
	}
	a.log.Info("watching", "node", src.NodeName, "configmap", cmWhere,
		"cgroup_version", a.layout.Version, "driver", a.layout.Driver, "kubepods", a.layout.Kubepods, "interval", src.Interval)
	r := &runner{a: a, w: w}
	r.logKubelet()
	if a.layout.Version == 2 && !a.opts.TakeOverKubelet {
		r.lastDeferred = strings.Join(a.opts.Kubelet.Deferred(), "; ")
	}
	r.conf = newConfigState(src.NoConfigMap, w.cmWhere, a.log, a.opts.Metrics)
	tick := time.NewTicker(src.Interval)
	defer tick.Stop()
	for {
		a.health.tick(time.Now())
		r.pass()
		if !w.awaitNext(ctx, tick.C) {
			return nil
		}
	}
}

// withDefaults fills in what src leaves at zero.
func (src Source) withDefaults() Source {
	if src.ConfigMapNamespace == "" {
		src.ConfigMapNamespace = "koordinator-system"
	}
	if src.ConfigMapName == "" {
		src.ConfigMapName = "slo-controller-config"
	}
	if src.Interval <= 0 {
		src.Interval = DefaultInterval
	}
	if src.SyncTimeout <= 0 {
		src.SyncTimeout = DefaultSyncTimeout
	}
	if src.MinGap <= 0 {
		src.MinGap = DefaultMinGap
	}
	return src
}

// watch is Run's informers: the node's pods, the node and, unless
// NoConfigMap, the QoS ConfigMap; a change to any of them kicks a pass.
type watch struct {
	src     Source
	pods    coreinformers.PodInformer
	nodes   coreinformers.NodeInformer
	cms     coreinformers.ConfigMapInformer
	cmWhere string // the ConfigMap's namespace/name
	// named are the informers started, by what the errors call them:
	// pods, node, then the ConfigMap's unless NoConfigMap.
	named     []namedInformer
	factories []informers.SharedInformerFactory
	werr      watchErrors
	kick      chan struct{}
	stop      chan struct{}
}

type namedInformer struct {
	name string
	inf  cache.SharedIndexInformer
}

// newWatch sets up the informers and their handlers; start starts them.
func newWatch(cs kubernetes.Interface, src Source) (*watch, error) {
	byName := func(name string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	}
	podF := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", src.NodeName).String()
	}))
	nodeF := informers.NewSharedInformerFactoryWithOptions(cs, 0, byName(src.NodeName))
	cmF := informers.NewSharedInformerFactoryWithOptions(cs, 0, byName(src.ConfigMapName), informers.WithNamespace(src.ConfigMapNamespace))
	w := &watch{src: src, pods: podF.Core().V1().Pods(), kick: make(chan struct{}, 1)}
	// The informer keeps only what a pass reads: no managedFields, probes,
	// volumes or unrelated env, so a full node's pods stay small.
	if err := w.pods.Informer().SetTransform(slimPod); err != nil {
		return nil, fmt.Errorf("watch: %w", err)
	}
	w.nodes = nodeF.Core().V1().Nodes()
	w.cms = cmF.Core().V1().ConfigMaps()

	trigger := func() {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger() },
		UpdateFunc: func(any, any) { trigger() },
		DeleteFunc: func(any) { trigger() },
	}
	w.cmWhere = src.ConfigMapNamespace + "/" + src.ConfigMapName
	w.named = []namedInformer{{"pods on node " + src.NodeName, w.pods.Informer()}, {"node " + src.NodeName, w.nodes.Informer()}}
	if !src.NoConfigMap {
		w.named = append(w.named, namedInformer{"configmap " + w.cmWhere, w.cms.Informer()})
	}
	for _, n := range w.named {
		if _, err := n.inf.AddEventHandler(h); err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		if err := n.inf.SetWatchErrorHandlerWithContext(w.werr.handler(n.name)); err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
	}
	w.factories = []informers.SharedInformerFactory{podF, nodeF}
	if !src.NoConfigMap {
		w.factories = append(w.factories, cmF)
	}
	return w, nil
}

func (w *watch) start() {
	w.stop = make(chan struct{})
	for _, f := range w.factories {
		f.Start(w.stop)
	}
}

func (w *watch) shutdown() {
	close(w.stop) // Shutdown waits for the informers, which wait for stop
	for _, f := range w.factories {
		f.Shutdown()
	}
}

// configListErr is the last list or watch error of the ConfigMap's
// informer (not NoConfigMap).
func (w *watch) configListErr() error { return w.werr.get(w.named[2].name) }

// waitForLists waits for the first lists Run needs before a pass. It is
// false when Run should end: with the error, or nil when ctx ended.
func (w *watch) waitForLists(ctx context.Context, h *health) (bool, error) {
	// The pods and the node are needed before anything else; the
	// ConfigMap is waited for below, and a ConfigMap that cannot be read
	// (no such object, or the Role does not cover it) is a bad one.
	h.wait("the first list of pods and of the node")
	syncCtx, cancelSync := context.WithTimeout(ctx, w.src.SyncTimeout)
	synced := cache.WaitForCacheSync(syncCtx.Done(), w.pods.Informer().HasSynced, w.nodes.Informer().HasSynced)
	cancelSync()
	if !synced {
		if ctx.Err() != nil {
			return false, nil
		}
		var missing []string
		for _, n := range w.named[:2] {
			if n.inf.HasSynced() {
				continue
			}
			what := n.name
			if err := w.werr.get(n.name); err != nil {
				what += " (" + err.Error() + ")"
			}
			missing = append(missing, what)
		}
		return false, fmt.Errorf("no list of %s from the API server within %v", strings.Join(missing, " and "), w.src.SyncTimeout)
	}
	// A first pass on the defaults while the ConfigMap is still on its way
	// would drop every pod's protection: wait for it too, until it is
	// listed or the API server has said it cannot be read (configRefused).
	// Past SyncTimeout the loop below keeps waiting, writing nothing.
	if !w.src.NoConfigMap {
		h.wait("the first list of configmap " + w.cmWhere)
		cmCtx, cancelCM := context.WithTimeout(ctx, w.src.SyncTimeout)
		_ = wait.PollUntilContextCancel(cmCtx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return w.cms.Informer().HasSynced() || configRefused(w.configListErr()), nil
		})
		cancelCM()
		if ctx.Err() != nil {
			return false, nil
		}
	}
	return true, nil
}

// awaitNext waits for the next pass: a change, or tick. It is false when
// ctx ends.
func (w *watch) awaitNext(ctx context.Context, tick <-chan time.Time) bool {
	last := time.Now()
	select {
	case <-ctx.Done():
		return false
	case <-w.kick:
		// Events that come during the gap fold into this one pass.
		if gap := w.src.MinGap - time.Since(last); gap > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(gap):
			}
		}
	case <-tick:
	}
	return true
}

// configState is the QoS configuration Run has in force, and what it last
// read and said of the ConfigMap.
//
// The last good configuration stays in force when the ConfigMap turns
// bad: a typo must not drop every pod's protection. With none in force
// yet (a restart, or a helm upgrade that brings a new image and a bad
// qosConfig together), a bad ConfigMap is treated like a failed read:
// nothing is written until it is fixed, and /healthz, the metrics and
// the log say why.
//
// A ConfigMap that does not exist or that the agent may not read is
// bad in the same way: only --no-configmap means the defaults.
type configState struct {
	cfg     *memqos.Config // nil: none in force
	nss     memqos.Namespaces
	err     error  // why the ConfigMap as last read was refused
	version string // the ResourceVersion last read
	// what the log last said: why the ConfigMap could not be read, or
	// why it is not listed yet
	lastUnreadable, lastWait string
	where                    string // the ConfigMap's namespace/name
	log                      *slog.Logger
	metrics                  *Metrics // nil: none
}

// newConfigState starts on the built-in defaults with noConfigMap, else
// on no configuration until the ConfigMap is read.
func newConfigState(noConfigMap bool, where string, log *slog.Logger, m *Metrics) configState {
	c := configState{where: where, log: log, metrics: m}
	if noConfigMap {
		c.cfg, c.nss = &memqos.Config{}, memqos.Namespaces{}
		log.Info("QoS configuration: the built-in defaults (--no-configmap)")
	}
	if m != nil {
		m.ConfigDefaults(noConfigMap)
		m.ConfigUnreadable(false)
	}
	return c
}

// unreadable records that the ConfigMap does not exist or may not be
// read, and says so once per reason.
func (c *configState) unreadable(why string) {
	c.err, c.version = fmt.Errorf("configmap %s: %w: %s", c.where, ErrConfigUnreadable, why), ""
	if why != c.lastUnreadable {
		if c.cfg == nil {
			c.log.Error("QoS configuration unreadable and no good configuration in force: writing nothing until it can be read (--no-configmap runs on the defaults)", "configmap", c.where, "reason", why)
		} else {
			c.log.Error("QoS configuration unreadable: keeping the last good configuration", "configmap", c.where, "reason", why)
		}
		c.lastUnreadable = why
		if c.metrics != nil {
			c.metrics.Error()
		}
	}
	if c.metrics != nil {
		c.metrics.ConfigUnreadable(true)
	}
}

// load reads a new version of the ConfigMap: a good one is in force from
// now on, a bad one leaves the last good one (or none) in force.
func (c *configState) load(cm *corev1.ConfigMap) {
	c.lastUnreadable = ""
	if c.metrics != nil {
		c.metrics.ConfigUnreadable(false)
	}
	cfg, nss, err := FromConfigMap(cm)
	c.err = err
	if err != nil {
		if c.cfg == nil {
			c.log.Error("configmap invalid and no good configuration in force: writing nothing until it is fixed", "keys", BadKeys(err), "err", err)
		} else {
			c.log.Error("configmap invalid: keeping the last good configuration", "keys", BadKeys(err), "err", err)
		}
		if c.metrics != nil {
			c.metrics.Error()
		}
	} else {
		c.cfg, c.nss = cfg, nss
	}
	if c.metrics != nil {
		c.metrics.ConfigValid(BadKeys(err))
	}
	c.version = cm.ResourceVersion
}

// runner is Run's loop: its watches, the configuration in force, and
// what its log last said, so that it says each change once.
type runner struct {
	a    *Agent
	w    *watch
	conf configState
	// what the log last said: what the agent defers to the kubelet, the
	// pods mapping to one cgroup, why a pass wrote nothing, and how many
	// running pods the API's view lacks
	lastDeferred, lastConflicts, lastSkip string
	lastUnknown                           int
}

// pass reconciles once the node is known and a configuration is in force.
func (r *runner) pass() {
	a, src := r.a, r.w.src
	node, err := r.w.nodes.Lister().Get(src.NodeName)
	switch {
	case apierrors.IsNotFound(err):
		a.log.Warn("node not found; waiting", "node", src.NodeName)
		return
	case err != nil:
		a.log.Error("get node", "err", err)
		return
	}
	if !src.NoConfigMap && !r.readConfig() {
		return
	}
	a.health.badConfig(r.conf.err, r.conf.cfg == nil)
	if r.conf.cfg == nil {
		// No configuration in force: planning on an empty one
		// would drop every pod's protection. Write nothing.
		if a.opts.Metrics != nil && r.conf.err != nil {
			a.opts.Metrics.Skipped(SkipBadConfig)
		}
		return
	}
	list, _ := r.w.pods.Lister().List(labels.Everything())
	var alloc int64
	if q, ok := node.Status.Allocatable[corev1.ResourceMemory]; ok && qty.Tame(q) {
		alloc = q.Value()
	}
	rep := a.Reconcile(State{Pods: list, Config: r.conf.cfg, Namespaces: r.conf.nss, NodeLabels: node.Labels, NodeAllocatable: alloc,
		Node: memqos.NodeID{Name: node.Name, UID: node.UID}})
	r.logPass(rep, len(list))
}

// readConfig reads the ConfigMap from the informer's cache into r.conf.
// It is false while the ConfigMap is not listed yet: no pass then.
func (r *runner) readConfig() bool {
	w, a := r.w, r.a
	listErr := w.configListErr()
	switch cm, cmErr := w.cms.Lister().ConfigMaps(w.src.ConfigMapNamespace).Get(w.src.ConfigMapName); {
	case !w.cms.Informer().HasSynced() && configRefused(listErr):
		r.conf.unreadable(listErr.Error())
	case !w.cms.Informer().HasSynced():
		// A throttled, timed-out or failing list says nothing of
		// the configuration: the defaults would drop every pod's
		// protection. Write nothing until it is listed.
		why := "not listed yet"
		if listErr != nil {
			why = listErr.Error()
		}
		a.health.wait("the first list of configmap " + w.cmWhere + " (" + why + "); nothing written until then")
		if why != r.conf.lastWait {
			a.log.Warn("QoS configuration not listed yet; writing nothing until it is", "configmap", w.cmWhere, "reason", why)
			r.conf.lastWait = why
		}
		return false
	case apierrors.IsNotFound(cmErr):
		r.conf.unreadable("no such ConfigMap")
	case cmErr != nil:
		a.log.Error("get configmap", "err", cmErr)
	case cm.ResourceVersion != r.conf.version:
		r.conf.load(cm)
	}
	return true
}

// logPass says what changed since the last pass: conflicts, pods the
// API's view lacks, what the agent defers to the kubelet, other writers,
// and whether passes write; the rest at debug level.
func (r *runner) logPass(rep Report, pods int) {
	a := r.a
	if c := conflictText(rep.Result.Conflicts); c != r.lastConflicts {
		if c != "" {
			a.log.Warn("pods mapping to one cgroup left alone (a forged kubernetes.io/config.mirror?)", "conflicts", c)
		}
		r.lastConflicts = c
	}
	if rep.Unknown != r.lastUnknown {
		if rep.Unknown > 0 {
			a.log.Warn("the kubelet runs pods the API's view lacks; their values are kept", "pods", rep.Unknown, "lag", rep.ViewLag)
		}
		r.lastUnknown = rep.Unknown
	}
	if d := strings.Join(rep.Deferred, "; "); d != r.lastDeferred {
		r.logKubelet()
		r.lastDeferred = d
	}
	for _, f := range rep.Foreign {
		a.log.Warn("another writer changed a file the agent owns", "cgroup", a.files.cgroupPath(f.Dir), "file", f.File,
			"level", LevelName(f.Level), "wrote", manage.FormatValue(f.Wrote), "found", manage.FormatValue(f.Found))
	}
	if rep.SkipReason != r.lastSkip {
		if rep.SkipReason != "" {
			a.log.Warn("reconcile wrote nothing", "reason", rep.Skip, "detail", rep.SkipReason)
		} else if r.lastSkip != "" {
			a.log.Info("reconciling again", "was", r.lastSkip)
		}
		r.lastSkip = rep.SkipReason
	}
	a.log.Debug("reconciled", "pods", pods, "values", len(rep.Values), "changed", len(rep.Apply.Changed),
		"errors", len(rep.Apply.Errors), "duration", rep.Duration)
	for _, w := range rep.Result.Warnings {
		a.log.Debug("plan", "warning", w)
	}
}

// slimPod is the pod informer's transform (memqos.Slim).
func slimPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return memqos.Slim(p), nil
	}
	return obj, nil
}

// ErrConfigUnreadable is the error /healthz names when the QoS ConfigMap
// does not exist or may not be read.
var ErrConfigUnreadable = errors.New("unreadable (no such ConfigMap, or not the agent's to read)")

// configRefused reports whether a list error of the ConfigMap is the API
// server's answer about the configuration itself (no such object, or not
// ours to read): a bad ConfigMap. Anything else (429 from API priority
// and fairness, a timeout, a 5xx) is a hiccup, not an answer.
func configRefused(err error) bool {
	return err != nil && (apierrors.IsNotFound(err) || apierrors.IsForbidden(err))
}

func conflictText(cs []memqos.Conflict) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, string(c.UID)+": "+strings.Join(c.Pods, ", "))
	}
	return strings.Join(parts, "; ")
}

// learnKubelet decides what the kubelet's own Memory QoS writes: from its
// configuration file when one is given, else from src.KubeletMode (its
// version's defaults by default), with the node's kubelet version deciding
// the defaults either way. The values the kubelet writes may still show
// TieredReservation later (Reconcile).
func learnKubelet(src Source, nodes corelisters.NodeLister) (KubeletQoS, error) {
	var version string
	if node, err := nodes.Get(src.NodeName); err == nil {
		version = node.Status.NodeInfo.KubeletVersion
	}
	if src.KubeletConfig == "" {
		return KubeletMode(src.KubeletMode, version)
	}
	if src.KubeletMode != "" && src.KubeletMode != KubeletAuto {
		return KubeletQoS{}, fmt.Errorf("--kubelet-config and --kubelet-memory-qos=%s: give one", src.KubeletMode)
	}
	b, err := readBounded(src.KubeletConfig)
	if err != nil {
		return KubeletQoS{}, fmt.Errorf("kubelet config: %w", err)
	}
	k, err := ParseKubeletConfig(src.KubeletConfig, b, version)
	if err != nil {
		return KubeletQoS{}, fmt.Errorf("kubelet config: %w", err)
	}
	return k, nil
}

// logKubelet says which files at which levels the agent leaves to the
// kubelet, and why.
func (r *runner) logKubelet() {
	a := r.a
	a.mu.Lock()
	k, take, v := a.opts.Kubelet, a.opts.TakeOverKubelet, a.layout.Version
	a.mu.Unlock()
	switch {
	case v != 2:
		a.log.Info("kubelet memory QoS: cgroup v1, where the kubelet writes none of the agent's files")
	case take && k.Active:
		a.log.Warn("kubelet memory QoS: taking over (--take-over-kubelet-memory-qos): the agent writes every level", "kubelet", k.Reason)
	case !k.Active:
		a.log.Info("kubelet memory QoS: the agent writes every level", "kubelet", k.Reason)
	default:
		a.log.Info("kubelet memory QoS: deferring to the kubelet", "kubelet", k.Reason, "defers", strings.Join(k.Deferred(), "; "))
		if _, owned := k.Owns(memqos.LevelContainer, memqos.FileLow); owned && a.layout.RecursiveProt < 0 {
			a.log.Warn("cgroup2 is mounted without memory_recursiveprot: the pods' memory.min/low protect none of their containers' pages while the kubelet keeps the containers' values; mount it with memory_recursiveprot (systemd does)")
		}
	}
}

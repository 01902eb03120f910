package agent

import (
	"context"
	"errors"
	"fmt"
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
	pods := podF.Core().V1().Pods()
	// The informer keeps only what a pass reads: no managedFields, probes,
	// volumes or unrelated env, so a full node's pods stay small.
	if err := pods.Informer().SetTransform(slimPod); err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	nodes := nodeF.Core().V1().Nodes()
	cms := cmF.Core().V1().ConfigMaps()

	kick := make(chan struct{}, 1)
	trigger := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger() },
		UpdateFunc: func(any, any) { trigger() },
		DeleteFunc: func(any) { trigger() },
	}
	var werr watchErrors
	cmWhere := src.ConfigMapNamespace + "/" + src.ConfigMapName
	named := []struct {
		name string
		inf  cache.SharedIndexInformer
	}{{"pods on node " + src.NodeName, pods.Informer()}, {"node " + src.NodeName, nodes.Informer()}}
	if !src.NoConfigMap {
		named = append(named, struct {
			name string
			inf  cache.SharedIndexInformer
		}{"configmap " + cmWhere, cms.Informer()})
	}
	for _, n := range named {
		if _, err := n.inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if err := n.inf.SetWatchErrorHandlerWithContext(werr.handler(n.name)); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
	}
	stop := make(chan struct{})
	factories := []informers.SharedInformerFactory{podF, nodeF}
	if !src.NoConfigMap {
		factories = append(factories, cmF)
	}
	for _, f := range factories {
		f.Start(stop)
	}
	defer func() {
		close(stop) // Shutdown waits for the informers, which wait for stop
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	// The pods and the node are needed before anything else; the
	// ConfigMap is waited for below, and a ConfigMap that cannot be read
	// (no such object, or the Role does not cover it) is a bad one.
	a.health.wait("the first list of pods and of the node")
	syncCtx, cancelSync := context.WithTimeout(ctx, src.SyncTimeout)
	synced := cache.WaitForCacheSync(syncCtx.Done(), pods.Informer().HasSynced, nodes.Informer().HasSynced)
	cancelSync()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		var missing []string
		for _, n := range named[:2] {
			if n.inf.HasSynced() {
				continue
			}
			what := n.name
			if err := werr.get(n.name); err != nil {
				what += " (" + err.Error() + ")"
			}
			missing = append(missing, what)
		}
		return fmt.Errorf("no list of %s from the API server within %v", strings.Join(missing, " and "), src.SyncTimeout)
	}
	// A first pass on the defaults while the ConfigMap is still on its way
	// would drop every pod's protection: wait for it too, until it is
	// listed or the API server has said it cannot be read (configRefused).
	// Past SyncTimeout the loop below keeps waiting, writing nothing.
	if !src.NoConfigMap {
		a.health.wait("the first list of configmap " + cmWhere)
		cmCtx, cancelCM := context.WithTimeout(ctx, src.SyncTimeout)
		_ = wait.PollUntilContextCancel(cmCtx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			return cms.Informer().HasSynced() || configRefused(werr.get(named[2].name)), nil
		})
		cancelCM()
		if ctx.Err() != nil {
			return nil
		}
	}
	// lastDeferred is what the log last said the agent defers to.
	var lastDeferred string
	if err := a.learnKubelet(src, nodes.Lister()); err != nil {
		return err
	}
	if src.NoConfigMap {
		cmWhere = "none (--no-configmap: the built-in defaults)"
	}
	a.log.Info("watching", "node", src.NodeName, "configmap", cmWhere,
		"cgroup_version", a.layout.Version, "driver", a.layout.Driver, "kubepods", a.layout.Kubepods, "interval", src.Interval)
	a.logKubelet()
	if a.layout.Version == 2 && !a.opts.TakeOverKubelet {
		lastDeferred = strings.Join(a.opts.Kubelet.Deferred(), "; ")
	}

	// The last good configuration stays in force when the ConfigMap turns
	// bad: a typo must not drop every pod's protection. With none in force
	// yet (a restart, or a helm upgrade that brings a new image and a bad
	// qosConfig together), a bad ConfigMap is treated like a failed read:
	// nothing is written until it is fixed, and /healthz, the metrics and
	// the log say why.
	//
	// A ConfigMap that does not exist or that the agent may not read is
	// bad in the same way: only --no-configmap means the defaults.
	var cfg *memqos.Config
	var cfgErr error // why the ConfigMap as last read was refused
	var nss memqos.Namespaces
	var cmVersion, lastUnreadable, lastSkip, lastWait, lastConflicts string
	lastUnknown := 0
	if src.NoConfigMap {
		cfg, nss = &memqos.Config{}, memqos.Namespaces{}
		a.log.Info("QoS configuration: the built-in defaults (--no-configmap)")
	}
	if a.opts.Metrics != nil {
		a.opts.Metrics.ConfigDefaults(src.NoConfigMap)
		a.opts.Metrics.ConfigUnreadable(false)
	}
	unreadable := func(why string) {
		cfgErr, cmVersion = fmt.Errorf("configmap %s: %w: %s", cmWhere, ErrConfigUnreadable, why), ""
		if why != lastUnreadable {
			if cfg == nil {
				a.log.Error("QoS configuration unreadable and no good configuration in force: writing nothing until it can be read (--no-configmap runs on the defaults)", "configmap", cmWhere, "reason", why)
			} else {
				a.log.Error("QoS configuration unreadable: keeping the last good configuration", "configmap", cmWhere, "reason", why)
			}
			lastUnreadable = why
			if a.opts.Metrics != nil {
				a.opts.Metrics.Error()
			}
		}
		if a.opts.Metrics != nil {
			a.opts.Metrics.ConfigUnreadable(true)
		}
	}
	tick := time.NewTicker(src.Interval)
	defer tick.Stop()
	for {
		a.health.tick(time.Now())
		node, err := nodes.Lister().Get(src.NodeName)
		switch {
		case apierrors.IsNotFound(err):
			a.log.Warn("node not found; waiting", "node", src.NodeName)
		case err != nil:
			a.log.Error("get node", "err", err)
		default:
			if !src.NoConfigMap {
				listErr := werr.get(named[2].name)
				switch cm, cmErr := cms.Lister().ConfigMaps(src.ConfigMapNamespace).Get(src.ConfigMapName); {
				case !cms.Informer().HasSynced() && configRefused(listErr):
					unreadable(listErr.Error())
				case !cms.Informer().HasSynced():
					// A throttled, timed-out or failing list says nothing of
					// the configuration: the defaults would drop every pod's
					// protection. Write nothing until it is listed.
					why := "not listed yet"
					if listErr != nil {
						why = listErr.Error()
					}
					a.health.wait("the first list of configmap " + cmWhere + " (" + why + "); nothing written until then")
					if why != lastWait {
						a.log.Warn("QoS configuration not listed yet; writing nothing until it is", "configmap", cmWhere, "reason", why)
						lastWait = why
					}
					goto next
				case apierrors.IsNotFound(cmErr):
					unreadable("no such ConfigMap")
				case cmErr != nil:
					a.log.Error("get configmap", "err", cmErr)
				case cm.ResourceVersion != cmVersion:
					lastUnreadable = ""
					if a.opts.Metrics != nil {
						a.opts.Metrics.ConfigUnreadable(false)
					}
					c, n, perr := FromConfigMap(cm)
					cfgErr = perr
					if perr != nil {
						if cfg == nil {
							a.log.Error("configmap invalid and no good configuration in force: writing nothing until it is fixed", "keys", BadKeys(perr), "err", perr)
						} else {
							a.log.Error("configmap invalid: keeping the last good configuration", "keys", BadKeys(perr), "err", perr)
						}
						if a.opts.Metrics != nil {
							a.opts.Metrics.Error()
						}
					} else {
						cfg, nss = c, n
					}
					if a.opts.Metrics != nil {
						a.opts.Metrics.ConfigValid(BadKeys(perr))
					}
					cmVersion = cm.ResourceVersion
				}
			}
			a.health.badConfig(cfgErr, cfg == nil)
			if cfg == nil {
				// No configuration in force: planning on an empty one
				// would drop every pod's protection. Write nothing.
				if a.opts.Metrics != nil && cfgErr != nil {
					a.opts.Metrics.Skipped(SkipBadConfig)
				}
				goto next
			}
			list, _ := pods.Lister().List(labels.Everything())
			var alloc int64
			if q, ok := node.Status.Allocatable[corev1.ResourceMemory]; ok && qty.Tame(q) {
				alloc = q.Value()
			}
			rep := a.Reconcile(State{Pods: list, Config: cfg, Namespaces: nss, NodeLabels: node.Labels, NodeAllocatable: alloc,
				Node: memqos.NodeID{Name: node.Name, UID: node.UID}})
			if c := conflictText(rep.Result.Conflicts); c != lastConflicts {
				if c != "" {
					a.log.Warn("pods mapping to one cgroup left alone (a forged kubernetes.io/config.mirror?)", "conflicts", c)
				}
				lastConflicts = c
			}
			if rep.Unknown != lastUnknown {
				if rep.Unknown > 0 {
					a.log.Warn("the kubelet runs pods the API's view lacks; their values are kept", "pods", rep.Unknown, "lag", rep.ViewLag)
				}
				lastUnknown = rep.Unknown
			}
			if d := strings.Join(rep.Deferred, "; "); d != lastDeferred {
				a.logKubelet()
				lastDeferred = d
			}
			for _, f := range rep.Foreign {
				a.log.Warn("another writer changed a file the agent owns", "cgroup", a.cgroupPath(f.Dir), "file", f.File,
					"level", LevelName(f.Level), "wrote", manage.FormatValue(f.Wrote), "found", manage.FormatValue(f.Found))
			}
			if rep.SkipReason != lastSkip {
				if rep.SkipReason != "" {
					a.log.Warn("reconcile wrote nothing", "reason", rep.Skip, "detail", rep.SkipReason)
				} else if lastSkip != "" {
					a.log.Info("reconciling again", "was", lastSkip)
				}
				lastSkip = rep.SkipReason
			}
			a.log.Debug("reconciled", "pods", len(list), "values", len(rep.Values), "changed", len(rep.Apply.Changed),
				"errors", len(rep.Apply.Errors), "duration", rep.Duration)
			for _, w := range rep.Result.Warnings {
				a.log.Debug("plan", "warning", w)
			}
		}
	next:
		last := time.Now()
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
			// Events that come during the gap fold into this one pass.
			if gap := src.MinGap - time.Since(last); gap > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(gap):
				}
			}
		case <-tick.C:
		}
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
func (a *Agent) learnKubelet(src Source, nodes corelisters.NodeLister) error {
	var version string
	if node, err := nodes.Get(src.NodeName); err == nil {
		version = node.Status.NodeInfo.KubeletVersion
	}
	var k KubeletQoS
	if src.KubeletConfig != "" {
		if src.KubeletMode != "" && src.KubeletMode != KubeletAuto {
			return fmt.Errorf("--kubelet-config and --kubelet-memory-qos=%s: give one", src.KubeletMode)
		}
		b, err := readBounded(src.KubeletConfig)
		if err != nil {
			return fmt.Errorf("kubelet config: %w", err)
		}
		if k, err = ParseKubeletConfig(src.KubeletConfig, b, version); err != nil {
			return fmt.Errorf("kubelet config: %w", err)
		}
	} else {
		var err error
		if k, err = KubeletMode(src.KubeletMode, version); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.opts.Kubelet = k
	a.mu.Unlock()
	return nil
}

// logKubelet says which files at which levels the agent leaves to the
// kubelet, and why.
func (a *Agent) logKubelet() {
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

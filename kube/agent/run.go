package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gofit-dev/gofit/kube/memqos"
)

// Source says where the agent's inputs live in the cluster.
type Source struct {
	NodeName string
	// ConfigMap holding resource-qos-config and memory-qos; koordinator's
	// koordinator-system/slo-controller-config by default.
	ConfigMapNamespace string
	ConfigMapName      string
	// Interval between reconciles without events (default 10s).
	Interval time.Duration
}

// DefaultInterval is the reconcile interval when nothing happens.
const DefaultInterval = 10 * time.Second

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
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), nodes.Informer(), cms.Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
	}
	stop := make(chan struct{})
	for _, f := range []informers.SharedInformerFactory{podF, nodeF, cmF} {
		f.Start(stop)
	}
	defer func() {
		close(stop) // Shutdown waits for the informers, which wait for stop
		podF.Shutdown()
		nodeF.Shutdown()
		cmF.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced, nodes.Informer().HasSynced, cms.Informer().HasSynced) {
		return ctx.Err()
	}
	a.log.Info("watching", "node", src.NodeName, "configmap", src.ConfigMapNamespace+"/"+src.ConfigMapName,
		"cgroup_version", a.layout.Version, "driver", a.layout.Driver, "kubepods", a.layout.Kubepods, "interval", src.Interval)

	// The last good configuration stays in force when the ConfigMap turns
	// bad: a typo must not drop every pod's protection.
	var cfg *memqos.Config
	var nss memqos.Namespaces
	var cmVersion string
	tick := time.NewTicker(src.Interval)
	defer tick.Stop()
	for {
		node, err := nodes.Lister().Get(src.NodeName)
		switch {
		case apierrors.IsNotFound(err):
			a.log.Warn("node not found; waiting", "node", src.NodeName)
		case err != nil:
			a.log.Error("get node", "err", err)
		default:
			cm, cmErr := cms.Lister().ConfigMaps(src.ConfigMapNamespace).Get(src.ConfigMapName)
			switch {
			case apierrors.IsNotFound(cmErr):
				cfg, nss, cmVersion = &memqos.Config{}, memqos.Namespaces{}, ""
			case cmErr != nil:
				a.log.Error("get configmap", "err", cmErr)
			case cm.ResourceVersion != cmVersion:
				c, n, perr := FromConfigMap(cm)
				if perr != nil {
					a.log.Error("configmap ignored; keeping the last good configuration", "err", perr)
					if a.opts.Metrics != nil {
						a.opts.Metrics.Error()
					}
				} else {
					cfg, nss = c, n
				}
				cmVersion = cm.ResourceVersion
			}
			if cfg == nil {
				cfg = &memqos.Config{}
			}
			list, _ := pods.Lister().List(labels.Everything())
			alloc := node.Status.Allocatable[corev1.ResourceMemory]
			rep := a.Reconcile(State{Pods: list, Config: cfg, Namespaces: nss, NodeLabels: node.Labels, NodeAllocatable: alloc.Value()})
			a.log.Debug("reconciled", "pods", len(list), "values", len(rep.Values), "changed", len(rep.Apply.Changed),
				"errors", len(rep.Apply.Errors), "duration", rep.Duration)
			for _, w := range rep.Result.Warnings {
				a.log.Debug("plan", "warning", w)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick.C:
		}
	}
}

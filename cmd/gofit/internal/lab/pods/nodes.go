//go:build !nokube

package pods

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// trialNodes is the pod runner's choice of nodes: the nodes --node-selector
// picks for trials, one trial on each at a time, what the fewest of them
// offer a pod, and the nodes the trials ran on.
type trialNodes struct {
	cs       kubernetes.Interface
	selector map[string]string
	// names are the trial nodes; slots hold those free for a trial, one
	// each at a time. "" is one node the scheduler places (the nodes
	// could not be listed).
	names []string
	slots chan string
	// cpus and alloc are nodePlan's cpus and alloc (0: the nodes
	// could not be listed), less the load pod's request where it shares.
	cpus  int
	alloc float64
	mu    sync.Mutex
	used  []string // nodes trials ran on, in order of first use
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

// choose finds the trial nodes, and the load pod's node: one outside the
// selector, else, with more than one trial node, the last of them (""
// where the load pod may go anywhere); listed is false when the nodes
// could not be listed.
func (t *trialNodes) choose(ctx context.Context) (loadNode string, listed bool, err error) {
	nodes, listed := t.list(ctx)
	if listed {
		if len(nodes.trial) == 0 {
			return "", listed, fmt.Errorf("--node-selector %q: no Ready, schedulable node without a NoSchedule or NoExecute taint matches (the lab's pods tolerate none)", labels.Set(t.selector).String())
		}
		loadNode = nodes.load
		if loadNode == "" && len(nodes.trial) > 1 {
			// Give the load a node of its own; the trials keep the rest.
			loadNode, nodes.trial = nodes.trial[len(nodes.trial)-1], nodes.trial[:len(nodes.trial)-1]
		}
	} else {
		nodes.trial = []string{""}
	}
	t.names = nodes.trial
	t.cpus, t.alloc = nodes.cpus, nodes.alloc
	if listed && loadNode == "" {
		// The load pod's request shares a trial node.
		q := resource.MustParse(loadCPURequest)
		t.alloc -= q.AsApproximateFloat64()
	}
	t.slots = make(chan string, len(t.names))
	for _, n := range nodes.trial {
		t.slots <- n
	}
	return loadNode, listed, nil
}

// list finds the trial nodes; listed is false when this user may
// not list nodes (a namespace-scoped Role): the scheduler then picks.
// The lab's pods tolerate no taint, so a node with a NoSchedule or
// NoExecute taint (a control plane, a dedicated pool) is none of them:
// a trial waiting there would never start.
func (t *trialNodes) list(ctx context.Context) (nodePlan, bool) {
	var p nodePlan
	nl, err := t.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return p, false
	}
	sel := labels.SelectorFromSet(t.selector)
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
			if asked, err := t.requestedCPU(ctx, n.Name); err == nil {
				a -= asked
			}
			if len(p.trial) == 1 || c < p.cpus {
				p.cpus = c
			}
			if len(p.trial) == 1 || a < p.alloc {
				p.alloc = a
			}
		} else if p.load == "" && len(t.selector) > 0 {
			p.load = n.Name
		}
	}
	slices.Sort(p.trial)
	return p, true
}

// requestedCPU is the CPU the pods on node ask for, as the scheduler
// counts it: each pod's containers' requests, or its largest init
// container's if more, and its overhead.
func (t *trialNodes) requestedCPU(ctx context.Context, node string) (float64, error) {
	pl, err := t.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
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

// take waits for a free trial node and takes it; give frees it.
func (t *trialNodes) take(ctx context.Context) (string, error) {
	select {
	case node := <-t.slots:
		return node, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (t *trialNodes) give(node string) { t.slots <- node }

// ranOn notes that a trial ran on node.
func (t *trialNodes) ranOn(node string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !slices.Contains(t.used, node) {
		t.used = append(t.used, node)
	}
}

// usedNodes is the nodes trials ran on, in order of first use.
func (t *trialNodes) usedNodes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.used)
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

func nodeList(ns []string) string {
	if len(ns) == 1 && ns[0] == "" {
		return "the node the scheduler picks (nodes cannot be listed)"
	}
	return strings.Join(ns, ", ")
}

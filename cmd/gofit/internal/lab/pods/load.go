//go:build !nokube

package pods

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// loadPod is the run's load generator: a pod of gofit lab-load from the
// gofit image (--kube-image) that drives every trial's window, over the
// pod network, and serves this run alone (token).
type loadPod struct {
	cs    kubernetes.Interface
	ns    string
	image string // the gofit image
	token string
	pod   *corev1.Pod
	on    string        // its node
	took  time.Duration // how long it took to become ready
}

// start creates the load pod on node ("" anywhere) and waits until it is
// ready; listed says the trial nodes were listed, so node was chosen.
func (lp *loadPod) start(ctx context.Context, pods *runPods, node string, listed bool) error {
	p := pods.pod(roleLoad, node, podTarget{image: lp.image, flag: "--kube-image", args: []string{LoadCommand, ":" + strconv.Itoa(loadPort)},
		env: []corev1.EnvVar{{Name: LoadTokenEnv, Value: lp.token}}}, nil, 0, 0, 0,
		&url.URL{Scheme: "http", Host: net.JoinHostPort("0.0.0.0", strconv.Itoa(loadPort)), Path: "/healthz"})
	// Burstable, not BestEffort: the node neither evicts nor OOM-kills
	// the generator first, and the scheduler counts a share of CPU for it.
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(loadCPURequest), corev1.ResourceMemory: resource.MustParse(loadMemoryRequest)}
	if listed {
		// Anywhere (it shares a trial node), or pinned to its node alone:
		// that node is usually one the trials' --node-selector does not
		// match.
		p.Spec.NodeSelector = nil
	}
	created, err := lp.cs.CoreV1().Pods(lp.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the load pod: %w", err)
	}
	// The pod as created stays known (its name, in the error and in
	// where the study ran) when the wait cannot read it back; the run's
	// clean-up deletes it with the rest, by the run's label.
	lp.pod = created
	began := time.Now()
	ready, err := pods.waitReady(ctx, created.Name, "--kube-image "+lp.image, 2*time.Minute)
	if ready != nil {
		lp.pod = ready
	}
	if err != nil {
		return fmt.Errorf("the load pod %s/%s: %w", lp.ns, created.Name, err)
	}
	lp.on = lp.pod.Spec.NodeName
	lp.took = time.Since(began)
	return nil
}

func (lp *loadPod) name() string {
	if lp.pod == nil {
		return ""
	}
	return lp.pod.Name
}

// drive has the load pod run one window.
func (lp *loadPod) drive(ctx context.Context, q loadRequest) (loadReply, error) {
	var rep loadReply
	body, err := json.Marshal(q)
	if err != nil {
		return rep, err
	}
	b, err := lp.cs.CoreV1().RESTClient().Post().Namespace(lp.ns).Resource("pods").Name(lp.pod.Name+":"+strconv.Itoa(loadPort)).
		SubResource("proxy").Suffix(loadPath).Body(body).SetHeader("Content-Type", "application/json").SetHeader(loadTokenHeader, lp.token).DoRaw(ctx)
	if err != nil {
		return rep, fmt.Errorf("the load pod %s: %w: %s", lp.pod.Name, err, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("the load pod %s: %w", lp.pod.Name, err)
	}
	rep.Result.Blocks = rep.Blocks
	rep.Result.Duration = time.Duration(rep.Result.Seconds * float64(time.Second))
	return rep, nil
}

// cpuSeconds is the CPU the load pod's generator has used: the run's
// generator CPU, since the generator is the load pod, not this process.
func (lp *loadPod) cpuSeconds() (float64, error) {
	var gen struct {
		CPU float64 `json:"cpu_seconds"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := proxyJSON(ctx, lp.cs, lp.ns, lp.pod.Name+":"+strconv.Itoa(loadPort), "", loadCPUPath, &gen)
	return gen.CPU, err
}

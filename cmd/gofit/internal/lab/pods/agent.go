//go:build !nokube

package pods

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/agent"
)

// nodeAgents is the pod runner's client of the gofit node agents: the
// agent on each trial node, found once, its node's facts, and how to
// read a pod's cgroup from it (over https with a token of the run's
// ServiceAccount where it serves --metrics-secure).
type nodeAgents struct {
	cs         kubernetes.Interface
	ns         string   // the run's namespace: its ServiceAccount's
	namespaces []string // where to look for the agents
	account    string   // the run's ServiceAccount (--agent-account)
	budget     time.Duration
	mu         sync.Mutex
	pod        map[string]string // node → agent pod name:port
	ip         map[string]string // node → the agent's IP:port on the pod network
	of         map[string]string // node → the agent's namespace
	// secure: the node's agent serves --metrics-secure (TLS, and a
	// token the API server vouches for); token is the run's token
	// for it, minted once (account's).
	secure map[string]bool
	token  string
	nodes  map[string]agent.NodeInfo
}

func newNodeAgents(cs kubernetes.Interface, ns string, namespaces []string, account string, budget time.Duration) *nodeAgents {
	return &nodeAgents{cs: cs, ns: ns, namespaces: namespaces, account: account, budget: budget,
		pod: map[string]string{}, ip: map[string]string{}, of: map[string]string{}, secure: map[string]bool{}, nodes: map[string]agent.NodeInfo{}}
}

// find finds the gofit node agent on node and reads the node's facts
// once.
func (a *nodeAgents) find(ctx context.Context, node string) (ns, pod string, err error) {
	a.mu.Lock()
	pod, ok := a.pod[node]
	ns = a.of[node]
	a.mu.Unlock()
	if ok {
		return ns, pod, nil
	}
	var tried []string
	for _, ans := range a.namespaces {
		pl, err := a.cs.CoreV1().Pods(ans).List(ctx, metav1.ListOptions{LabelSelector: agentLabel, FieldSelector: "spec.nodeName=" + node})
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
					if tok, err = a.runToken(ctx); err != nil {
						return "", "", fmt.Errorf("the gofit node agent %s/%s on %s serves --metrics-secure: %w", ans, p.Name, node, err)
					}
				}
				var info agent.NodeInfo
				if err := proxyJSON(ctx, a.cs, ans, pod, tok, agent.NodeInfoPath, &info); err != nil {
					return "", "", fmt.Errorf("the gofit node agent %s/%s on %s: %w (is it this version or later?%s)", ans, p.Name, node, err, forbiddenHint(err, secure, a.ns, a.account))
				}
				a.mu.Lock()
				a.pod[node], a.of[node], a.nodes[node], a.secure[node] = pod, ans, info, secure
				a.ip[node] = net.JoinHostPort(p.Status.PodIP, pod[strings.LastIndexByte(pod, ':')+1:])
				a.mu.Unlock()
				return ans, pod, nil
			}
		}
		tried = append(tried, ans+": no running agent pod there")
	}
	return "", "", fmt.Errorf("node %s: --kube reads each trial's cgroup through the gofit node agent on its node, and found none (%s); install it (docs/install.md) or name its namespace with --agent-namespace", node, strings.Join(tried, "; "))
}

// runToken mints, once, a token of the run's ServiceAccount that
// lasts the study's budget and an hour more: the agents review it
// (TokenReview) and check its right to get /v1/ (SubjectAccessReview).
func (a *nodeAgents) runToken(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" {
		return a.token, nil
	}
	secs := int64((a.budget + time.Hour) / time.Second)
	tr, err := a.cs.CoreV1().ServiceAccounts(a.ns).CreateToken(ctx, a.account, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token of ServiceAccount %s/%s to read it (--agent-account; deploy/lab makes it and grants create on its serviceaccounts/token): %w", a.ns, a.account, err)
	}
	a.token = tr.Status.Token
	return a.token, nil
}

// counters is where the load pod reads the counters of the pod uid on
// node from its agent, over the pod network, and the token that read
// needs ("" over plain http).
func (a *nodeAgents) counters(ctx context.Context, node string, uid types.UID) (addr, auth string, err error) {
	if _, _, err := a.find(ctx, node); err != nil {
		return "", "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	addr = "http://" + a.ip[node] + agent.PodStatsPath + string(uid)
	if a.secure[node] {
		addr, auth = "https"+addr[len("http"):], a.token
	}
	return addr, auth, nil
}

// cgroupOf reads pod's cgroup through its node's agent.
func (a *nodeAgents) cgroupOf(ctx context.Context, p *corev1.Pod) (agent.PodCgroup, error) {
	var out agent.PodCgroup
	ns, ap, err := a.find(ctx, p.Spec.NodeName)
	if err != nil {
		return out, err
	}
	a.mu.Lock()
	tok := ""
	if a.secure[p.Spec.NodeName] {
		tok = a.token
	}
	a.mu.Unlock()
	err = proxyJSON(ctx, a.cs, ns, ap, tok, agent.PodStatsPath+string(p.UID), &out)
	return out, err
}

// node is what node's agent said of it (zero before it was found).
func (a *nodeAgents) node(name string) agent.NodeInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nodes[name]
}

// proxyJSON GETs path from pod (name:port) in ns through the API server;
// with a token, over https with it in agent.TokenHeader, to an agent that
// serves --metrics-secure (the API server keeps the Authorization header).
func proxyJSON(ctx context.Context, cs kubernetes.Interface, ns, pod, tok, path string, v any) error {
	req := cs.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").SubResource("proxy").Suffix(path)
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

// forbiddenHint names the binding an agent's 403 asks for.
func forbiddenHint(err error, secure bool, ns, account string) string {
	if !secure || !apierrors.IsForbidden(err) {
		return ""
	}
	return fmt.Sprintf("; 403 from the agent: ServiceAccount %s/%s needs get on the nonResourceURLs /v1/* (deploy/lab's ClusterRole gofit-lab-agent-reader)", ns, account)
}

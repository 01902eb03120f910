package pods

import (
	"fmt"
	"strings"

	"github.com/gofit-dev/gofit/cmd/gofit/internal/lab/trial"
)

// Options are --kube's flags.
type Options struct {
	Kubeconfig     string
	Context        string
	Namespace      string // "": DefaultNamespace, the one deploy/lab makes
	NodeSelector   string // k=v,k2=v2
	AgentNamespace string // "": where deploy/node or the chart runs it
	// AgentAccount is the ServiceAccount in Namespace whose short-lived
	// token (TokenRequest) reads an agent that serves --metrics-secure
	// ("": DefaultAgentAccount, the one deploy/lab makes).
	AgentAccount string
	Image        string // the gofit image of the load pod and the sample
}

// DefaultNamespace is the namespace deploy/lab makes, with the Roles the
// lab needs: --namespace's default, not the kubeconfig context's nor
// "default", where the run's pods would land beside the user's own.
const DefaultNamespace = "gofit-lab"

// DefaultAgentAccount is the ServiceAccount deploy/lab makes, bound to
// read the node agents' /v1/ paths.
const DefaultAgentAccount = "gofit-lab"

// parseSelector reads k=v,k2=v2 (--node-selector).
func parseSelector(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, usagef("--node-selector %q: want key=value[,key=value]", s)
		}
		out[k] = v
	}
	return out, nil
}

func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{trial.ErrUsage}, a...)...)
}

package webhook

import (
	"net/http"
	"path"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
)

// scopedByName returns cfg with a transport that adds a metadata.name
// field selector to every list and watch of the collections named in
// only (a collection's URL path → the one object's name).
//
// cert-controller's cache lists and watches every Secret in the
// namespace and every MutatingWebhookConfiguration, and offers no way to
// narrow it. An RBAC rule with resourceNames allows a list or a watch
// only with a metadata.name field selector naming one of them, so
// without this the webhook would need to read every Secret in its
// namespace: Helm's release Secrets, the guard's Prometheus token.
// With it, the cache sees only the objects the rotator keeps and the
// Roles grant only those (issue 51, item 4).
func scopedByName(cfg *rest.Config, only map[string]string) *rest.Config {
	c := rest.CopyConfig(cfg)
	prev := c.WrapTransport
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if prev != nil {
			rt = prev(rt)
		}
		return nameSelector{next: rt, only: only}
	}
	return c
}

type nameSelector struct {
	next http.RoundTripper
	only map[string]string
}

func (n nameSelector) RoundTrip(r *http.Request) (*http.Response, error) {
	name, ok := n.only[path.Clean(r.URL.Path)]
	if !ok || r.Method != http.MethodGet {
		return n.next.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
	q := r.URL.Query()
	sel := fields.OneTermEqualSelector("metadata.name", name)
	if have := q.Get("fieldSelector"); have != "" {
		parsed, err := fields.ParseSelector(have)
		if err == nil {
			sel = fields.AndSelectors(parsed, sel)
		}
	}
	q.Set("fieldSelector", sel.String())
	r.URL.RawQuery = q.Encode()
	return n.next.RoundTrip(r)
}

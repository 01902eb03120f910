package agent

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gofit-dev/gofit/kube/kubetest"
)

// TestEnvtestGuarded (issue 51, item 6): the agent's port served
// /metrics and /v1/pods/{uid} (any pod's cgroup stats) in plain HTTP to
// anyone. Guarded serves them only to a caller whose token the API
// server accepts (TokenReview) and who may get the path
// (SubjectAccessReview), over TLS, and leaves the probes open.
func TestEnvtestGuarded(t *testing.T) {
	cfg := kubetest.Start(t, nil)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	token := func(name string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Skipf("skipping: this API server issues no service account tokens: %v", err)
		}
		return tr.Status.Token
	}
	reader, other := token("scraper"), token("tenant")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "gofit-node-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics", "/v1/*"}, Verbs: []string{"get"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	mux := http.NewServeMux()
	for _, p := range []string{"/metrics", "/v1/pods/abc", "/healthz"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served "+p) })
	}
	h, err := Guarded(cfg, mux, logr.Discard(), "/healthz", "/livez")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := SelfSignedTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = tc
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	get := func(path, tok string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, token, who string
		want             int
	}{
		{"/metrics", "", "anyone", http.StatusUnauthorized},
		{"/v1/pods/abc", "", "anyone", http.StatusUnauthorized},
		{"/metrics", other, "an account without the right", http.StatusForbidden},
		{"/v1/pods/abc", other, "an account without the right", http.StatusForbidden},
		{"/metrics", reader, "the reader", http.StatusOK},
		{"/v1/pods/abc", reader, "the reader", http.StatusOK},
		{"/healthz", "", "the kubelet's probe", http.StatusOK},
	} {
		if got := get(tc.path, tc.token); got != tc.want {
			t.Errorf("%s as %s: %d, want %d", tc.path, tc.who, got, tc.want)
		}
	}
	// Through the API server's pod proxy the token comes in TokenHeader,
	// reviewed the same way.
	viaHeader := func(tok string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/pods/abc", nil)
		req.Header.Set(TokenHeader, tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := viaHeader(reader); got != http.StatusOK {
		t.Errorf("/v1/pods/abc with the reader's token in %s: %d, want 200", TokenHeader, got)
	}
	if got := viaHeader(other); got != http.StatusForbidden {
		t.Errorf("/v1/pods/abc with another account's token in %s: %d, want 403", TokenHeader, got)
	}
	// A token the API server does not accept: refused (controller-runtime's
	// filter answers 500, as the TokenReview reports an error for it).
	if got := get("/metrics", "not-a-token"); got == http.StatusOK {
		t.Errorf("/metrics with a forged token: %d", got)
	}
	// Plain HTTP is not served.
	if resp, err := http.Get("http" + srv.URL[len("https"):] + "/metrics"); err == nil {
		if resp.StatusCode == http.StatusOK {
			t.Error("/metrics served over plain HTTP")
		}
		resp.Body.Close()
	}
}

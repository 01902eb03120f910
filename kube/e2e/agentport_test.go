package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gofit-dev/gofit/kube/agent"
)

// The agent serves --metrics-secure as deploy/node and the chart run it:
// TLS with a certificate made at start, /metrics and /v1/ only to a token
// the API server accepts and lets get the path, /healthz and /livez open.
// The steps read it as a scraper would, with the token of a ServiceAccount
// of their own bound to get those paths.
const agentReader = "e2e-agent-reader"

var agentTokens sync.Map // *cluster → token

// agentToken is a token that may read the agent's /metrics and /v1/,
// made once a cluster.
func (g *guestRun) agentToken(t *testing.T) string {
	t.Helper()
	if tok, ok := agentTokens.Load(g.c); ok {
		return tok.(string)
	}
	cs := g.c.cs
	ignore := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := cs.CoreV1().ServiceAccounts("default").Create(g.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: agentReader}}, metav1.CreateOptions{})
	ignore(err)
	_, err = cs.RbacV1().ClusterRoles().Create(g.ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: agentReader},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics", "/v1/*"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	ignore(err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(g.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: agentReader},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: agentReader},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: agentReader, Namespace: "default"}}}, metav1.CreateOptions{})
	ignore(err)
	secs := int64(4 * time.Hour / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(g.ctx, agentReader, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token to read the agent: %v", err)
	}
	agentTokens.Store(g.c, tr.Status.Token)
	return tr.Status.Token
}

// agentClient reads the agent's https port: its certificate is made at
// start, so nothing can pin it; the token authenticates.
var agentClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

// agentGet gets path from the agent at ip over https, with tok ("" none).
func agentGet(ip, path, tok string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://%s:9464%s", ip, path), nil)
	if err != nil {
		return 0, "", err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := agentClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// agentPortGuarded is what the agent step checks of the port: /metrics
// and /v1/ refuse a caller without a token (401) and answer the reader's;
// plain HTTP is not served; /healthz answers without one.
func (g *guestRun) agentPortGuarded(t *testing.T, ip string) {
	t.Helper()
	tok := g.agentToken(t)
	for _, c := range []struct {
		path, tok string
		want      int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{agent.NodeInfoPath, "", http.StatusUnauthorized},
		{"/metrics", tok, http.StatusOK},
		{agent.NodeInfoPath, tok, http.StatusOK},
		{"/healthz", "", http.StatusOK},
	} {
		code, body, err := agentGet(ip, c.path, c.tok)
		if err != nil || code != c.want {
			t.Errorf("agent %s %s (token %v): %d %.200s %v, want %d", ip, c.path, c.tok != "", code, body, err, c.want)
		}
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ip + ":9464/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("agent %s serves /metrics over plain HTTP", ip)
		}
	}
}

//go:build !nokube

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gofit-dev/gofit/kube/kubetest"
)

func TestWebhookFlags(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "c"), filepath.Join(dir, "k")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"webhook"}, 2, "--cert-file and --key-file are required"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--memory-ratio", "1.5"}, 2, "--memory-ratio: bad option: memory ratio 1.5"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--memory-ratio", "NaN"}, 2, "--memory-ratio: bad option: memory ratio NaN"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--memory-ratio", "0"}, 2, "--memory-ratio: bad option: memory ratio 0"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--self-managed-secret", "nons"}, 2, "want NAMESPACE/NAME"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--cpu-request-factor", "-1"}, 2, "--cpu-request-factor: bad option: CPU request factor -1"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--cpu-request-min", "3"}, 2, "--cpu-request-min: bad option: CPU request minimum 3: want 1 or 2"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--cpu-request-factor", "+Inf"}, 2, "--cpu-request-factor: bad option: CPU request factor +Inf"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--gogc", "off"}, 2, "flag provided but not defined: -gogc"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--max-in-flight", "0"}, 2, "--max-in-flight 0: want at least 1"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--go-version", "1.25"}, 2, `--go-version "1.25": want a Go release such as go1.25`},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--self-managed-secret", "a/b"}, 2, "needs --webhook-config and --service-dns"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--webhook-config", "x"}, 2, "go with --self-managed-secret"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--experiment-namespaces", "shop"}, 2, "--experiment-namespaces goes with --experiments"},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key, "--experiments", "--experiment-namespaces", "shop,Web"}, 2, `--experiment-namespaces: "Web" is not a namespace name`},
		{[]string{"webhook", "--cert-file", crt, "--key-file", key}, 1, "stat " + crt},
	} {
		code, _, stderr := run(c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d %q, want %d with %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// gofit webhook as a process: serves from the files alone, fits a pod,
// stops cleanly on SIGTERM.
func TestWebhookServes(t *testing.T) {
	dir := t.TempDir()
	cr := &rotator.CertRotator{CAName: "ca", CAOrganization: "gofit", DNSName: "localhost",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	ca, err := cr.CreateCACert(time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, keyPEM, err := cr.CreateCertPEM(ca, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if os.WriteFile(crt, crtPEM, 0o600) != nil || os.WriteFile(key, keyPEM, 0o600) != nil {
		t.Fatal("write certificate")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	cmd := gofitCmd("webhook", "--addr", addr, "--cert-file", crt, "--key-file", key, "--shutdown-delay", "0", "--ceil")
	var stderr syncBuffer // read while the webhook still writes
	cmd.Stderr = &stderr
	cmd.Env = append(cmd.Env, "KUBECONFIG=/nonexistent") // serving must not need one
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	base := "https://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(base + "/readyz")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v\n%s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",
	  "kind":{"version":"v1","kind":"Pod"},"resource":{"version":"v1","resource":"pods"},"operation":"CREATE",
	  "object":{"metadata":{"name":"p"},"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"1.5","memory":"1Gi"}}}]}}}}`
	resp, err := c.Post(base+"/mutate", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Response struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Patch   []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	// --ceil: 1.5 cores → GOMAXPROCS=2.
	if out.Response.UID != "u1" || !out.Response.Allowed || !strings.Contains(string(out.Response.Patch), `{"name":"GOMAXPROCS","value":"2"}`) {
		t.Errorf("response %s (patch %s)", body, out.Response.Patch)
	}

	// The process says which gofit it is, in its log and as a metric.
	resp, err = c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^gofit_build_info\{goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`).Match(metrics) {
		t.Errorf("/metrics has no gofit_build_info:\n%s", metrics)
	}
	if !strings.Contains(stderr.String(), "msg=\"gofit webhook\" version=") {
		t.Errorf("the log does not start with the version:\n%s", stderr.String())
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15s after SIGTERM")
	}
}

// envtestAssets builds (or finds, cached) kube-apiserver and etcd with the
// kube module's script; KUBEBUILDER_ASSETS wins when set.
func envtestAssets(t *testing.T) string { return kubetest.Assets(t) }

// gofit webhook --self-managed-secret against a real API server: it fills
// the Secret, writes caBundle, serves the certificate once the Secret's
// "volume" has it, and the API server's calls get fitted pods.
func TestWebhookSelfManaged(t *testing.T) {
	env := &envtest.Environment{BinaryAssetsDirectory: envtestAssets(t)}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	}()
	user, err := env.AddUser(envtest.User{Name: "gofit-test", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(cfg)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	url := "https://localhost:" + addr[strings.LastIndex(addr, ":")+1:] + "/mutate"
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	for _, obj := range []func() error{
		func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gofit-system"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps", Labels: map[string]string{"gofit.dev/inject": "enabled"}}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Secrets("gofit-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gofit-webhook-tls"}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "gofit-webhook"},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{
					Name:                    "pods.gofit.dev",
					AdmissionReviewVersions: []string{"v1"},
					ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
					Rules: []admissionregistrationv1.RuleWithOperations{{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					}},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gofit.dev/inject": "enabled"}},
					FailurePolicy:     &ignore,
					SideEffects:       &none,
				}},
			}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := obj(); err != nil {
			t.Fatal(err)
		}
	}

	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := gofitCmd("webhook", "--addr", addr, "--cert-file", filepath.Join(certs, "tls.crt"), "--key-file", filepath.Join(certs, "tls.key"),
		"--self-managed-secret", "gofit-system/gofit-webhook-tls", "--webhook-config", "gofit-webhook", "--service-dns", "localhost",
		"--kubeconfig", kubeconfig, "--cert-poll", "200ms", "--shutdown-delay", "0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	// The kubelet's part: show the Secret's keys as files.
	var caPEM []byte
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := cs.CoreV1().Secrets("gofit-system").Get(ctx, "gofit-webhook-tls", metav1.GetOptions{})
		if err == nil && len(s.Data["tls.crt"]) > 0 {
			for _, k := range []string{"tls.key", "tls.crt"} {
				if err := os.WriteFile(filepath.Join(certs, k), s.Data[k], 0o600); err != nil {
					t.Fatal(err)
				}
			}
			caPEM = s.Data["ca.crt"]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Secret was not filled: %v\n%s", err, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}}}}}}
	for deadline = time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := c.Get("https://" + addr + "/readyz")
		ready := err == nil && resp.StatusCode == 200
		if err == nil {
			resp.Body.Close()
		}
		var env []corev1.EnvVar
		if ready {
			got, err := cs.CoreV1().Pods("apps").Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			env = got.Spec.Containers[0].Env
		}
		if len(env) == 2 && env[0].Name == "GOMAXPROCS" && env[0].Value == "1" && env[1].Name == "GOFIT_RUN" && env[1].Value == "GOMAXPROCS=1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fitted pod (ready %v, env %v)\n%s", ready, env, stderr.String())
		}
	}
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gofit-webhook", metav1.GetOptions{})
	if err != nil || !bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, caPEM) {
		t.Errorf("caBundle is not the Secret's CA: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM\n%s", stderr.String())
	}
}

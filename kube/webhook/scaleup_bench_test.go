package webhook

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gofit-dev/gofit/kube/admission"
	"github.com/gofit-dev/gofit/kube/kubetest"
)

// BenchmarkExperimentScaleUp runs `gofit webhook --experiments` (the
// binary GOFIT_WEBHOOK_BIN names) as its own process with the shipped
// Deployment's GOMAXPROCS=1 and GOMEMLIMIT=115MiB behind a real
// kube-apiserver, and creates 500 pods of one Deployment's ReplicaSet
// through the API, 20 at a time, each asking for a two-arm experiment. It
// reports the webhook's peak RSS (VmHWM) and peak anonymous RSS (sampled
// every 5 ms), against the 128Mi limit, the arms' counts and how many
// pods got no arm. Run with
//
//	GOFIT_WEBHOOK_BIN=/path/to/gofit go test -run '^$' -bench ExperimentScaleUp -benchtime 1x ./webhook
func BenchmarkExperimentScaleUp(b *testing.B) {
	bin := os.Getenv(memBinEnv)
	if bin == "" {
		b.Skip(memBinEnv + " names no gofit binary")
	}
	const pods, parallel = 500, 20
	cfg := kubetest.Start(b, nil)
	cfg.QPS, cfg.Burst = 1000, 1000
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		b.Fatal(err)
	}
	ca, crt, key := newCert(b)
	writeAtomic(b, filepath.Join(dir, "tls.crt"), crt)
	writeAtomic(b, filepath.Join(dir, "tls.key"), key)
	addr := "127.0.0.1:18443"
	cmd := exec.Command(bin, "webhook", "--addr", addr, "--cert-file", filepath.Join(dir, "tls.crt"), "--key-file", filepath.Join(dir, "tls.key"),
		"--shutdown-delay", "0", "--experiments", "--experiment-namespaces", "shop", "--kubeconfig", kubeconfig)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1", "GOMEMLIMIT=115MiB")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	eventually(b, "the webhook process", 30*time.Second, func() bool { return servesCA(addr, ca) })
	url := "https://localhost:18443/mutate" // the certificate is for localhost
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNoneOnDryRun
	timeout := int32(10)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "gofit-scaleup"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.gofit.dev", AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout}}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	var peakAnon atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if v, err := procStatus(cmd.Process.Pid, "RssAnon"); err == nil && v > peakAnon.Load() {
				peakAnon.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	const spec = "name: scale\narms: [{name: a, fit: gofit}, {name: b, fit: none}]"
	pod := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "web-5d8f7-", Namespace: "shop",
			Labels:      map[string]string{"app": "web", "pod-template-hash": "5d8f7"},
			Annotations: map[string]string{admission.AnnotationExperiment: spec},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f7",
				UID: types.UID("uid-web-5d8f7"), Controller: ptr(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
	}
	idle, _ := procStatus(cmd.Process.Pid, "VmHWM")
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan struct{})
	var errs atomic.Int64
	for range parallel {
		wg.Go(func() {
			for range next {
				if _, err := cs.CoreV1().Pods("shop").Create(ctx, pod(), metav1.CreateOptions{}); err != nil {
					if errs.Add(1) == 1 {
						b.Logf("create: %v", err)
					}
				}
			}
		})
	}
	for range pods {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	b.StopTimer()
	close(stop)
	<-sampled
	peak, err := procStatus(cmd.Process.Pid, "VmHWM")
	if err != nil {
		b.Fatalf("%v (the webhook exited?)", err)
	}
	list, err := cs.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	arms := map[string]int{}
	for _, p := range list.Items {
		arms[p.Labels[admission.LabelArm]]++
	}
	b.ReportMetric(float64(idle)/(1<<20), "idle-rss-MiB")
	b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(peakAnon.Load())/(1<<20), "peak-anon-MiB")
	b.ReportMetric(float64(arms[""]), "no-arm")
	b.ReportMetric(float64(errs.Load()), "errors")
	b.Logf("%d pods in %v (%d at a time): arms %v", len(list.Items), took.Round(time.Millisecond), parallel, fmt.Sprint(arms))
}

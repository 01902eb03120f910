//go:build !nokube

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// probeNamespace is the namespace the probe's pod claims: never the
// webhook's own or kube-system, which the webhook leaves alone.
const probeNamespace = "gofit-probe"

// runWebhookProbe sends the webhook what the API server sends it for a
// dry-run pod create (an AdmissionReview, dryRun true) over TLS verified
// against the webhook's CA, and succeeds only if the webhook allows the
// pod and fits it: a JSON patch that sets GOMAXPROCS or GOMEMLIMIT. The
// chart's helm test runs it against the webhook's Service.
func runWebhookProbe(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("webhook probe", stderr)
	target := fs.String("url", "", "the webhook's /mutate `URL`, e.g. https://gofit-webhook.gofit-system.svc/mutate (required)")
	caFile := fs.String("ca-file", "", "the CA `FILE` (PEM) the webhook's serving certificate chains to (required)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: --url %q: want https://HOST[:PORT]/mutate", errUsage, *target)
	}
	if *caFile == "" {
		return fmt.Errorf("%w: --ca-file is required", errUsage)
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("--ca-file %s: no PEM certificate in it", *caFile)
	}
	review, uid, err := probeReview()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(review))
	if err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook probe: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("webhook probe: read the answer: %w", err)
	}
	n, err := checkProbeAnswer(resp.StatusCode, body, uid)
	if err != nil {
		return fmt.Errorf("webhook probe %s: %w", u, err)
	}
	fmt.Fprintf(stdout, "the webhook at %s answered a dry-run admission: allowed, %d patch operations fitting the pod\n", u, n)
	return nil
}

// probeReview is the AdmissionReview of a dry-run create of a pod with a
// Go-sized CPU and memory limit, and its UID.
func probeReview() ([]byte, types.UID, error) {
	uid := types.UID(fmt.Sprintf("gofit-probe-%d", time.Now().UnixNano()))
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "gofit-probe", Namespace: probeNamespace},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "gofit-probe",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, "", err
	}
	dry := true
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: uid,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Name:     pod.Name, Namespace: probeNamespace, Operation: admissionv1.Create, DryRun: &dry,
			Object: runtime.RawExtension{Raw: raw}},
	})
	return b, uid, err
}

// checkProbeAnswer returns the number of patch operations of a webhook's
// answer that allows and fits the probe's pod, else an error saying
// what it lacks.
func checkProbeAnswer(status int, body []byte, uid types.UID) (int, error) {
	if status != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d: %.200s", status, body)
	}
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	switch {
	case r.Response == nil:
		return 0, errors.New("an AdmissionReview without a response")
	case r.Response.UID != uid:
		return 0, fmt.Errorf("the response is for request %q, not %q", r.Response.UID, uid)
	case !r.Response.Allowed:
		return 0, fmt.Errorf("the pod was not allowed: %v", r.Response.Result)
	}
	var ops []struct {
		Op, Path string
		Value    any
	}
	if err := json.Unmarshal(r.Response.Patch, &ops); err != nil || len(ops) == 0 {
		return 0, fmt.Errorf("allowed without a patch (%v): the webhook did not fit the pod", err)
	}
	if p := string(r.Response.Patch); !strings.Contains(p, "GOMAXPROCS") && !strings.Contains(p, "GOMEMLIMIT") {
		return 0, fmt.Errorf("the patch sets neither GOMAXPROCS nor GOMEMLIMIT: %.300s", p)
	}
	return len(ops), nil
}

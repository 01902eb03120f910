//go:build !nokube

package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// kubeClient is a client of the API server from --kubeconfig FILE ("":
// $KUBECONFIG, ~/.kube/config or in-cluster).
func kubeClient(kubeconfig string) (*kubernetes.Clientset, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the API server: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("the API server: %w", err)
	}
	return cs, nil
}

// namespaceList reads a comma-separated list of namespace names given to
// flag; empty entries are skipped.
func namespaceList(flag, value string) ([]string, error) {
	var nss []string
	for _, ns := range strings.Split(value, ",") {
		if ns = strings.TrimSpace(ns); ns == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, fmt.Errorf("%w: --%s: %q is not a namespace name", errUsage, flag, ns)
		}
		nss = append(nss, ns)
	}
	return nss, nil
}

// serveMetrics serves reg's /metrics, and the more handlers by their
// patterns, on addr until the returned stop is called; addr "" serves
// nothing.
func serveMetrics(addr string, reg *prometheus.Registry, more map[string]http.Handler) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for pattern, h := range more {
		mux.Handle(pattern, h)
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	go srv.Serve(l)
	return func() { srv.Close() }, nil
}

#!/usr/bin/env bash
# Build a cAdvisor from its Go module (github.com/google/cadvisor/lib, the
# library the kubelet links; the module proxy serves no cmd/ module) and
# cache it by version. Prints the binary's path on its last line; progress
# goes to stderr. kube/monitoring's TestRealPrometheus scrapes it.
#
# The binary is the kubelet's /metrics/cadvisor without the kubelet: the
# cAdvisor manager with the raw cgroup factory (no Docker, no CRI: what
# --docker_only=false with the raw factory watches), limited to the cgroups
# under -raw-prefix (comma-separated paths: on a v1 host each controller
# may place a group elsewhere), and the kubelet's container label function (namespace,
# pod, container from the container runtime's labels). With no runtime to
# ask, the labels of each cgroup come from a JSON file (-labels), re-read
# at every scrape: {"/cgroup/path": {"namespace": ..., "pod": ...,
# "container": ...}}.
#
#   CADVISOR_VERSION (default 0.60.6),
#   GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
CADVISOR_VERSION=${CADVISOR_VERSION:-0.60.6}
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
OUT="$CACHE/cadvisor/v$CADVISOR_VERSION-$(sha256sum "$0" | cut -c1-8)"
GO=${GO:-go}

if [[ -x "$OUT/cadvisor" ]]; then
  echo "$OUT/cadvisor"; exit 0
fi
mkdir -p "$OUT"
work=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GOWORK=off GOFLAGS=-mod=mod

# shellcheck source=progress.sh
source "$(dirname "$0")/progress.sh"

cat > "$work/main.go" <<'GO'
// Command cadvisor serves cAdvisor's container metrics for the cgroups
// under -raw-prefix, labelled as the kubelet labels them.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/cadvisor/lib/cache/memory"
	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	"github.com/google/cadvisor/lib/metrics"
	info "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/clock"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:8080", "address to serve /metrics/cadvisor on")
	prefixes := flag.String("raw-prefix", "/", "watch only the cgroups under these paths (comma-separated)")
	labels := flag.String("labels", "", "JSON file: cgroup path -> namespace, pod, container")
	interval := flag.Duration("housekeeping", time.Second, "how often each cgroup is read")
	flag.Parse()

	allow := false
	m, err := manager.New(memory.New(2*time.Minute, nil), sysfs.NewRealSysFs(),
		manager.HousekeepingConfig{Interval: interval, AllowDynamic: &allow},
		container.MetricSet{container.CpuUsageMetrics: {}, container.MemoryUsageMetrics: {}, container.OOMMetrics: {}, container.PressureMetrics: {}},
		strings.Split(*prefixes, ","), nil, "", 0)
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Start(); err != nil {
		log.Fatal(err)
	}
	// The kubelet's containerPrometheusLabelsFunc: id, and namespace, pod
	// and container where the runtime names them (here: the file).
	labelsOf := func(c *info.ContainerInfo) map[string]string {
		set := map[string]string{metrics.LabelID: c.Name}
		if *labels == "" {
			return set
		}
		b, err := os.ReadFile(*labels)
		if err != nil {
			return set
		}
		var byPath map[string]map[string]string
		if json.Unmarshal(b, &byPath) != nil {
			return set
		}
		for k, v := range byPath[c.Name] {
			set[k] = v
		}
		return set
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewPrometheusCollector(m, labelsOf,
		container.MetricSet{container.CpuUsageMetrics: {}, container.MemoryUsageMetrics: {}, container.OOMMetrics: {}, container.PressureMetrics: {}},
		clock.RealClock{}, info.RequestOptions{IdType: info.TypeName, Count: 1, Recursive: true}))
	mux := http.NewServeMux()
	mux.Handle("/metrics/cadvisor", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	log.Fatal(http.ListenAndServe(*addr, mux))
}
GO
( cd "$work" && $GO mod init gofit.local/cadvisor >/dev/null 2>&1 &&
  $GO get "github.com/google/cadvisor/lib@v$CADVISOR_VERSION" >/dev/null 2>&1 && $GO mod tidy >&2 )
progress "cadvisor v$CADVISOR_VERSION" bash -c "cd '$work' && CGO_ENABLED=0 $GO build -trimpath -o '$OUT/cadvisor.tmp' . && mv '$OUT/cadvisor.tmp' '$OUT/cadvisor'"
echo "$OUT/cadvisor"

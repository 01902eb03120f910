#!/usr/bin/env bash
# Build kube-state-metrics from its Go module (the module proxy, no release
# download) and cache it by version. Prints the binary's path on its last
# line; progress goes to stderr. The e2e's fleet-alerts, fleet and
# experiment-guard steps run it in the node's VM against the node's API
# server, scraped by the Prometheus there.
#
# kube/hack/ksm/go.mod and go.sum pin kube-state-metrics and every module
# it builds from, with their hashes: the checksum database does not list
# some of them here (kube-state-metrics, k8s.io/sample-controller), so the
# hashes come from the repository, not from a lookup at build time. To move
# to another version: in kube/hack/ksm, `GONOSUMDB=k8s.io go get
# k8s.io/kube-state-metrics/v2@vX.Y.Z`, check the go.sum diff, and change
# KSM_VERSION below to match.
#
#   GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
KSM_VERSION=2.16.0
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
OUT="$CACHE/kube-state-metrics/v$KSM_VERSION-$(cat "$0" "$here/ksm/go.sum" | sha256sum | cut -c1-8)"
GO=${GO:-go}

if [[ -x "$OUT/kube-state-metrics" ]]; then
  echo "$OUT/kube-state-metrics"; exit 0
fi
if ! grep -q "^	k8s.io/kube-state-metrics/v2 v$KSM_VERSION " "$here/ksm/go.mod"; then
  echo "ksm.sh: kube/hack/ksm/go.mod does not pin kube-state-metrics v$KSM_VERSION" >&2
  exit 1
fi
mkdir -p "$OUT"
tmp=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=progress.sh
source "$(dirname "$0")/progress.sh"
# -mod=readonly: the build takes go.mod and go.sum as they are and fails
# on a missing or different hash rather than asking the network.
progress "kube-state-metrics v$KSM_VERSION" bash -c "cd '$here/ksm' && GOWORK=off GOFLAGS=-mod=readonly GONOSUMDB=k8s.io/kube-state-metrics,k8s.io/sample-controller CGO_ENABLED=0 $GO build -trimpath -o '$tmp/kube-state-metrics' k8s.io/kube-state-metrics/v2"
mv "$tmp/kube-state-metrics" "$OUT/kube-state-metrics"
echo "$OUT/kube-state-metrics"

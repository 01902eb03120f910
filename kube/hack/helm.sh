#!/usr/bin/env bash
# Build helm from its Go module (the module proxy, no release download) and
# cache it by version. Prints the binary's path on its last line; progress
# goes to stderr. The chart tests (kube/chart) and `make release` use it.
#
#   HELM_VERSION (default 4.3.1; 3.x builds Helm 3),
#   GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-4.3.1}
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
OUT="$CACHE/helm/v$HELM_VERSION"
GO=${GO:-go}

# shellcheck source=progress.sh
source "$(dirname "$0")/progress.sh"
cached helm
# Helm 3 (HELM_VERSION=3.x) lives at helm.sh/helm/v3: most clusters still
# run it, and kube/chart's TestHelm3 renders the chart with both. Its
# default Kubernetes version (helm template, lint) is stamped at build time
# from its client-go, as Helm's Makefile does; unstamped it is 1.20, and a
# chart's kubeVersion >=1.30 fails to render.
major=${HELM_VERSION%%.*}
ldflags=
if [[ $major == 3 ]]; then
  gomod=$(env GOWORK=off $GO mod download -json "helm.sh/helm/v3@v$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
  minor=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod" | head -1)
  [[ -n $minor ]] || { echo "helm.sh: no k8s.io/client-go in $gomod" >&2; exit 1; }
  for p in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$minor"
  done
fi
progress "helm v$HELM_VERSION" env GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$tmp" \
  $GO install -trimpath -ldflags="$ldflags" "helm.sh/helm/v$major/cmd/helm@v$HELM_VERSION"
mv "$tmp/helm" "$OUT/helm"
echo "$OUT/helm"

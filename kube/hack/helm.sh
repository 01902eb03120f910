#!/usr/bin/env bash
# Build helm from its Go module (the module proxy, no release download) and
# cache it by version. Prints the binary's path on its last line; progress
# goes to stderr. The chart tests (kube/chart) and `make release` use it.
#
#   HELM_VERSION (default 4.3.1),
#   GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-4.3.1}
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
OUT="$CACHE/helm/v$HELM_VERSION"
GO=${GO:-go}

if [[ -x "$OUT/helm" ]]; then
  echo "$OUT/helm"; exit 0
fi
mkdir -p "$OUT"
tmp=$(mktemp -d "$OUT/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=progress.sh
source "$(dirname "$0")/progress.sh"
progress "helm v$HELM_VERSION" env GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$tmp" \
  $GO install -trimpath "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
mv "$tmp/helm" "$OUT/helm"
echo "$OUT/helm"

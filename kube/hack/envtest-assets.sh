#!/usr/bin/env bash
# Build kube-apiserver and etcd from the Go module proxy, for envtest, and
# cache them by version. Prints the directory to use as KUBEBUILDER_ASSETS on
# its last line. Progress goes to stderr.
#
#   KUBE_VERSION (default 1.37.2), ETCD_VERSION (default 3.6.16),
#   GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
OUT="$CACHE/envtest/k8s-$KUBE_VERSION-etcd-$ETCD_VERSION"
GO=${GO:-go}

# The API server reports its version (helm checks a chart's kubeVersion
# against it; a module build has no git tree to take it from): one built
# before it was stamped is relinked (its compile is cached).
stamped() { [[ $("$OUT/kube-apiserver" --version 2>/dev/null) == "Kubernetes v$KUBE_VERSION" ]]; }
if [[ -x "$OUT/etcd" ]] && stamped; then
  echo "$OUT"; exit 0
fi
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOWORK=off GOFLAGS=-mod=mod

# shellcheck source=progress.sh
source "$(dirname "$0")/progress.sh"

if [[ ! -x "$OUT/etcd" ]]; then
  mkdir -p "$work/etcd"
  cat > "$work/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  ( cd "$work/etcd" && $GO mod init gofit.local/etcd >/dev/null 2>&1 &&
    $GO get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 && $GO mod tidy >/dev/null 2>&1 )
  progress "etcd v$ETCD_VERSION" bash -c "cd '$work/etcd' && CGO_ENABLED=0 $GO build -trimpath -o '$OUT/etcd.tmp' . && mv '$OUT/etcd.tmp' '$OUT/etcd'"
fi

if ! stamped; then
  mkdir -p "$work/apiserver"
  cat > "$work/apiserver/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
GO
  cd "$work/apiserver"
  $GO mod init gofit.local/kube-apiserver >/dev/null 2>&1
  $GO mod edit -require "k8s.io/kubernetes@v$KUBE_VERSION"
  # k8s.io/kubernetes points its staging modules at ./staging/...; pin each
  # one to the matching published v0.x release instead.
  modfile=$($GO mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  minor=${KUBE_VERSION#1.}
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z-]*\) => ./staging/.*#\1#p' "$modfile"); do
    [[ $m == k8s.io/sample-cli-plugin ]] && continue
    $GO mod edit -replace "$m=$m@v0.$minor"
  done
  $GO mod tidy >/dev/null
  v=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    v="$v -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=${minor%%.*} -X $p.gitTreeState=clean"
  done
  progress "kube-apiserver v$KUBE_VERSION" bash -c "CGO_ENABLED=0 $GO build -trimpath -ldflags='$v' -o '$OUT/kube-apiserver.tmp' . && mv '$OUT/kube-apiserver.tmp' '$OUT/kube-apiserver'"
fi
echo "$OUT"

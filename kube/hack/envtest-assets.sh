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
# shellcheck source=kube-module.sh
source "$(dirname "$0")/kube-module.sh"

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
  kube_module kube-apiserver
  progress "kube-apiserver v$KUBE_VERSION" bash -c "CGO_ENABLED=0 $GO build -trimpath -ldflags='$KUBE_LDFLAGS' -o '$OUT/kube-apiserver.tmp' . && mv '$OUT/kube-apiserver.tmp' '$OUT/kube-apiserver'"
fi
echo "$OUT"

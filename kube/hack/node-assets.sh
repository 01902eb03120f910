#!/usr/bin/env bash
# Build or fetch what a single-node Kubernetes needs beside kube-apiserver
# and etcd (envtest-assets.sh builds those), and cache it by version:
#
#   bin/kube        one multi-call binary linking kube-controller-manager,
#                   kube-scheduler, kubelet and kubectl (argv[1] or the
#                   name it is called by picks one): one build, one link,
#                   from k8s.io/kubernetes on the Go module proxy
#   bin/containerd, bin/containerd-shim-runc-v2, bin/ctr
#                   containerd 2.x from its Go module (Kubernetes 1.36 no
#                   longer talks to containerd 1.x; Debian bookworm has 1.6)
#   bin/runc        Debian's runc package (cgo + libseccomp: not go-buildable
#                   without a C toolchain and libseccomp-dev)
#   cni/            bridge, host-local, loopback from Debian's
#                   containernetworking-plugins
#   lib/, lib64/    the shared libraries those Debian binaries load, copied
#                   from this host where ldd finds them
#
# Prints the directory on its last line; progress goes to stderr.
#
#   KUBE_VERSION (default 1.37.2), CONTAINERD_VERSION (default 2.2.9),
#   RUNC_VERSION (1.1.5) and CNI_VERSION (1.1.1) must match the Debian
#   candidates; GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-1.37.2}
CONTAINERD_VERSION=${CONTAINERD_VERSION:-2.2.9}
RUNC_VERSION=${RUNC_VERSION:-1.1.5}
CNI_VERSION=${CNI_VERSION:-1.1.1}
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
OUT="$CACHE/node/k8s-$KUBE_VERSION-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION-cni-$CNI_VERSION"
GO=${GO:-go}

done_marker="$OUT/.complete"
if [[ -f "$done_marker" ]]; then
  echo "$OUT"; exit 0
fi
mkdir -p "$OUT/bin" "$OUT/cni" "$OUT/lib"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOWORK=off GOFLAGS=-mod=mod

# shellcheck source=progress.sh
source "$(dirname "$0")/progress.sh"
# shellcheck source=kube-module.sh
source "$(dirname "$0")/kube-module.sh"

if [[ ! -x "$OUT/bin/containerd" || ! -x "$OUT/bin/containerd-shim-runc-v2" || ! -x "$OUT/bin/ctr" ]]; then
  mkdir -p "$work/containerd"
  cd "$work/containerd"
  $GO mod init gofit.local/containerd >/dev/null 2>&1
  # A blank import so that go mod tidy keeps every package the three
  # commands need.
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
GO
  $GO get "github.com/containerd/containerd/v2@v$CONTAINERD_VERSION" >/dev/null 2>&1
  $GO mod tidy >/dev/null 2>&1
  ver="-X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION"
  progress "containerd v$CONTAINERD_VERSION" bash -c "CGO_ENABLED=0 $GO build -trimpath -tags 'no_btrfs no_devmapper no_zfs' -ldflags='-s -w $ver' -o '$work/containerd/out/' github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr"
  mv "$work/containerd/out/"* "$OUT/bin/"
fi

if [[ ! -x "$OUT/bin/kube" ]]; then
  mkdir -p "$work/kube"
  cd "$work/kube"
  cat > main.go <<'GO'
// kube runs kube-controller-manager, kube-scheduler, kubelet or kubectl,
// picked by the name it is called by or by its first argument: one binary
// so that the four share one build and one link.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kube-controller-manager": kcm.NewControllerManagerCommand,
		"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
		"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
		"kubectl":                 kubectl.NewDefaultKubectlCommand,
	}
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && len(os.Args) > 1 {
		name, os.Args = os.Args[1], os.Args[1:]
	}
	newCmd, ok := commands[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: kube kube-controller-manager|kube-scheduler|kubelet|kubectl [flags]")
		os.Exit(2)
	}
	cmd := newCmd()
	cmd.SetArgs(os.Args[1:])
	os.Exit(cli.Run(cmd))
}
GO
  kube_module kube
  progress "kube v$KUBE_VERSION (controller-manager, scheduler, kubelet, kubectl)" bash -c "CGO_ENABLED=0 $GO build -trimpath -ldflags='-s -w $KUBE_LDFLAGS' -o '$OUT/bin/kube.tmp' . && mv '$OUT/bin/kube.tmp' '$OUT/bin/kube'"
fi

# Debian's runc and CNI plugins, checked against the pinned upstream
# versions, with the shared libraries they load.
deb() { # deb PACKAGE UPSTREAM_VERSION: unpack the candidate into $work/deb
  local pkg=$1 want=$2
  ( cd "$work" && apt-get download -q "$pkg" >/dev/null 2>&1 ) ||
    { apt-get update -q >/dev/null && ( cd "$work" && apt-get download -q "$pkg" >/dev/null ); }
  local f
  f=$(ls "$work/${pkg}_"*.deb)
  local got
  got=$(dpkg-deb -f "$f" Version)
  if [[ ${got#*:} != "$want"+* && ${got#*:} != "$want"-* ]]; then
    echo "node-assets: Debian's $pkg is $got, not $want (set the version to what the archive has)" >&2
    exit 1
  fi
  dpkg-deb -x "$f" "$work/deb"
}
copylibs() { # copy the shared libraries of ELF file $1 under $OUT/lib, keeping their paths
  ldd "$1" | awk '/=> \//{print $3} /^\t\/lib/{print $1}' | while read -r l; do
    mkdir -p "$OUT/lib$(dirname "$l")"
    cp -L "$l" "$OUT/lib$l"
  done
}
if [[ ! -x "$OUT/bin/runc" ]]; then
  deb runc "$RUNC_VERSION"
  cp "$work/deb/usr/sbin/runc" "$OUT/bin/runc"
fi
if [[ ! -x "$OUT/cni/bridge" ]]; then
  deb containernetworking-plugins "$CNI_VERSION"
  for p in bridge host-local loopback; do cp "$work/deb/usr/lib/cni/$p" "$OUT/cni/$p"; done
fi
for f in "$OUT/bin/runc" "$OUT/cni/"*; do copylibs "$f"; done
touch "$done_marker"
echo "$OUT"

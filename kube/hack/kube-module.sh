# Sourced by the asset scripts. kube_module NAME: make the current
# directory, which holds a main.go, the module gofit.local/NAME requiring
# k8s.io/kubernetes at $KUBE_VERSION (built with $GO), and set KUBE_LDFLAGS
# to the -X flags that stamp that version into the binary (a module build
# has no git tree to take it from): the kubelet reports it in the Node's
# status, kubectl prints it, and helm checks a chart's kubeVersion against
# the API server's.
kube_module() {
  $GO mod init "gofit.local/$1" >/dev/null 2>&1
  $GO mod edit -require "k8s.io/kubernetes@v$KUBE_VERSION"
  # k8s.io/kubernetes points its staging modules at ./staging/...; pin each
  # one to the matching published v0.x release instead.
  local modfile minor m p
  modfile=$($GO mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  minor=${KUBE_VERSION#1.}
  for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z-]*\) => ./staging/.*#\1#p' "$modfile"); do
    [[ $m == k8s.io/sample-cli-plugin ]] && continue
    $GO mod edit -replace "$m=$m@v0.$minor"
  done
  $GO mod tidy >/dev/null
  KUBE_LDFLAGS=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    KUBE_LDFLAGS="$KUBE_LDFLAGS -X $p.gitVersion=v$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=${minor%%.*} -X $p.gitTreeState=clean"
  done
}

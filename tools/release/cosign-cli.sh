#!/usr/bin/env bash
# make release-verify-cli: a release made as docs/install.md says (a new
# cosign key, REGISTRY= a go-containerregistry registry on localhost),
# verified with the real cosign CLI, v2 and v3 each, by the commands
# docs/install.md's "Verifying a release" gives (read from the page, so
# the page and this check cannot drift), and refused under another key
# and on a tampered release re-signed with another key. Not part of make
# test or CI: cosign is a large build (10-16 minutes cold per version
# on 2 cores; then cached by version under ~/.cache/gofit). tools/release's
# tests check the same signatures with sigstore's Go modules on every make
# test.
#
#   COSIGN_VERSIONS (default "2.6.5 3.1.3": the newest v2 and v3 on the
#   module proxy; `go list -m -versions github.com/sigstore/cosign/v3`),
#   GGCR_VERSION (default 0.20.7),
#   GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
cd "$(dirname "$0")/../.."
COSIGN_VERSIONS=${COSIGN_VERSIONS:-2.6.5 3.1.3}
GGCR_VERSION=${GGCR_VERSION:-0.20.7}
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
GO=${GO:-go}
repo=$PWD
t0=$(date +%s)
since() { echo "$(($(date +%s) - $1))s"; }

# install DIR MODULE@VERSION: go install into DIR unless it is there.
install() {
  local dir=$1 mod=$2 s
  [[ -x "$dir/$(basename "${mod%%@*}")" ]] && return 0
  mkdir -p "$dir"
  s=$(date +%s)
  echo "cosign-cli: building $mod" >&2
  GOWORK=off GOFLAGS=-mod=mod GOBIN="$dir" $GO install "$mod"
  echo "cosign-cli: built $mod in $(since "$s")" >&2
}
declare -A bin
for v in $COSIGN_VERSIONS; do
  if [[ ! $v =~ ^([0-9]+)\.[0-9]+\.[0-9]+$ ]]; then
    echo "cosign-cli: COSIGN_VERSIONS: $v: want MAJOR.MINOR.PATCH" >&2; exit 2
  fi
  bin[$v]=$CACHE/cosign/v$v
  install "${bin[$v]}" "github.com/sigstore/cosign/v${BASH_REMATCH[1]}/cmd/cosign@v$v"
done
regbin=$CACHE/ggcr-registry/v$GGCR_VERSION
install "$regbin" "github.com/google/go-containerregistry/cmd/registry@v$GGCR_VERSION"
echo "cosign-cli: tools ready in $(since "$t0")"

work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
"$regbin/registry" -port "$port" >"$work/registry.log" 2>&1 &
reg=$!
trap 'rc=$?; kill "$reg" 2>/dev/null; wait "$reg" 2>/dev/null || true; rm -rf "$work"; exit $rc' EXIT
export COSIGN_PASSWORD=cosign-cli-check
first=${COSIGN_VERSIONS%% *}
mkdir -p "$work/key" "$work/other"
(cd "$work/key" && "${bin[$first]}/cosign" generate-key-pair >/dev/null 2>&1)
(cd "$work/other" && "${bin[$first]}/cosign" generate-key-pair >/dev/null 2>&1)
R=localhost:$port/gofit-dev
head=$(git rev-parse HEAD)
# ANCHOR=: a throwaway key, not the repository's cosign.pub. It stands
# for the project's key below: the docs' curl of the repository's key is
# replaced by a copy of it, kept apart from the release.
A="$work/key/cosign.pub"
s=$(date +%s)
DIST="$work/dist" ANCHOR= make release VERSION=v0.1.0 KEY="$work/key/cosign.key" REGISTRY="$R" >"$work/release.log" 2>&1 ||
  { tail -20 "$work/release.log"; echo "cosign-cli: make release failed" >&2; exit 1; }
echo "cosign-cli: make release (published to $R) in $(since "$s")"
cd "$work/dist"
PD=$(python3 -c 'import json,base64; d=json.loads(open("sbom-linux-amd64.intoto.jsonl").readline()); print(json.loads(base64.b64decode(d["payload"]))["subject"][0]["digest"]["sha256"])')

# docs/install.md's "Verifying a release": its first sh block (the
# release's files) and its second (the registry), comments and the helm
# install left out.
block() {
  awk '/^### Verifying a release/{f=1;next} /^### /{f=0} f' "$repo/docs/install.md" |
    awk -v want="$1" '/^```sh/{b=1;next} /^```/{if(b)n++;b=0;next} b&&n==want' |
    sed -e 's/[[:space:]]*#.*$//' -e '/^$/d' -e '/^helm /d'
}
mapfile -t files < <(block 0)
mapfile -t registry < <(block 1)
if ((${#files[@]} < 4 || ${#registry[@]} < 5)); then
  echo "cosign-cli: docs/install.md: found ${#files[@]} and ${#registry[@]} commands under Verifying a release" >&2; exit 1
fi

failed=0
# run LINE: one documented command, as written, in the release's directory;
# curl of the project's key copies $anchor instead, cosign is $cosign, and
# on the registry REGISTRY and PLATFORM_DIGEST are filled in and
# --allow-http-registry added (the registry is plain HTTP, as the docs say).
run() {
  local l=$1 got
  local -a w
  case $l in
  curl*)
    [[ $l == *" https://raw.githubusercontent.com/gofit-dev/gofit/main/cosign.pub"* && $l == *"o gofit.pub "* ]] ||
      { echo "curl: not the project's key into gofit.pub: $l"; return 1; }
    cp "$anchor" gofit.pub ;;
  openssl*)
    got=$(bash -c "$l") || return 1
    [[ "sha256:${got%% *}" == "$fp" ]] || { echo "fingerprint sha256:${got%% *}, want $fp"; return 1; } ;;
  cosign\ *)
    l=${l//REGISTRY/$R}; l=${l//PLATFORM_DIGEST/$PD}
    read -ra w <<<"$l"
    if [[ ${w[1]} == verify-blob ]]; then "$cosign" "${w[@]:1}"
    else "$cosign" "${w[1]}" --allow-http-registry "${w[@]:2}"; fi ;;
  go\ *) GOFIT=$repo bash -c "$l" ;;
  *) bash -c "$l" ;;
  esac
}
# want ok|fail LINE: run it, and whether it must pass.
want() {
  local w=$1 got; shift
  if run "$1" >"$work/out" 2>&1; then got=ok; else got=fail; fi
  grep -i 'deprecated' "$work/out" >>"$work/deprecated" || true
  if [[ $got == "$w" ]]; then echo "cosign-cli: $who: $got as it should: $1"
  else echo "cosign-cli: $who: WRONG, $got: $1"; grep -v '^WARNING' "$work/out" | tail -c 800; failed=1; fi
}
fp=$($GO -C "$repo" run ./tools/release/cmd/release fingerprint "$A")

for v in $COSIGN_VERSIONS; do
  cosign=${bin[$v]}/cosign who="cosign v$v"
  s=$(date +%s)
  echo "cosign-cli: $("$cosign" version 2>/dev/null | awk '/^GitVersion/{print $2}')"
  anchor=$A
  for l in "${files[@]}" "${registry[@]}"; do want ok "$l"; done
  # The provenance names the commit the release was built from.
  commit=$("$cosign" verify-attestation --key "$A" --insecure-ignore-tlog --allow-http-registry --type slsaprovenance1 "$R/gofit:v0.1.0" 2>/dev/null |
    python3 -c 'import sys,json,base64; d=json.loads(sys.stdin.readline()); print(json.loads(base64.b64decode(d["payload"]))["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]["gitCommit"])')
  if [[ $commit == "$head" ]]; then echo "cosign-cli: v$v: the provenance names the commit, $commit"
  else echo "cosign-cli: v$v: WRONG: the provenance names $commit"; failed=1; fi
  # Another key (the docs' gofit.pub now another's) verifies nothing.
  anchor=$work/other/cosign.pub who="cosign v$v, another key"
  for l in "${files[@]}" "${registry[@]}"; do
    case $l in openssl* | sha256sum*) ;; curl*) want ok "$l" ;; *) want fail "$l" ;; esac
  done
  echo "cosign-cli: v$v: the documented commands in $(since "$s")"
done

# The forgery: a changed binary, sums rewritten to match, sha256sums, the
# provenance and the SBOM attestations re-signed with another key, and the
# release's cosign.pub replaced by that key. The release's own key vouches
# for it; the project's does not.
cp -r "$work/dist" "$work/forged" && cd "$work/forged"
echo tampered >>gofit-linux-amd64
sha256sum -- gofit-* sbom-linux-*.cdx.json >sha256sums
$GO -C "$repo" run ./tools/release/cmd/release sign -key "$work/other/cosign.key" -dist "$work/forged" \
  -version v0.1.0 -commit "$head" >/dev/null
for v in $COSIGN_VERSIONS; do
  cosign=${bin[$v]}/cosign who="cosign v$v, forged release"
  anchor=$A
  for l in "${files[@]}"; do
    case $l in cosign* | go*) want fail "$l" ;; *) want ok "$l" ;; esac
  done
  want ok "cosign verify-blob --key cosign.pub --signature sha256sums.sig --insecure-ignore-tlog sha256sums"
done
cd "$work/dist"
echo tampered >>gofit-linux-amd64
who="changed binary" want fail "sha256sum -c --quiet sha256sums"

# What cosign says is going away, for the next change of format.
if [[ -s $work/deprecated ]]; then sort -u "$work/deprecated" | sed 's/^/cosign-cli: cosign warned: /'; fi
if ((failed)); then echo "cosign-cli: FAILED" >&2; exit 1; fi
echo "cosign-cli: cosign $COSIGN_VERSIONS verified the release by docs/install.md's commands, in $(since "$t0")"

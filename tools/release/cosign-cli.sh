#!/usr/bin/env bash
# make release-verify-cli: a release made as docs/install.md says (a new
# cosign key, REGISTRY= a go-containerregistry registry on localhost),
# verified with the real cosign CLI by the commands docs/install.md
# gives, and refused under another key. Not part of make test or CI:
# cosign is a large build (about 5 minutes cold on 2 cores; then cached by
# version under ~/.cache/gofit). tools/release's tests check the same
# signatures with sigstore's Go modules on every make test.
#
#   COSIGN_VERSION (default 2.6.5), GGCR_VERSION (default 0.20.7),
#   GOFIT_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/gofit)
set -euo pipefail
cd "$(dirname "$0")/../.."
COSIGN_VERSION=${COSIGN_VERSION:-2.6.5}
GGCR_VERSION=${GGCR_VERSION:-0.20.7}
CACHE=${GOFIT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gofit}
GO=${GO:-go}
bin="$CACHE/cosign/v$COSIGN_VERSION"
if [[ ! -x "$bin/cosign" || ! -x "$bin/registry" ]]; then
  mkdir -p "$bin"
  echo "cosign-cli: building cosign v$COSIGN_VERSION and the registry from their modules" >&2
  GOWORK=off GOFLAGS=-mod=mod GOBIN="$bin" $GO install "github.com/sigstore/cosign/v2/cmd/cosign@v$COSIGN_VERSION"
  GOWORK=off GOFLAGS=-mod=mod GOBIN="$bin" $GO install "github.com/google/go-containerregistry/cmd/registry@v$GGCR_VERSION"
fi
cosign() { "$bin/cosign" "$@"; }

work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
"$bin/registry" -port "$port" >"$work/registry.log" 2>&1 &
reg=$!
trap 'rc=$?; kill "$reg" 2>/dev/null; wait "$reg" 2>/dev/null || true; rm -rf "$work"; exit $rc' EXIT
export COSIGN_PASSWORD=cosign-cli-check
mkdir -p "$work/key" "$work/other"
(cd "$work/key" && cosign generate-key-pair >/dev/null 2>&1)
(cd "$work/other" && cosign generate-key-pair >/dev/null 2>&1)
R=localhost:$port/gofit-dev
head=$(git rev-parse HEAD)
# ANCHOR=: a throwaway key, not the repository's cosign.pub. It stands
# for the project's key below: every command verifies against it, kept
# apart from the release, as docs/install.md says.
A="$work/key/cosign.pub"
repo=$PWD
DIST="$work/dist" ANCHOR= make release VERSION=v0.1.0 KEY="$work/key/cosign.key" REGISTRY="$R" >"$work/release.log" 2>&1 ||
  { tail -20 "$work/release.log"; echo "cosign-cli: make release failed" >&2; exit 1; }
cd "$work/dist"
failed=0
# want ok|fail CMD...: the docs' command, and whether it must pass.
want() {
  local w=$1; shift
  if "$@" >"$work/out" 2>&1; then got=ok; else got=fail; fi
  if [[ $got == "$w" ]]; then echo "cosign-cli: $got as it should: ${*:1:3} ... ${*: -1}"
  else echo "cosign-cli: WRONG, $got: $*"; tail -5 "$work/out"; failed=1; fi
}
# A registry on plain HTTP, as this one is, needs --allow-http-registry.
H=--allow-http-registry
PD=$(python3 -c 'import json,base64; d=json.loads(open("sbom-linux-amd64.intoto.jsonl").readline()); print(json.loads(base64.b64decode(d["payload"]))["subject"][0]["digest"]["sha256"])')
want ok cosign verify-blob --key "$A" --signature sha256sums.sig --insecure-ignore-tlog sha256sums
want ok sha256sum -c sha256sums
want ok cosign verify --key "$A" --insecure-ignore-tlog $H "$R/gofit:v0.1.0"
want ok cosign verify-attestation --key "$A" --insecure-ignore-tlog $H --type slsaprovenance1 "$R/gofit:v0.1.0"
want ok cosign verify --key "$A" --insecure-ignore-tlog $H "$R/gofit@sha256:$PD"
want ok cosign verify-attestation --key "$A" --insecure-ignore-tlog $H --type cyclonedx "$R/gofit@sha256:$PD"
want ok cosign verify --key "$A" --insecure-ignore-tlog $H "$R/charts/gofit:0.1.0"
# The provenance names the commit the release was built from.
commit=$(cosign verify-attestation --key "$A" --insecure-ignore-tlog $H --type slsaprovenance1 "$R/gofit:v0.1.0" 2>/dev/null |
  python3 -c 'import sys,json,base64; d=json.loads(sys.stdin.readline()); print(json.loads(base64.b64decode(d["payload"]))["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]["gitCommit"])')
if [[ $commit == "$head" ]]; then
  echo "cosign-cli: the provenance names the commit, $commit"
else echo "cosign-cli: WRONG: the provenance names $commit"; failed=1; fi
# Another key verifies nothing.
want fail cosign verify-blob --key "$work/other/cosign.pub" --signature sha256sums.sig --insecure-ignore-tlog sha256sums
want fail cosign verify --key "$work/other/cosign.pub" --insecure-ignore-tlog $H "$R/gofit:v0.1.0"
want fail cosign verify-attestation --key "$work/other/cosign.pub" --insecure-ignore-tlog $H --type slsaprovenance1 "$R/gofit:v0.1.0"
want fail cosign verify --key "$work/other/cosign.pub" --insecure-ignore-tlog $H "$R/charts/gofit:0.1.0"
# A changed file fails the signed sums.
echo tampered >>gofit-linux-amd64
want fail sha256sum -c --quiet sha256sums
# Re-signed with another key (sums rewritten, the release's cosign.pub
# replaced): the release's own key now vouches for it, the anchor does not.
sha256sum -- gofit-* sbom-linux-*.cdx.json > sha256sums
$GO -C "$repo" run ./tools/release/cmd/release sign -key "$work/other/cosign.key" -dist "$work/dist" \
  -version v0.1.0 -commit "$head" >/dev/null
want ok sha256sum -c --quiet sha256sums
want ok cosign verify-blob --key cosign.pub --signature sha256sums.sig --insecure-ignore-tlog sha256sums
want fail cosign verify-blob --key "$A" --signature sha256sums.sig --insecure-ignore-tlog sha256sums
if ((failed)); then echo "cosign-cli: FAILED" >&2; exit 1; fi
echo "cosign-cli: cosign v$COSIGN_VERSION verified the release"

#!/usr/bin/env bash
# make release VERSION=vX.Y.Z KEY=cosign.key [REGISTRY=host:port/path]:
# everything a release ships, into dist/, signed.
#
#   gofit-linux-amd64, gofit-linux-arm64   static binaries (version stamped)
#   gofit-image.tar                        the OCI image index (make image), with SBOMs
#   sbom-linux-{amd64,arm64}.cdx.json      the same SBOMs, beside it
#   gofit-X.Y.Z.tgz                        the Helm chart, appVersion vX.Y.Z, the image
#                                          pinned by digest (image.digest)
#   gofit-deploy-vX.Y.Z.tar.gz             deploy/, images pinned to vX.Y.Z@sha256:...
#   sha256sums                             of all of the above
#   sha256sums.sig                         its signature (cosign verify-blob --key)
#   provenance.intoto.jsonl                SLSA provenance v1 of every file above, the
#                                          image index, its platforms and the chart (OCI)
#   sbom-linux-{amd64,arm64}.intoto.jsonl  the SBOMs as attestations of each platform
#   cosign.pub                             the public key that verifies them (a copy:
#                                          users verify against the repository's)
#
# The repository's cosign.pub is the trust anchor: users verify every release
# against it, never the copy inside the release (docs/install.md). KEY must
# be its private half; sign refuses another key. ANCHOR names another public
# key to hold KEY to (a rotation, docs/install.md#key-rotation), and ANCHOR=
# (empty) signs with any key: a test release, not one to publish.
# KEY is a cosign key (cosign generate-key-pair, or
# `go run ./tools/release/cmd/release keygen`), its password in
# COSIGN_PASSWORD; UNSIGNED=1 builds without one (nothing signed). With
# REGISTRY, the image goes to REGISTRY/gofit:VERSION and the chart to
# REGISTRY/charts/gofit:X.Y.Z, each signed with its attestations attached
# (cosign's .sig/.att tags), and the chart and deploy/ name REGISTRY/gofit.
# Keyless signing (Fulcio, Rekor) needs a network this build does not
# assume: docs/install.md. Every artifact is the same for the same commit
# and SOURCE_DATE_EPOCH (the commit's time by default); signatures are not.
# Needs helm: kube/hack/helm.sh builds it.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${VERSION:?set VERSION=vX.Y.Z}"
if [[ ! $VERSION =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION $VERSION: want vMAJOR.MINOR.PATCH (semver with a v)" >&2; exit 2
fi
GO=${GO:-go}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
DIST=${DIST:-dist}
HELM=${GOFIT_HELM:-$(bash kube/hack/helm.sh)}
COMMIT=${COMMIT:-$(git rev-parse HEAD)}
ANCHOR=${ANCHOR-cosign.pub}
if [[ -z ${KEY:-} && -z ${UNSIGNED:-} ]]; then
  echo "release: set KEY=cosign.key (COSIGN_PASSWORD its password), or UNSIGNED=1 for an unsigned build" >&2; exit 2
fi
if [[ -n ${REGISTRY:-} ]]; then
  REGISTRY=${REGISTRY%/}
  IMAGE_REPO=$REGISTRY/gofit CHART_REPO=$REGISTRY/charts/gofit
else
  IMAGE_REPO=${IMAGE_REPO:-ghcr.io/gofit-dev/gofit} CHART_REPO=${CHART_REPO:-ghcr.io/gofit-dev/charts/gofit}
fi
started=$(date +%s)
rm -rf "$DIST" && mkdir -p "$DIST"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
$GO build -o "$stage/release" ./tools/release/cmd/release

make image VERSION="$VERSION" COMMIT="$COMMIT" IMAGE_REPO="$IMAGE_REPO" SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" SBOM_DIR="$DIST"
for a in amd64 arm64; do cp "bin/linux-$a/gofit" "$DIST/gofit-linux-$a"; done
cp bin/gofit-image.tar "$DIST/gofit-image.tar"
DIGEST=$("$stage/release" digest "$DIST/gofit-image.tar")

# The chart, its version the release's without the v, and deploy/, the
# image pinned to the digest just built in both: image.digest (it wins
# over the tag), and each kustomization's images: newName, newTag, digest
# (kustomize writes REPO:TAG@DIGEST; the runtime pulls by the digest).
cp -r charts/gofit "$stage/gofit"
cp -r deploy "$stage/deploy"
"$stage/release" pin -image "$IMAGE_REPO" -tag "$VERSION" -digest "$DIGEST" -chart-dir "$stage/gofit" -deploy-dir "$stage/deploy"
"$HELM" package "$stage/gofit" --version "${VERSION#v}" --app-version "$VERSION" --destination "$DIST" >/dev/null
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -C "$stage" -cf - deploy |
  gzip -n -9 > "$DIST/gofit-deploy-$VERSION.tar.gz"

( cd "$DIST" && sha256sum -- * > sha256sums )
cat "$DIST/sha256sums"

if [[ -n ${KEY:-} ]]; then
  "$stage/release" sign -key "$KEY" -dist "$DIST" -image "$IMAGE_REPO" -chart "$CHART_REPO" \
    -version "$VERSION" -commit "$COMMIT" -started "$started" ${ANCHOR:+-anchor "$ANCHOR"} ${REGISTRY:+-push -tag "$VERSION"}
elif [[ -n ${REGISTRY:-} ]]; then
  echo "release: REGISTRY needs KEY: an unsigned release is not published" >&2; exit 2
fi

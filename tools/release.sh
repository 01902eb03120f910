#!/usr/bin/env bash
# make release VERSION=vX.Y.Z: everything a release ships, into dist/.
#
#   gofit-linux-amd64, gofit-linux-arm64   static binaries (version stamped)
#   gofit-image.tar                        the OCI image index (make image), with SBOMs
#   sbom-linux-{amd64,arm64}.cdx.json      the same SBOMs, beside it
#   gofit-X.Y.Z.tgz                        the Helm chart, appVersion vX.Y.Z
#   gofit-deploy-vX.Y.Z.tar.gz             deploy/, images pinned to vX.Y.Z
#   sha256sums                             of all of the above
#
# Every file is the same for the same commit and SOURCE_DATE_EPOCH (the
# commit's time by default). Needs helm: kube/hack/helm.sh builds it.
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
rm -rf "$DIST" && mkdir -p "$DIST"

make image VERSION="$VERSION" SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" SBOM_DIR="$DIST"
for a in amd64 arm64; do cp "bin/linux-$a/gofit" "$DIST/gofit-linux-$a"; done
cp bin/gofit-image.tar "$DIST/gofit-image.tar"

# The chart, its version the release's without the v.
"$HELM" package charts/gofit --version "${VERSION#v}" --app-version "$VERSION" --destination "$DIST" >/dev/null

# deploy/ with every image pinned to the release.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r deploy "$stage/deploy"
grep -rl 'newTag:' "$stage/deploy" | while read -r f; do
  sed -i -E "s/^( *newTag:).*/\1 $VERSION/" "$f"
done
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -C "$stage" -cf - deploy |
  gzip -n -9 > "$DIST/gofit-deploy-$VERSION.tar.gz"

( cd "$DIST" && sha256sum -- * > sha256sums )
cat "$DIST/sha256sums"

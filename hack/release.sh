#!/usr/bin/env bash
# A release, reproducible from one command: every file a release publishes, in dist/VERSION/.
#   bash hack/release.sh VERSION [--no-image]
#
#   evented_pleg_operator-VERSION-py3-none-any.whl   the CLI (`pipx install` it: Python >= 3.11, no Go)
#   evented-pleg-operator-VERSION.tgz                the chart (helm package; version = appVersion = VERSION)
#   evented-pleg-operator-VERSION.oci.tar            the image for linux/amd64, built from the Dockerfile
#                                                    without a daemon (`eventedpleg lab image`; root)
#   evented-pleg-operator-VERSION.spdx.json          its SBOM (syft, SPDX JSON)
#   release.json                                     version, commit, time, the image's name and digest
#   SHA256SUMS                                       over all of the above (`sha256sum -c SHA256SUMS`)
#
# VERSION must be the tree's (pyproject.toml, kept equal everywhere by `python -m eventedpleg_lab.release
# set VERSION`). The image carries the commit and its commit time as OCI labels, and the wheel's and the
# chart's timestamps are the commit's (SOURCE_DATE_EPOCH), so a rebuild of one commit gives the same labels.
# The image is the host's architecture (linux/amd64 here): an arm64 image needs an arm64 base made with
# mmdebstrap under qemu-user-static, which eventedpleg_lab/image.py does not do yet.
# --no-image: the wheel, the chart and the sums only (no root, no buildah), e.g. to check a version bump.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: bash hack/release.sh VERSION [--no-image]}
image=true
[ "${2-}" = "--no-image" ] && image=false
out=${RELEASE_DIR:-dist/$version}
source hack/venv.sh ""
py=.venv/bin/python

die() { echo "error: $*" >&2; exit 2; }
tree=$($py -m eventedpleg_lab.release check) || die "the tree's versions disagree (above)"
[ "$tree" = "$version" ] || die "the tree is $tree, not $version: run \`$py -m eventedpleg_lab.release set $version\` and commit"
revision=$(git rev-parse HEAD)
git diff --quiet HEAD -- || revision="$revision-dirty"
created=$(git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
export SOURCE_DATE_EPOCH TZ=UTC
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)

rm -rf "$out" && mkdir -p "$out"
echo "==> wheel"
$py -m pip wheel --quiet --disable-pip-version-check --no-deps --no-cache-dir --wheel-dir "$out" .
echo "==> chart"
helm=$($py -m eventedpleg_lab.release tool helm)
"$helm" lint --strict manifests/evented-pleg-operator >/dev/null
"$helm" package manifests/evented-pleg-operator --version "$version" --app-version "$version" -d "$out" >/dev/null
ref="localhost/evented-pleg-operator:$version"
digest=""
if $image; then
  echo "==> image (linux/amd64)"
  archive="$out/evented-pleg-operator-$version.oci.tar"
  # Built into the cache, where the builder keeps it while its inputs (context, base, labels) stay the
  # same: a second release of one commit, as the lab and the test command make, is a copy.
  cached=$($py -m eventedpleg_lab.release cached-image "$version")
  .venv/bin/eventedpleg lab image --out "$cached" --tag "$ref" --revision "$revision" --created "$created" >/dev/null
  cp "$cached" "$archive"
  digest=$($py -m eventedpleg_lab.release digest "$archive")
  echo "==> SBOM (syft)"
  syft=$($py -m eventedpleg_lab.release tool syft)
  SYFT_CHECK_FOR_APP_UPDATE=false "$syft" scan --quiet "oci-archive:$archive" \
    --source-name evented-pleg-operator --source-version "$version" \
    -o "spdx-json=$out/evented-pleg-operator-$version.spdx.json"
fi
cat >"$out/release.json" <<JSON
{"version": "$version", "revision": "$revision", "created": "$created", "image": {"name": "$ref", "digest": "$digest", "platforms": [$($image && echo "\"linux/$(dpkg --print-architecture 2>/dev/null || echo amd64)\"")]}}
JSON
$py -m eventedpleg_lab.release sums "$out" >/dev/null
echo "==> $out"
(cd "$out" && sha256sum -c --quiet SHA256SUMS && ls -l)

#!/usr/bin/env bash
# A release, reproducible from one command: every file a release publishes, in dist/VERSION/.
#   bash hack/release.sh VERSION [--no-image]
#
# VERSION is SemVer or PEP 440 (0.2.0, 0.2.0-rc.1 = 0.2.0rc1); files are named in the spelling their
# ecosystem uses (`python -m eventedpleg_lab.release versions VERSION` prints both):
#   evented_pleg_operator-PEP440-py3-none-any.whl      the CLI (`pipx install` it: Python >= 3.11, no Go)
#   evented-pleg-operator-SEMVER.tgz                   the chart (version = appVersion = SEMVER); its
#                                                      values pin image.digest and image.architectures to
#                                                      the image below
#   evented-pleg-operator-SEMVER.oci.tar               the image: one OCI image index for linux/amd64 and
#                                                      linux/arm64, built from the Dockerfile without a
#                                                      daemon (`eventedpleg lab image`; root; the foreign
#                                                      architecture under qemu-user-static)
#   evented-pleg-operator-SEMVER.linux-ARCH.spdx.json  each platform's SBOM (syft, SPDX JSON)
#   evented-pleg-operator-SEMVER.base-packages         each platform's base: every Debian package in it,
#                                                      `ARCH name:arch=version` (the image's labels
#                                                      io.eventedpleg.base.packages hold its sha256)
#   nodeconfig.yaml                                    examples/nodeconfig.yaml: the NodeConfig the README's
#                                                      install block and the chart's NOTES apply (a flat
#                                                      file, as a GitHub release holds only files)
#   release.json                                       versions, commit, time, the image's name, digest
#                                                      and platforms
#   SHA256SUMS                                         over all of the above (`sha256sum -c SHA256SUMS`;
#                                                      `python -m eventedpleg_lab.release verify DIR`
#                                                      checks them and the image's digest and platforms
#                                                      against release.json)
#
# VERSION must be the tree's (pyproject.toml, kept equal everywhere by `python -m eventedpleg_lab.release
# set VERSION`). The image carries the commit and its commit time as OCI labels, and the wheel's and the
# chart's timestamps are the commit's (SOURCE_DATE_EPOCH), so a rebuild of one commit gives the same labels.
# RELEASE_ARCHES (default: this machine's architecture alone): the image's architectures; the release
# workflow sets "amd64 arm64". A foreign one needs qemu-user-static through binfmt_misc, which
# hack/emulation.sh sets up (root), and an explicit RELEASE_ARCHES that names one it cannot build fails.
# Not the default on a workstation: an emulated arm64 build takes ~25 min on 2 cores.
# --no-image: the wheel, the chart and the sums only (no root, no buildah), e.g. to check a version bump.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: bash hack/release.sh VERSION [--no-image]}
image=true
[ "${2-}" = "--no-image" ] && image=false
source hack/venv.sh ""
py=.venv/bin/python

die() { echo "error: $*" >&2; exit 2; }
read -r pyversion semver < <($py -m eventedpleg_lab.release versions "$version") || die "bad version $version"
out=${RELEASE_DIR:-dist/$semver}
tree=$($py -m eventedpleg_lab.release check) || die "the tree's versions disagree (above)"
[ "$tree" = "$pyversion" ] || die "the tree is $tree, not $version: run \`$py -m eventedpleg_lab.release set $version\` and commit"
revision=$(git rev-parse HEAD)
git diff --quiet HEAD -- || revision="$revision-dirty"
created=$(git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
export SOURCE_DATE_EPOCH TZ=UTC
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)

rm -rf "$out" && mkdir -p "$out"
echo "==> wheel"
# With the pinned backend when the venv has it (the release job's, from hack/release-requirements.txt).
isolation=()
$py -c 'import hatchling' 2>/dev/null && isolation=(--no-build-isolation)
$py -m pip wheel --quiet --disable-pip-version-check --no-deps --no-cache-dir "${isolation[@]}" --wheel-dir "$out" .
ref="localhost/evented-pleg-operator:$semver"
digest=""
arches=()
if $image; then
  host=$(dpkg --print-architecture 2>/dev/null || uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
  for arch in ${RELEASE_ARCHES:-$host}; do
    if why=$(bash hack/emulation.sh "$arch" 2>&1); then
      arches+=("$arch")
    elif [ -n "${RELEASE_ARCHES-}" ]; then
      die "RELEASE_ARCHES names $arch: $why"
    else
      echo "warning: linux/$arch SKIPPED, the image and the chart are without it: $why" >&2
    fi
  done
  echo "==> image (${arches[*]/#/linux/})"
  archive="$out/evented-pleg-operator-$semver.oci.tar"
  # Built into the cache, where the builder keeps it while its inputs (context, bases, labels) stay the
  # same: a second release of one commit, as the lab and the test command make, is a copy.
  cached=$($py -m eventedpleg_lab.release cached-image "$semver")
  .venv/bin/eventedpleg lab image --out "$cached" --tag "$ref" --revision "$revision" --created "$created" \
    "${arches[@]/#/--platform=linux/}" >/dev/null
  cp "$cached" "$archive"
  cp "$cached.base-packages" "$out/evented-pleg-operator-$semver.base-packages"
  digest=$($py -m eventedpleg_lab.release digest "$archive")
  echo "==> SBOM (syft)"
  syft=$($py -m eventedpleg_lab.release tool syft)
  for arch in "${arches[@]}"; do
    SYFT_CHECK_FOR_APP_UPDATE=false "$syft" scan --quiet --platform "linux/$arch" "oci-archive:$archive" \
      --source-name evented-pleg-operator --source-version "$semver" \
      -o "spdx-json=$out/evented-pleg-operator-$semver.linux-$arch.spdx.json"
  done
fi
echo "==> chart"
helm=$($py -m eventedpleg_lab.release tool helm)
"$helm" lint --strict manifests/evented-pleg-operator >/dev/null
chart=manifests/evented-pleg-operator
if $image; then  # the packaged chart installs exactly this image, on exactly its architectures
  staged=$(mktemp -d)
  trap 'rm -rf "$staged"' EXIT
  cp -r "$chart" "$staged/" && chart="$staged/evented-pleg-operator"
  $py -m eventedpleg_lab.release pin-image "$chart/values.yaml" "$digest" "${arches[@]}"
fi
"$helm" package "$chart" --version "$semver" --app-version "$semver" -d "$out" >/dev/null
cp examples/nodeconfig.yaml "$out/nodeconfig.yaml"
platforms=""
[ ${#arches[@]} -eq 0 ] || platforms=$(printf '"linux/%s",' "${arches[@]}")
cat >"$out/release.json" <<JSON
{"version": "$semver", "python_version": "$pyversion", "revision": "$revision", "created": "$created", "image": {"name": "$ref", "digest": "$digest", "platforms": [${platforms%,}]}}
JSON
$py -m eventedpleg_lab.release sums "$out" >/dev/null
echo "==> $out"
(cd "$out" && sha256sum -c --quiet SHA256SUMS && ls -l)
# What the release workflow's publish job checks before it signs: release.json names the archive's image.
if $image; then $py -m eventedpleg_lab.release verify "$out" >/dev/null; fi

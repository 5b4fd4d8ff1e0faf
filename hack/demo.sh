#!/usr/bin/env bash
# The product's main job on an embedded default: see `eventedpleg demo --help`.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/venv.sh ""  # no extras; the demo is the lab's `eventedpleg demo`
# The lab's nodes are amd64: its release needs the amd64 image alone (arm64 is built under emulation, ~25 min
# on 2 cores; RELEASE_ARCHES="amd64 arm64" asks for both).
export RELEASE_ARCHES=${RELEASE_ARCHES:-amd64}
exec .venv/bin/eventedpleg demo "$@"

#!/usr/bin/env bash
# The product's main job on an embedded default: see `eventedpleg demo --help`.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/venv.sh ""  # no extras; the demo is the lab's `eventedpleg demo`
exec .venv/bin/eventedpleg demo "$@"

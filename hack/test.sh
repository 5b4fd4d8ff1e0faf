#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/venv.sh test
export PATH="$PWD/.venv/bin:$PATH"

step() { printf '\n==> %s\n' "$*"; }
step "ruff";            ruff check operator tests && ruff format --check operator tests
step "mypy --strict";   mypy
step "import layers";   lint-imports
step "generated files"; python -m eventedpleg.crdgen --check && python -m eventedpleg.docgen --check
step "binaries (etcd, kube-apiserver, kcm, scheduler, kwok, helm; cached after the first build)"
eventedpleg cluster build
step "pytest"
# -p no:cacheprovider: a CI checkout stays clean; pytest exits 5 when it collects nothing, so that fails too.
pytest -p no:cacheprovider "$@"

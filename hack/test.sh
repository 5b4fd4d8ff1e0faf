#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this). Exits non-zero on any failure.
#   bash hack/test.sh [PYTEST ARGS]         everything: lint, types, layers, every test tier (CI)
#   bash hack/test.sh --fast [PYTEST ARGS]  development lane: the same checks, then the unit, agent and chart
#                                           golden tests only; builds nothing and starts no cluster or kubelet
set -euo pipefail
cd "$(dirname "$0")/.."
fast=false
if [ "${1-}" = "--fast" ]; then fast=true; shift; fi
source hack/venv.sh test
export PATH="$PWD/.venv/bin:$PATH"
# The release the lab installs and the image tier opens: its amd64 image. The arm64 one is built under
# emulation (qemu-user-static), ~25 min on 2 cores, so this command builds it only when asked:
# RELEASE_ARCHES="amd64 arm64" bash hack/test.sh (the image tier then runs the CLI inside it too).
export RELEASE_ARCHES=${RELEASE_ARCHES:-amd64}

step() { printf '\n==> %s\n' "$*"; }
# One command per line: under `set -e` a failing command that is not the last of an && list does not stop
# the script, so `a && b` would let a failure of `a` through.
step "ruff";            ruff check operator tests bench; ruff format --check operator tests bench
step "mypy --strict";   mypy  # the files of pyproject's [tool.mypy]: operator, tests, bench
step "import layers";   lint-imports
step "generated files"; python -m eventedpleg.crdgen --check; python -m eventedpleg.docgen --check
python -m eventedpleg_lab.chartdocs --check
python -m eventedpleg_lab.platformdocs --check
step "versions";        python -m eventedpleg_lab.release check
step "workflows (actionlint)"
# Built from Go modules on first use (~1 min, cached); the fast lane builds nothing, so there only if built.
actionlint=$(python -c 'from eventedpleg_lab.localcluster import build
c = build.ACTIONLINT; p = build.component_dir(c) / "actionlint"; print(p if p.is_file() else "")')
if [ -z "$actionlint" ] && ! $fast; then actionlint=$(python -m eventedpleg_lab.release tool actionlint); fi
if [ -n "$actionlint" ]; then "$actionlint" -color=false; else echo "actionlint is not built yet: SKIPPED in this lane"; fi
if $fast; then
  tiers=(tests/unit tests/agent)
  # The chart goldens render with the real helm: run them when it is already built, never build it here.
  if [ -n "$(python -c 'from eventedpleg_lab.localcluster import build; print(build.locate("helm") or "")')" ]; then
    tiers+=(tests/chart)
  else
    echo "helm is not built yet (the full run builds it): tests/chart SKIPPED in this lane"
  fi
  step "pytest, fast lane: ${tiers[*]}"
  exec pytest -p no:cacheprovider -m "not cluster and not realnode" "${tiers[@]}" "$@"
fi
step "binaries (etcd, kube-apiserver, kcm, scheduler, kwok, helm; cached after the first build)"
eventedpleg cluster build
step "prometheus and promtool (Debian's package, unpacked into the cache; the chart tier runs them)"
python -m eventedpleg_lab.localcluster.debtools prometheus
step "real node rig (kubelet v1.36 + v1.37, containerd 2.2, crictl; Debian runc/busybox/containerd 1.6)"
# ~7 min cold, cached after. The rig runs a real kubelet, which needs root on Linux; elsewhere the
# realnode tests are skipped and pytest's summary says so in red.
if [ "$(id -u)" = 0 ] && [ "$(uname -s)" = Linux ]; then
  eventedpleg realnode build
  step "lab nodes (bookworm rootfs, systemd-nspawn, CRI-O v1.36.3 and v1.34.0 from Go modules; cached after the first build)"
  eventedpleg lab build
  step "the release (hack/release.sh: wheel, chart, image daemonless, SBOM; what the lab installs)"
  python -m eventedpleg_lab.release build
else
  echo "not root on Linux: the tests against a real kubelet, the lab and the image will be SKIPPED"
fi
# -p no:cacheprovider: a CI checkout stays clean; pytest exits 5 when it collects nothing, so that fails too.
# --durations: where the suite's time goes, printed at the end of every run (CI time is budgeted).
if [ "$#" -gt 0 ] || [ "$(id -u)" != 0 ] || [ "$(uname -s)" != Linux ]; then
  step "pytest"
  exec pytest -p no:cacheprovider --durations=40 "$@"
fi
# The lab tier (~28 min, and ~10 more for the small clusters; mostly waiting on drains, restarts and
# verification windows of real nodes) and the
# real-kubelet tier (~8 min, mostly waiting on kubelet restarts) run beside the other tiers, which share
# nothing with them but the two cores: the lab's nodes have their own network, cgroup and mount namespaces,
# the control planes take free ports, and the real-node agent takes only the kubelet in the host's PID
# namespace (agent.linuxhost), not a lab node's. Their reports are printed after the others'.
step "pytest: the lab tier and tests/realnode in the background; here every other tier"
lablog=$(mktemp)
reallog=$(mktemp)
started=$SECONDS
# Then the small clusters (tests/lab/test_lab_small.py, which the seven-node set skips), each on a lab of
# its own after the main one is down: one worker, then two.
labtier() {
  local rc=0
  pytest -p no:cacheprovider --durations=20 -rfEP tests/lab || rc=1  # -rfEP: failures, errors and what each passing test printed
  for nodes in lab-one:1.36:containerd-2.2 lab-one:1.36:containerd-2.2,lab-two:1.36:crio-1.36; do
    echo; echo "==> the small-cluster lab tests on $nodes"
    EVENTEDPLEG_LAB_NODES=$nodes pytest -p no:cacheprovider -s tests/lab/test_lab_small.py || rc=1
  done
  return $rc
}
labtier >"$lablog" 2>&1 &
lab=$!  # if this script is stopped, the lab tier still runs to its end and takes its lab down itself
pytest -p no:cacheprovider --durations=10 tests/realnode >"$reallog" 2>&1 &
real=$!
set +e
pytest -p no:cacheprovider --durations=30 --ignore=tests/lab --ignore=tests/realnode
rest=$?
wait $real
realrc=$?
step "pytest: tests/realnode (a real kubelet on this host; ran beside the tiers above)"
cat "$reallog" && rm -f "$reallog"
wait $lab
labrc=$?
set -e
step "pytest: the lab tier (ran beside the tiers above; done after $((SECONDS - started)) s)"
cat "$lablog" && rm -f "$lablog"
echo "tiers beside the lab: exit $rest; realnode tier: exit $realrc; lab tier: exit $labrc"
[ "$rest" = 0 ] && [ "$labrc" = 0 ] && [ "$realrc" = 0 ]

"""Tests against a REAL kubelet and containerd on this machine (eventedpleg_lab.realnode; marker `realnode`).

They need root, Linux and the rig's binaries (two kubelets, containerd 2.2, crictl; `eventedpleg realnode
build`, ~7 min cold after the control plane's build). When the binaries are not built every test here is
skipped, with the reason repeated at the end of the run so a skip is never silent. The Debian packages
(runc, busybox-static, containerd 1.6) are installed by the rig itself.

The node is standalone (no API server): the agent talks to an in-memory AgentApi whose Node reports the
real kubelet's version, the real runtime's CRI version and Ready = the real /healthz.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eventedpleg import constants as c
from eventedpleg.core.node.facts.kubeletlog import Signal, classify
from eventedpleg.core.node.facts.promtext import Metrics
from eventedpleg.core.node.facts.verify import (
    CONN_ERROR,
    CONN_SUCCESS,
    FEATURE_METRIC,
    RELIST_COUNT,
    RELIST_SUM,
)
from eventedpleg_lab.realnode import layout as lay
from eventedpleg_lab.realnode import rig as rn
from tests.tierskip import TierSkips

FIXTURES = Path(__file__).parent / "fixtures"
# Every signal and metric the agent decides on must have appeared in a real run. Each comes from a
# different scenario, so the check is on the session's union, made when the session ends (whatever the
# order), and only when every test that feeds it ran and passed; otherwise the summary says it was not made.
WANTED_SIGNALS = {
    Signal.FEATURE_GATES,
    Signal.GENERATED_STATUS,
    Signal.FALLBACK,
    Signal.RETRY,
    Signal.CRI_RECV_FAILED,
    Signal.RELIST_HINT,
    Signal.FAST_PATH_DISABLED,
}
WANTED_METRICS = {FEATURE_METRIC, CONN_SUCCESS, CONN_ERROR, RELIST_COUNT, RELIST_SUM}
_FEEDERS: set[str] = set()  # every collected test that uses `seen`, before -k/-m deselection
_PASSED = pytest.StashKey[bool]()


def _why_not() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs Linux and root (it runs a kubelet)"
    if rn.built() is None:
        return (
            "the real-node binaries are NOT BUILT (kubelet v1.36/v1.37, containerd 2.2, crictl): run "
            "`eventedpleg realnode build` (~7 min cold, cached in ~/.cache/eventedpleg)"
        )
    return None


def pytest_itemcollected(item: pytest.Item) -> None:  # before -k/-m deselection: every test feeding `seen`
    if "seen" in getattr(item, "fixturenames", ()):
        _FEEDERS.add(item.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and report.passed:
        item.stash[_PASSED] = True
    return report


TIER = TierSkips("realnode", _why_not)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TIER, "realnode-tier")


@pytest.fixture(scope="session")
def node() -> Iterator[rn.RealNode]:
    """The rig (one per session; each test brings it up as it needs with `up`). Taken down at the end."""
    rig = rn.RealNode()
    rig.setup(build_missing=False)
    try:
        yield rig
    finally:
        rig.down()


@dataclass
class Seen:
    """What the real kubelet printed: the first real line per agent-matched signal, the metric names
    scraped, and figures a test records. Session-wide; `begin` marks where the current test's log starts."""

    signals: dict[Signal, str] = field(default_factory=dict)
    metric_names: set[str] = field(default_factory=set)
    records: dict[str, object] = field(default_factory=dict)
    fed: set[str] = field(default_factory=set)  # the tests that ran with it and passed
    node: rn.RealNode | None = None
    offset: int = 0

    def begin(self, node: rn.RealNode) -> None:
        self.node = node
        log = node.layout.at(lay.KUBELET_LOG)
        self.offset = log.stat().st_size if log.exists() else 0

    def kubelet_lines(self) -> list[str]:
        """The kubelet's log since this test began (every start of it), classified on the way."""
        assert self.node is not None
        log = self.node.layout.at(lay.KUBELET_LOG)
        with log.open("rb") as handle:
            handle.seek(self.offset)
            lines = handle.read().decode(errors="replace").splitlines()
        for line in lines:
            signal = classify(line)
            if signal is None:
                continue
            kept = self.signals.get(signal)
            # Keep the first line of each kind; for the gates, one that names our gate ({} is common).
            if kept is None or (c.FEATURE_GATE in line and c.FEATURE_GATE not in kept):
                self.signals[signal] = line.strip()[:400]
        return lines

    def last_start(self) -> list[str]:
        """The lines of the kubelet's latest start (it prints its flags first, at --v>=1)."""
        lines = self.kubelet_lines()
        starts = [i for i, line in enumerate(lines) if "FLAG: --v=" in line]
        return lines[starts[-1] :] if starts else lines

    def metrics(self, metrics: Metrics) -> None:
        self.metric_names |= {sample.name for sample in metrics.samples}

    def record(self, key: str, value: object) -> None:
        self.records[key] = value

    def fixture(self) -> dict[str, object]:
        return {"signals": {str(k): v for k, v in self.signals.items()}, "records": self.records}


@pytest.fixture(scope="session")
def seen_all(request: pytest.FixtureRequest) -> Iterator[Seen]:
    seen = Seen()
    yield seen
    if os.environ.get("EVENTEDPLEG_RECORD_FIXTURES"):  # before asserting: a failing run's lines are evidence
        FIXTURES.mkdir(exist_ok=True)
        text = json.dumps(seen.fixture(), indent=1, sort_keys=True) + "\n"
        (FIXTURES / "kubelet-lines.json").write_text(text)
    if picked := [arg for arg in request.config.args if "::" in arg]:  # tests named one by one
        TIER.notes.append(f"the union of real signals was NOT checked: only {picked[0]} ... were picked")
        return
    if unfed := sorted(_FEEDERS - seen.fed):
        TIER.notes.append(
            f"the union of real signals was NOT checked: {len(unfed)} realnode tests did not run and pass "
            f"in this session (first: {unfed[0]})"
        )
        return
    missing = sorted(WANTED_SIGNALS - seen.signals.keys())
    assert not missing, f"never seen in a real run: {missing}; seen: {sorted(seen.signals)}"
    assert not sorted(WANTED_METRICS - seen.metric_names)


@pytest.fixture
def seen(request: pytest.FixtureRequest, node: rn.RealNode, seen_all: Seen) -> Iterator[Seen]:
    seen_all.begin(node)
    yield seen_all
    seen_all.kubelet_lines()  # classify whatever the test did not look at
    if request.node.stash.get(_PASSED, False):
        seen_all.fed.add(request.node.nodeid)

"""What the operator keeps per NodeConfig lives in one ConfigState: a deleted NodeConfig's state and series
all go, and a pass still running when the NodeConfig goes brings none of them back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from eventedpleg.controller.engine import RolloutEngine
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodeconfigstore import PassInputs
from eventedpleg.controller.nodeconfigview import view_of
from eventedpleg.controller.wiring import build_engine
from eventedpleg.core.node.facts.promtext import parse_metrics
from eventedpleg.k8s import configmaps, nodeconfigs
from eventedpleg_lab.sim.rolloutworld import SimNode
from tests.unit.controller.recorder import Recorder

BODY = {
    "metadata": {
        "name": "cluster",
        "generation": 1,
        "uid": "u1",
        "creationTimestamp": "2026-11-02T12:00:00Z",
    },
    "spec": {"eventedPleg": True},
}


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[RolloutEngine]:
    """An engine whose passes run for real over one cached node; the API writes are recorded, not sent."""
    writes: list[str] = []
    monkeypatch.setattr(configmaps, "ensure", lambda api, ns, rendered: writes.append("configmap"))
    monkeypatch.setattr(nodeconfigs, "patch_status", lambda api, name, body: writes.append("status"))
    engine = build_engine(None, "ns", Recorder(), OperatorMetrics())
    engine.steps.submit = lambda *args: None  # type: ignore[method-assign]  # no step runs: no API
    engine.nodes.apply_event("ADDED", SimNode("node-000").body())
    engine.nodeconfig_event("ADDED", BODY)
    yield engine
    engine.steps.pool.shutdown()
    engine.steps.giveback_pool.shutdown()


def _series(metrics: OperatorMetrics) -> set[str]:
    exported = parse_metrics(generate_latest(metrics.registry).decode())
    return {s.name for s in exported.samples if s.label("nodeconfig") == "cluster"}


def _pass(engine: RolloutEngine) -> float | None:
    return engine.reconciler.reconcile_once(engine.nodeconfigs.inputs("cluster"))


def test_a_deleted_nodeconfig_leaves_no_state_and_no_series(engine: RolloutEngine) -> None:
    assert _pass(engine) is not None
    state = engine.states.get("cluster")
    assert state.written is not None
    assert state.rendered and "cluster" in engine.nodes.dirty
    state.drain_retried()
    assert {"eventedpleg_nodes", "eventedpleg_condition", "eventedpleg_drain_retries_total"} <= _series(
        engine.reconciler.metrics
    )

    engine.nodeconfig_event("DELETED", BODY)

    assert engine.states.states == {} and state.closed
    assert "cluster" not in engine.nodes.dirty
    assert _series(engine.reconciler.metrics) == set()


def test_a_pass_running_when_its_nodeconfig_goes_brings_nothing_back(engine: RolloutEngine) -> None:
    assert _pass(engine) is not None
    state = engine.states.get("cluster")

    def deleted_meanwhile(*args: object) -> None:  # the DELETED event lands while the pass plans
        engine.nodeconfig_event("DELETED", BODY)

    engine.steps.submit = deleted_meanwhile  # type: ignore[method-assign,assignment]
    engine.nodes.apply_event("ADDED", SimNode("node-001").body())
    engine.reconciler.reconcile_once(PassInputs("cluster", view_of(BODY), ()))  # publishes after the delete
    state.drain_retried()  # a step that ends after the delete
    assert state.changes() is None  # a later pass on it plans nothing and ends its loop

    assert _series(engine.reconciler.metrics) == set()
    assert "cluster" not in engine.nodes.dirty
    assert engine.states.states == {}

"""The reconciler's inputs and outputs: a NodeConfig is validated once per watch event however many passes,
acknowledgements and finalizing passes read it; the target is built from the pass's reads by a pure
function; every status timestamp comes from the clock the engine was built with."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from eventedpleg import protocol
from eventedpleg.controller import reconciler
from eventedpleg.controller.engine import RolloutEngine
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodeconfigview import InvalidSpec, view_of
from eventedpleg.controller.reconciler import build_target
from eventedpleg.controller.wiring import build_engine
from eventedpleg.core import render
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.rollout.snapshot import Peer
from eventedpleg.k8s import configmaps, nodeconfigs
from eventedpleg.models.nodeconfig import LabelSelector, NodeConfigSpec, NodeConfigStatus
from eventedpleg_lab.sim.rolloutworld import SimNode
from tests.unit.controller.recorder import Recorder

CLOCK = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)  # not today: a timestamp from elsewhere would show


def body(generation: int = 1, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "cluster",
            "generation": generation,
            "uid": "u1",
            "creationTimestamp": "2026-11-02T12:00:00Z",
            "annotations": {protocol.ANN_RETRY: '{"node-000": "2026-11-02T12:30:00Z"}'},
        },
        "spec": spec if spec is not None else {"eventedPleg": True},
    }


@pytest.fixture
def statuses(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The status bodies the operator writes; no API."""
    written: list[dict[str, Any]] = []
    monkeypatch.setattr(configmaps, "ensure", lambda api, ns, rendered: None)
    monkeypatch.setattr(nodeconfigs, "patch_status", lambda api, name, status: written.append(status))
    return written


@pytest.fixture
def engine(statuses: list[dict[str, Any]]) -> Iterator[RolloutEngine]:
    engine = build_engine(None, "ns", Recorder(), OperatorMetrics(), clock=lambda: CLOCK)
    engine.steps.submit = lambda *args: None  # type: ignore[method-assign]  # no step runs: no API
    engine.nodes.apply_event("ADDED", SimNode("node-000").body())
    yield engine
    engine.steps.pool.shutdown()
    engine.steps.giveback_pool.shutdown()


def _validations(monkeypatch: pytest.MonkeyPatch, model: type[Any]) -> list[object]:
    """Every model_validate of `model`, recorded."""
    seen: list[object] = []
    original = model.model_validate

    def counted(cls: type[Any], obj: object, *args: Any, **kwargs: Any) -> Any:
        seen.append(obj)
        return original(obj, *args, **kwargs)

    monkeypatch.setattr(model, "model_validate", classmethod(counted))
    return seen


def _everything_that_reads_it(engine: RolloutEngine) -> None:
    """What one NodeConfig event is read by: the acknowledgement, passes, a finalizing pass."""
    engine.reconciler.acknowledge(engine.nodeconfigs.inputs("cluster"), "waiting")
    for _ in range(3):
        engine.reconciler.reconcile_once(engine.nodeconfigs.inputs("cluster"))
    engine.reconciler.finalize(engine.nodeconfigs.inputs("cluster", deleting=True))


@pytest.mark.parametrize("valid", [True, False])
def test_a_nodeconfig_is_validated_once_per_event(
    monkeypatch: pytest.MonkeyPatch, engine: RolloutEngine, valid: bool
) -> None:
    specs = _validations(monkeypatch, NodeConfigSpec)
    statuses = _validations(monkeypatch, NodeConfigStatus)
    spec = {"eventedPleg": True} if valid else {"eventedPleg": "sometimes"}

    engine.nodeconfig_event("ADDED", body(1, spec))
    _everything_that_reads_it(engine)
    assert (len(specs), len(statuses)) == (1, 1)

    engine.nodeconfig_event("MODIFIED", body(2, spec))  # a new event: validated again, once
    _everything_that_reads_it(engine)
    assert (len(specs), len(statuses)) == (2, 2)
    nodeconfig = engine.nodeconfigs.inputs("cluster").nodeconfig
    assert nodeconfig is not None and isinstance(nodeconfig.spec, InvalidSpec) is not valid


def test_the_target_is_built_from_the_nodeconfig_and_the_passs_reads() -> None:
    nodeconfig = view_of(body(7, {"eventedPleg": True, "rollout": {"maxUnavailable": "50%"}}))
    spec = nodeconfig.spec
    assert isinstance(spec, NodeConfigSpec)
    on = render.render(enabled=True, owner="cluster", kubelet_config_mode=spec.kubelet_config.value)
    off = render.render(enabled=False, owner="cluster", kubelet_config_mode=spec.kubelet_config.value)
    peers = (Peer("other", CLOCK, LabelSelector(match_labels={"pool": "b"})),)
    health = {"node-000": ("web/api-0",)}

    target = build_target(
        nodeconfig,
        spec,
        peers,
        rendered=(on, off),
        alerts="alert KubeletDown is firing",
        health=health,
        deleting=True,
    )

    assert on.hash != off.hash
    assert (target.name, target.generation, target.created) == (
        "cluster",
        7,
        datetime(2026, 11, 2, 12, 0, tzinfo=UTC),
    )
    assert target.spec is spec and target.peers == peers and target.deleting
    assert (target.hash_on, target.hash_off) == (on.hash, off.hash)
    assert target.agent_options == AgentOptions.from_spec(spec).to_json()
    assert target.retry == {"node-000": datetime(2026, 11, 2, 12, 30, tzinfo=UTC)}
    assert target.alerts == "alert KubeletDown is firing" and target.health == health


def test_every_status_timestamp_comes_from_the_injected_clock(
    engine: RolloutEngine, statuses: list[dict[str, Any]]
) -> None:
    engine.nodeconfig_event("ADDED", body(1))
    engine.reconciler.acknowledge(engine.nodeconfigs.inputs("cluster"), "waiting")  # the first status
    engine.reconciler.reconcile_once(engine.nodeconfigs.inputs("cluster"))  # a pass's status
    engine.nodeconfig_event("MODIFIED", body(2, {"eventedPleg": "sometimes"}))
    engine.reconciler.reconcile_once(engine.nodeconfigs.inputs("cluster"))  # InvalidSpec

    reasons = [{cond["reason"] for cond in status["conditions"]} for status in statuses]
    assert len(statuses) == 3 and "Reconciling" in reasons[0] and reasons[2] == {"InvalidSpec"}
    times = {cond["lastTransitionTime"] for status in statuses for cond in status["conditions"]}
    assert times == {"2031-01-02T03:04:05Z"}


NAMESPACE_RULE = {"namespaceSelector": {"matchLabels": {"tier": "data"}}, "behavior": "Skip"}


@pytest.mark.parametrize("rules", [[], [NAMESPACE_RULE]], ids=["no-rule", "namespace-rule"])
@pytest.mark.parametrize("listed", [True, False], ids=["listed", "not-listed"])
def test_a_namespace_selector_is_refused_where_namespaces_may_not_be_listed(
    statuses: list[dict[str, Any]], listed: bool, rules: list[dict[str, Any]]
) -> None:
    """Without `namespaces list` (chart value drain.listNamespaces off) a NodeConfig whose drain rules
    select namespaces is refused in its status, naming the value, rather than failing each drain."""
    engine = build_engine(
        None, "ns", Recorder(), OperatorMetrics(), clock=lambda: CLOCK, list_namespaces=listed
    )
    engine.steps.submit = lambda *args: None  # type: ignore[method-assign]  # no step runs: no API
    try:
        engine.nodeconfig_event("ADDED", body(1, {"eventedPleg": True, "drain": {"rules": rules}}))
        engine.reconciler.reconcile_once(engine.nodeconfigs.inputs("cluster"))
    finally:
        engine.steps.pool.shutdown()
        engine.steps.giveback_pool.shutdown()
    (written,) = statuses
    ready = {cond["type"]: cond for cond in written["conditions"]}["Ready"]
    if not listed and rules:
        assert (ready["reason"], ready["message"]) == ("InvalidSpec", reconciler.NAMESPACES_NOT_GRANTED)
    else:
        assert ready["reason"] != "InvalidSpec", ready

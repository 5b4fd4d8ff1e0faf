"""spec.rollout.healthGate in the rollout world, which runs the product's planner and step
policy and reads the gate's pods as the reconciler does (only for the nodes the previous pass named): a node
is cordoned only while the gate's pods on it are Ready, and one given back whose pods are not Ready again
afterSeconds later halts the rollout, naming them."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from eventedpleg import protocol
from eventedpleg.cli import report
from eventedpleg.cli.report import status_view
from eventedpleg.controller.metrics import OperatorMetrics
from eventedpleg.controller.nodeconfigstore import PassInputs
from eventedpleg.controller.nodeconfigview import view_of
from eventedpleg.controller.wiring import build_engine
from eventedpleg.core import compat, hostcheck
from eventedpleg.core.node.phases import hostcheckphase
from eventedpleg.core.rollout import planner, podhealth, status
from eventedpleg.core.rollout.actions import Cordon
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.planner import healthgate
from eventedpleg.k8s import configmaps, nodeconfigs
from eventedpleg.k8s.errors import ApiError
from eventedpleg.models.nodeconfig import LabelSelector
from eventedpleg_lab.sim.rolloutworld import T0, SimNode, World, fleet, spec

GATE = {"podSelector": {"matchLabels": {"app": "api"}}, "afterSeconds": 30}


def states(world: World) -> dict[str, str | None]:
    return {name: n.annotations.get(protocol.ANN_STATE) for name, n in world.nodes.items()}


def until_done(world: World, name: str, limit: int = 200) -> None:
    """Tick until `name` is Done and given back."""
    node = world.nodes[name]
    for _ in range(limit):
        if node.annotations.get(protocol.ANN_STATE) == "Done" and not node.unschedulable:
            return
        world.tick()
    raise AssertionError(f"{name} not Done: {states(world)}")


def test_a_node_is_not_cordoned_while_a_matching_pod_on_it_is_not_ready_and_is_taken_once_ready() -> None:
    nodes = fleet(3)
    nodes["node-000"].workload = {"web/api-0": False, "web/api-9": True}
    nodes["node-001"].workload = {"web/api-1": True}
    world = World(nodes, spec(rollout={"healthGate": GATE}))
    for _ in range(120):
        world.tick()
        assert nodes["node-000"].drains == 0 and not nodes["node-000"].unschedulable
    assert states(world) == {"node-000": None, "node-001": "Done", "node-002": "Done"}  # the rest went on
    result = world.plan()
    note = {n.name: (n.state, n.reason) for n in result.summary.attention}["node-000"]
    assert note == ("Pending", "waiting, not cordoned: pods not Ready (rollout.healthGate): web/api-0")
    assert result.summary.waiting == (
        "1 node(s) wait, not cordoned, for their pods to be Ready (rollout.healthGate): node-000 (web/api-0)"
    )
    assert not result.summary.complete and not result.summary.halted
    nodes["node-000"].workload["web/api-0"] = True
    final = world.run()
    assert final.summary.complete and nodes["node-000"].drains == 1
    assert states(world) == {"node-000": "Done", "node-001": "Done", "node-002": "Done"}


def test_a_node_whose_pods_are_not_read_yet_is_not_taken_on_that_pass() -> None:
    world = World(fleet(2), spec(rollout={"healthGate": GATE, "maxUnavailable": 2}))
    first = world.plan()
    assert first.actions == () and first.summary.health_watch == ("node-000", "node-001")
    assert (
        first.summary.waiting == "reading the readiness of the pods on 2 node(s) to take (rollout.healthGate)"
    )
    assert first.summary.next_wake == T0 + healthgate.RECHECK
    second = world.plan()  # read now: both Ready (no pods at all)
    assert sorted(a.node for a in second.actions) == ["node-000", "node-001"]


def test_pods_not_ready_after_afterseconds_fail_the_node_name_the_pods_and_halt_the_rollout() -> None:
    nodes = fleet(6)
    nodes["node-000"].workload = {"web/api-0": True, "web/api-1": True}
    world = World(nodes, spec(rollout={"healthGate": GATE, "maxFailedNodes": 3}))
    until_done(world, "node-000")
    nodes["node-000"].workload = {"web/api-0": False, "web/api-1": True, "web/api-2": False}  # not back
    final = world.run()
    node = nodes["node-000"]
    assert (
        node.annotations[protocol.ANN_STATE] == "Failed" and not node.unschedulable
    )  # left as it is, in service
    reason = node.annotations[protocol.ANN_REASON]
    assert reason.startswith(healthgate.UNHEALTHY)
    assert "30s after it was Done, pods not Ready (rollout.healthGate): web/api-0, web/api-2" in reason
    assert ("node-000", "NodeFailed") in world.events
    summary = final.summary
    assert summary.halted and summary.unhealthy and summary.counts.failed == 1  # maxFailedNodes is 3
    assert (
        summary.waiting
        == "halted: 1 node(s) had pods not Ready 30s after they were given back (rollout.healthGate)"
    )
    assert any(s is None for s in states(world).values())  # halted before the end
    taken = {name: n.drains for name, n in nodes.items()}
    for _ in range(100):
        world.tick()
    assert {name: n.drains for name, n in nodes.items()} == taken  # nothing new starts
    built = status.build_status(
        summary, enabled=True, deleting=False, generation=2, previous=[], now=world.now
    )
    degraded = {cond.type.value: cond for cond in built.conditions}["Degraded"]
    assert degraded.status.value == "True" and degraded.reason == "WorkloadNotReady"
    assert "web/api-0, web/api-2" in degraded.message and "node-000" in degraded.message


def test_no_halt_when_the_pods_are_ready_again_in_time() -> None:
    nodes = fleet(3)
    nodes["node-000"].workload = {"web/api-0": True}
    world = World(nodes, spec(rollout={"healthGate": GATE}))
    until_done(world, "node-000")
    nodes["node-000"].workload["web/api-0"] = False  # rescheduled here, starting
    for _ in range(20):
        world.tick()
    nodes["node-000"].workload["web/api-0"] = True  # Ready before the 30 s are over
    final = world.run()
    assert final.summary.complete and not final.summary.halted
    assert states(world) == {"node-000": "Done", "node-001": "Done", "node-002": "Done"}


def test_a_pod_failing_long_after_the_check_fails_no_node() -> None:
    nodes = fleet(1)
    world = World(nodes, spec(rollout={"healthGate": GATE}))
    world.run()
    world.now += timedelta(hours=1)
    nodes["node-000"].workload = {"web/api-0": False}
    final = world.run()
    assert final.summary.complete and nodes["node-000"].annotations[protocol.ANN_STATE] == "Done"


def test_retry_takes_a_node_failed_by_the_gate_again_once_its_pods_are_ready() -> None:
    nodes = fleet(1)
    nodes["node-000"].workload = {"web/api-0": True}
    world = World(nodes, spec(rollout={"healthGate": GATE}))
    until_done(world, "node-000")
    nodes["node-000"].workload["web/api-0"] = False
    world.run()
    assert world.plan().summary.halted
    nodes["node-000"].workload["web/api-0"] = True
    failed_at = world.views()[0].marks.since
    assert failed_at is not None
    world.retry = {"node-000": failed_at}  # what `eventedpleg retry node-000` writes
    final = world.run()
    assert final.summary.complete and not final.summary.halted and nodes["node-000"].drains == 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([{}, {"a/p": True}, {"a/p": False}]), min_size=1, max_size=6),
    st.integers(0, 2**32),
)
def test_without_the_gate_the_rollout_is_unchanged_and_reads_no_pods(
    workloads: list[dict[str, bool]], seed: int
) -> None:
    def make(with_pods: bool) -> World:
        nodes = fleet(len(workloads))
        for node, pods in zip(nodes.values(), workloads, strict=True):
            node.workload = dict(pods) if with_pods else {}
        return World(nodes, spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 1, "soakSeconds": 5}}))

    gated, plain = make(True), make(False)
    gated.run(drop=random.Random(seed))
    plain.run(drop=random.Random(seed))
    assert gated.events == plain.events and gated.history == plain.history
    assert {n: x.annotations for n, x in gated.nodes.items()} == {
        n: x.annotations for n, x in plain.nodes.items()
    }
    assert gated.health_reads == []


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.integers(1, 3), st.integers(0, 2**32))
def test_no_node_with_a_pod_not_ready_is_ever_cordoned_despite_crashes(
    unready: list[bool], max_unavailable: int, seed: int
) -> None:
    nodes = fleet(len(unready))
    for node, bad in zip(nodes.values(), unready, strict=True):
        node.workload = {f"web/{node.name}": not bad}
    world = World(nodes, spec(rollout={"healthGate": GATE, "maxUnavailable": max_unavailable}))
    rng = random.Random(seed)
    for _ in range(80):
        world.tick(drop=rng)
        for node, bad in zip(nodes.values(), unready, strict=True):
            if bad:
                assert node.drains == 0 and not node.unschedulable, node.name
    final = world.run(drop=rng)
    for node, bad in zip(nodes.values(), unready, strict=True):
        assert node.annotations.get(protocol.ANN_STATE) == (None if bad else "Done"), node.name
    assert final.summary.complete is not any(unready) and not final.summary.halted


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 8), st.integers(1, 3), st.integers(0, 2**32))
def test_incremental_planning_with_the_gate_plans_as_the_reference(size: int, budget: int, seed: int) -> None:
    """The gate's readiness is left out of a PassMemo's inputs (Target.health compares equal whatever it
    holds): a pass with kept decisions plans exactly as one without, while pods flip between passes."""
    rng = random.Random(seed)
    nodes = fleet(size)
    world = World(nodes, spec(rollout={"healthGate": GATE, "maxUnavailable": budget}))
    memo = planner.PassMemo()
    reference_plan = world.plan

    def both() -> planner.Plan:
        target = world.target
        remembered = planner.plan(world.views(), target, world.now, memo)
        reference = planner.plan(world.views(), target, world.now)
        assert remembered == reference
        world.health_watch = reference.summary.health_watch
        return reference

    world.plan = both  # type: ignore[method-assign]
    for _ in range(150):
        node = rng.choice(list(nodes.values()))
        if rng.random() < 0.2:
            node.workload = {"web/p": rng.random() < 0.6}
        world.tick(drop=rng)
    assert reference_plan is not None


def test_the_selector_goes_to_the_api_server_as_a_label_selector_and_readiness_is_read_per_node() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"app": "api", "tier": "web"},
            "matchExpressions": [
                {"key": "track", "operator": "In", "values": ["stable", "canary"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "NotIn", "values": ["x"]},
                {"key": "owner", "operator": "Exists"},
            ],
        }
    )
    assert podhealth.selector_text(selector) == (
        "app=api,tier=web,track in (stable,canary),!legacy,zone notin (x),owner"
    )

    def pod(name: str, node: str, ready: str, **extra: object) -> dict[str, object]:
        return {
            "metadata": {"name": name, "namespace": "web", **extra},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
        }

    pods = [
        pod("a", "n1", "True"),
        pod("b", "n1", "False"),
        pod("c", "n2", "True", deletionTimestamp="2026-11-02T12:00:00Z"),  # going away
        pod("d", "n3", "False"),  # a node nobody asked about
        {**pod("e", "n2", "False"), "status": {"phase": "Succeeded"}},  # finished: guards nothing
    ]
    assert podhealth.not_ready(pods, ["n1", "n2", "n4"]) == {"n1": ("web/b",), "n2": ("web/c",), "n4": ()}


@pytest.mark.parametrize("seconds", [0, 9, 86401])
def test_after_seconds_is_bounded(seconds: int) -> None:
    with pytest.raises(ValidationError, match=r"afterSeconds|after_seconds"):
        spec(rollout={"healthGate": {**GATE, "afterSeconds": seconds}})


def test_the_gate_is_off_without_a_selector_and_namespaces_are_names() -> None:
    assert not spec(rollout={"healthGate": {"afterSeconds": 60}}).rollout.health_gate.enabled
    with pytest.raises(ValidationError):
        spec(rollout={"healthGate": {**GATE, "namespaces": ["Not_A_Name"]}})


def test_status_and_the_status_command_name_the_nodes_waiting_on_the_gate() -> None:
    nodes = fleet(2)
    nodes["node-001"].workload = {"web/api-1": False}
    world = World(nodes, spec(rollout={"healthGate": GATE}))
    until_done(world, "node-000")
    for _ in range(3):
        world.tick()
    summary = world.plan().summary
    built = status.build_status(
        summary, enabled=True, deleting=False, generation=1, previous=[], now=world.now
    )
    progressing = {cond.type.value: cond for cond in built.conditions}["Progressing"]
    assert "node-001 (web/api-1)" in progressing.message and "rollout.healthGate" in progressing.message
    body = {"metadata": {"name": "cluster"}, "spec": {"eventedPleg": True}, "status": built.to_api()}
    text = status_view(body, world.views())
    row = next(line for line in text.splitlines() if line.startswith("node-001"))
    assert "Pending" in row and "pods not Ready (rollout.healthGate): web/api-1" in row


def test_sim_node_workload_defaults_to_no_pods() -> None:
    assert SimNode("x").workload == {}


def test_preflight_names_the_nodes_the_gate_would_keep_in_service() -> None:
    nodes = fleet(2)
    world = World(nodes, spec(rollout={"healthGate": {**GATE, "namespaces": ["web"]}}))

    def pod(name: str, node: str, ready: str, namespace: str = "web", app: str = "api") -> dict[str, object]:
        return {
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
        }

    pods = [
        pod("api-0", "node-000", "False"),
        pod("api-1", "node-001", "True"),
        pod("api-2", "node-001", "False", namespace="other"),  # not a namespace the gate looks at
        pod("db-0", "node-001", "False", app="db"),  # not selected
    ]
    policy = compat.Policy(False, False)
    drain = DrainPolicy.of(world.spec.drain)
    rows = report.preflight_rows(
        world.views(), policy, pods, [], drain, now=T0, health_gate=world.spec.rollout.health_gate
    )
    assert {row.node.name: row.not_ready for row in rows} == {"node-000": ("web/api-0",), "node-001": ()}
    text = report.preflight_table(rows, policy, drain, wide=True)
    assert "waits, pods not Ready (rollout.healthGate): web/api-0" in text
    assert (
        "1 of them with pods of rollout.healthGate not Ready: not cordoned until they are: node-000" in text
    )
    assert '"podsNotReady": [\n      "web/api-0"\n    ]' in report.preflight_json(rows, policy)


# --- the reconciler reads the pods only when the gate is on, and only for the nodes the last pass named ---


@pytest.mark.parametrize("gated", [True, False])
def test_the_reconciler_reads_the_gates_pods_only_for_the_nodes_the_last_pass_named(
    monkeypatch: pytest.MonkeyPatch, gated: bool
) -> None:
    monkeypatch.setattr(configmaps, "ensure", lambda api, ns, rendered: None)
    monkeypatch.setattr(nodeconfigs, "patch_status", lambda api, name, body: None)
    asked: list[tuple[str, ...]] = []
    answers: list[Any] = [{"node-000": ("web/api-0",)}, ApiError(500, "Internal", "down"), {"node-000": ()}]

    def pods(api: object, gate: object, nodes: Sequence[str]) -> Mapping[str, tuple[str, ...]]:
        asked.append(tuple(nodes))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return cast(Mapping[str, tuple[str, ...]], answer)

    engine = build_engine(None, "ns", cast(Any, _Recorder()), OperatorMetrics(), clock=lambda: T0, pods=pods)
    submitted: list[tuple[Any, ...]] = []
    engine.steps.submit = lambda actions, state: submitted.append(actions)  # type: ignore[method-assign]
    check = hostcheck.HostCheck(T0, {}, hostcheckphase.REFRESH.total_seconds()).to_json()
    for name in ("node-000", "node-001"):  # each with a live agent
        engine.nodes.apply_event("ADDED", SimNode(name, annotations={protocol.ANN_HOST_CHECK: check}).body())
    rollout: dict[str, Any] = {"canary": {"nodes": 0}}
    if gated:
        rollout["healthGate"] = GATE
    body = {
        "metadata": {
            "name": "cluster",
            "generation": 1,
            "uid": "u1",
            "creationTimestamp": "2026-11-02T12:00:00Z",
        },
        "spec": {"eventedPleg": True, "rollout": rollout},
    }
    try:
        engine.nodeconfig_event("ADDED", body)
        inputs = PassInputs("cluster", view_of(body), ())
        for _ in range(4):
            engine.reconciler.reconcile_once(inputs)
    finally:
        engine.steps.pool.shutdown()
        engine.steps.giveback_pool.shutdown()
    taken = [[a.node for a in actions if isinstance(a, Cordon)] for actions in submitted]
    if not gated:
        assert asked == [] and taken[0] == ["node-000"]
        return
    # the first pass reads nothing: it names node-000, not taken yet
    assert asked == [
        ("node-000",),  # not Ready: passed over, node-001 named as well
        ("node-000", "node-001"),  # the API fails: neither is taken (fail closed), node-000 named again
        ("node-000",),  # Ready: taken
    ]
    assert taken == [[], [], [], ["node-000"]]


class _Recorder:
    def emit(self, ref: Any, kind: str, reason: str, message: str) -> None:
        pass

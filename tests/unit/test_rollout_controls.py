"""Rollout controls (issue 33 item 3) in the rollout world, which runs the product's planner and step policy:
pods that ask the autoscalers not to be disrupted block the drain before the cordon."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventedpleg import constants as c
from eventedpleg.core.rollout import planner
from tests.unit.rolloutworld import H_ON, World, fleet, pod, spec

KARPENTER = {"karpenter.sh/do-not-disrupt": "true"}
AUTOSCALER = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
KARPENTER_TEXT = 'ml/train-0 annotated karpenter.sh/do-not-disrupt: "true"'


@pytest.mark.parametrize(("on_blocked", "state"), [("Skip", "Skipped"), ("Fail", "Failed")])
def test_a_pod_that_asks_not_to_be_disrupted_keeps_its_node_uncordoned_and_is_named(
    on_blocked: str, state: str
) -> None:
    nodes = fleet(3)
    nodes["node-000"].pods = [pod("train-0", KARPENTER, namespace="ml"), pod("web-0")]
    world = World(nodes, spec(drain={"onBlocked": on_blocked}, rollout={"maxFailedNodes": 2}))
    final = world.run()
    assert nodes["node-000"].drains == 0 and not nodes["node-000"].unschedulable
    assert nodes["node-000"].annotations[c.ANN_STATE] == state
    note = {n.name: n.reason for n in final.summary.attention}["node-000"]
    assert (
        note
        == f"not cordoned: the drain could never finish: {KARPENTER_TEXT} (drain.onBlocked: {on_blocked})"
    )
    assert ("node-000", "DrainBlocked") in world.events
    assert [nodes[n].annotations[c.ANN_STATE] for n in ("node-001", "node-002")] == ["Done", "Done"]


def test_with_on_blocked_wait_the_node_waits_in_service_until_the_annotation_goes() -> None:
    nodes = fleet(2)
    nodes["node-000"].pods = [pod("cache-0", AUTOSCALER)]
    world = World(nodes, spec(drain={"onBlocked": "Wait"}))
    for _ in range(20):
        world.tick()
        assert not nodes["node-000"].unschedulable
    waiting = world.plan().summary.waiting
    assert 'default/cache-0 annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"' in waiting
    nodes["node-000"].pods = [pod("cache-0")]  # the owner lets it go
    world.run()
    assert nodes["node-000"].annotations[c.ANN_CURRENT] == H_ON and nodes["node-000"].drains == 1


def test_a_granted_force_delete_never_deletes_a_pod_that_asked_not_to_be_disrupted() -> None:
    nodes = fleet(2)
    nodes["node-001"].pods = [pod("train-0", KARPENTER, namespace="ml")]
    world = World(nodes, spec(drain={"onTimeout": "ForceDelete", "timeoutSeconds": 5}))
    world.run()
    assert nodes["node-001"].annotations[c.ANN_STATE] == "Skipped" and nodes["node-001"].drains == 0
    assert nodes["node-001"].pods[0]["metadata"]["annotations"] == KARPENTER


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from([{}, {}, KARPENTER, AUTOSCALER]), min_size=1, max_size=8),
    st.sampled_from(["Skip", "Fail", "Wait"]),
    st.integers(0, 2**32),
)
def test_no_node_running_such_a_pod_is_ever_cordoned_despite_crashes(
    marks: list[dict[str, str]], on_blocked: str, seed: int
) -> None:
    nodes = fleet(len(marks))
    for node, asks in zip(nodes.values(), marks, strict=True):
        node.pods = [pod("p", asks)]
    world = World(nodes, spec(drain={"onBlocked": on_blocked}, rollout={"maxFailedNodes": 100}))
    rng = random.Random(seed)
    for _ in range(60):
        world.tick(drop=rng)
        for node, asks in zip(nodes.values(), marks, strict=True):
            if asks:
                assert node.drains == 0 and not node.unschedulable, node.name
    if on_blocked == "Skip":  # the rest goes on: every other node Done, each blocked one Skipped, uncordoned
        world.run(drop=rng)
        for node, asks in zip(nodes.values(), marks, strict=True):
            assert node.annotations[c.ANN_STATE] == ("Skipped" if asks else "Done"), node.name
            assert not node.unschedulable and (node.drains == 0 or not asks)


# --- rollout.maxFailedNodes as a count or a percentage ---------------------------------------------------


@pytest.mark.parametrize(("value", "limit"), [(2, 2), ("10%", 2), ("15%", 3), ("1%", 1), ("100%", 20)])
def test_max_failed_nodes_in_percent_resolves_as_max_unavailable_does(value: int | str, limit: int) -> None:
    assert planner.int_or_percent(value, 20) == limit
    nodes = fleet(20)
    failing = ["node-003", "node-007", "node-011", "node-015"]
    for name in failing:
        nodes[name].agent_fails = True
    world = World(nodes, spec(rollout={"maxFailedNodes": value}))
    final = world.run()
    failed = final.summary.counts.failed
    assert final.summary.halted is (limit <= len(failing))
    assert failed == min(limit, len(failing))  # one node at a time: it halts at the limit exactly
    if final.summary.halted:
        shown = f"{value} ({limit} of 20 node(s))" if isinstance(value, str) else str(value)
        assert (
            final.summary.waiting == f"halted after {failed} failed node(s) (rollout.maxFailedNodes={shown})"
        )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 12), st.integers(1, 100), st.sets(st.integers(0, 11), max_size=6), st.integers(0, 2**32)
)
def test_the_rollout_halts_exactly_when_the_failed_nodes_reach_the_percentage(
    size: int, percent: int, failing: set[int], seed: int
) -> None:
    nodes = fleet(size)
    for i in failing:
        if i < size:
            nodes[f"node-{i:03d}"].agent_fails = True
    world = World(nodes, spec(rollout={"maxFailedNodes": f"{percent}%", "maxUnavailable": 1}))
    final = world.run(drop=random.Random(seed))
    limit = planner.int_or_percent(f"{percent}%", size)
    assert limit == max(1, size * percent // 100)
    assert final.summary.halted is (final.summary.counts.failed >= limit)
    assert final.summary.counts.failed <= limit  # one node at a time: never past the limit

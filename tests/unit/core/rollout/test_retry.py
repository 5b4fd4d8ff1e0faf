"""Retrying failed nodes (core.rollout.retry): `eventedpleg retry` writes a request on the NodeConfig, the
planner acts on it once per failure, from what is on the nodes alone."""

from __future__ import annotations

import random
from datetime import timedelta

from eventedpleg import protocol
from eventedpleg.constants import ConditionType
from eventedpleg.core.rollout import retry, status
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.takeverdict import RETRY_WAITS
from eventedpleg.core.rollout.planner.taking import BLOCKED
from eventedpleg.core.rollout.snapshot import node_view
from eventedpleg.models.nodeconfig import DrainSpec
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim.rolloutworld import EXHAUSTED, H_ON, T0, World, fleet, spec


def ask(world: World, *only: str) -> None:
    """What the CLI does: merge a request for the failed nodes into the NodeConfig's annotation."""
    asked = retry.request(world.views(), world.name, world.retry, frozenset(only))
    world.retry = retry.parse(retry.encode(asked))  # through the annotation's text, as on the cluster


def test_a_rolled_back_node_is_retried_once_the_cause_is_fixed_and_the_halt_lifts() -> None:
    nodes = fleet(3)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec())
    halted = world.run()
    assert halted.summary.halted and nodes["node-000"].annotations[protocol.ANN_STATE] == "RolledBack"
    assert nodes["node-001"].annotations.get(protocol.ANN_STATE) is None  # nothing else started

    nodes["node-000"].agent_fails = False  # the cause is fixed
    ask(world)
    assert set(world.retry) == {"node-000"}
    final = world.run()
    assert final.summary.complete and not final.summary.halted and final.summary.counts.failed == 0
    assert all(n.annotations[protocol.ANN_STATE] == "Done" for n in nodes.values())
    assert nodes["node-000"].drains == 2  # taken once more, only because it was asked


def test_a_retry_is_acted_on_once_per_failure() -> None:
    nodes = fleet(2)
    nodes["node-000"].agent_fails = True  # not fixed: it fails again
    world = World(nodes, spec())
    world.run()
    ask(world)
    again = world.run()
    assert again.summary.halted and nodes["node-000"].drains == 2  # retried once, failed again, stays
    assert not retry.requested(node_view(nodes["node-000"].body()), world.retry)  # the old request is spent
    ask(world)  # a new request for the new failure
    assert world.run().summary.halted and nodes["node-000"].drains == 3


def test_a_failed_node_we_left_cordoned_is_given_back_then_taken_again_despite_crashes() -> None:
    for seed in range(20):
        nodes = fleet(3)
        nodes["node-001"].unschedulable = True  # an administrator's cordon: kept throughout
        nodes["node-001"].agent_silent = True  # no agent answers: Failed, kept cordoned for a human
        world = World(
            nodes, spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 0}, "takeCordonedNodes": True})
        )
        world.run()
        failed = nodes["node-001"].annotations
        assert failed[protocol.ANN_STATE] == "Failed" and failed[protocol.ANN_CORDONED_BY_US] == "true"
        nodes["node-001"].agent_silent = False
        ask(world, "node-001")
        final = world.run(drop=random.Random(seed))
        assert final.summary.complete and nodes["node-001"].annotations[protocol.ANN_STATE] == "Done", seed
        assert nodes["node-001"].unschedulable  # the administrator's cordon is still there
        assert protocol.ANN_CORDONED_BY_US not in nodes["node-001"].annotations


def test_only_the_named_nodes_and_stale_entries_are_dropped() -> None:
    nodes = fleet(3)
    nodes["node-000"].agent_fails = nodes["node-002"].agent_fails = True
    world = World(nodes, spec(rollout={"maxFailedNodes": 3, "canary": {"nodes": 0}}))
    world.run()
    ask(world, "node-002")
    assert set(world.retry) == {"node-002"}
    stale = {"node-001": world.now, **world.retry}  # node-001 is Done: an entry for it means nothing
    assert set(retry.request(world.views(), world.name, stale, frozenset({"node-000"}))) == {
        "node-000", "node-002",
    }  # fmt: skip
    assert retry.request(world.views(), "other", {}) == {}  # another NodeConfig's nodes are not ours


def test_an_unreadable_request_asks_for_nothing() -> None:
    for text in (None, "", "not json", "[1]", '{"n": "not a time"}'):
        assert retry.parse(text) == {}


# --- automatic retries of timed-out drains (spec.drain.retries, back-off doubling) ---------------------


def test_a_drain_blocked_for_a_while_is_retried_after_its_back_off_and_completes() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(seconds=200)  # the PDB allows it later
    world = World(nodes, spec(drain={"timeoutSeconds": 60, "retries": 2, "retryBackoffSeconds": 100}))
    while nodes["node-000"].annotations.get(protocol.ANN_STATE) != "Failed":
        world.tick()
    failed = nodes["node-000"].annotations
    assert (
        failed[protocol.ANN_DRAIN_TIMEOUTS] == "1"
        and "automatic retry 1 of 2 in 100s" in failed[protocol.ANN_REASON]
    )
    assert not nodes["node-000"].unschedulable  # given back while it waits
    summary = world.plan().summary
    assert not summary.halted and summary.counts.failed == 0 and not summary.complete
    (note,) = [n for n in summary.attention if n.name == "node-000"]
    assert "taken again at" in note.reason and summary.next_wake is not None
    assert summary.retrying == (note,)
    progressing = status.conditions_for(summary, enabled=True, deleting=False)[ConditionType.PROGRESSING]
    assert (
        progressing.status
        and "automatic retry pending: node-000: drain did not finish" in progressing.message
    )
    final = world.run()
    assert final.summary.complete and nodes["node-000"].annotations[protocol.ANN_STATE] == "Done"
    assert protocol.ANN_DRAIN_TIMEOUTS not in nodes["node-000"].annotations  # cleared once a drain finished
    assert nodes["node-000"].drains >= 2 and ("node-000", "DrainTimeout") in world.events


def test_automatic_retries_are_bounded_then_the_node_counts_as_failed() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)  # never clears in time
    nodes["node-000"].budget_allows = True  # ... although its budget says it allows one: retried each time
    world = World(nodes, spec(drain={"timeoutSeconds": 30, "retries": 2, "retryBackoffSeconds": 10}))
    final = world.run()
    node = nodes["node-000"]
    assert node.drains == 3 and node.annotations[protocol.ANN_DRAIN_TIMEOUTS] == "3"  # first try + 2 retries
    assert "automatic retry" not in node.annotations[protocol.ANN_REASON]
    assert final.summary.halted and final.summary.counts.failed == 1
    assert [e for e in world.events if e == ("node-000", "DrainTimeout")] == [
        ("node-000", "DrainTimeout")
    ] * 3
    policy = DrainPolicy.of(DrainSpec(retry_backoff_seconds=10))
    assert policy.backoff(1) == timedelta(seconds=10) and policy.backoff(2) == timedelta(seconds=20)


def test_a_retry_waits_in_service_while_the_budget_that_timed_out_the_drain_still_allows_nothing() -> None:
    """The automatic retry looks at the cause again: the node is not cordoned a second time for a
    PodDisruptionBudget that still allows 0 disruptions, and says which one it waits for."""
    nodes = fleet(2)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(hours=1)
    world = World(nodes, spec(drain={"timeoutSeconds": 20, "onTimeout": "Fail", "retryBackoffSeconds": 10}))
    while world.now < T0 + timedelta(minutes=50):
        world.tick(seconds=30)
        if world.now > T0 + timedelta(minutes=2):
            assert not nodes["node-000"].unschedulable
    assert nodes["node-000"].drains == 1  # cordoned once, for the drain that timed out
    summary = world.plan().summary
    assert summary.counts.failed == 0 and not summary.halted  # waiting for its retry, not a failure
    (note,) = [n for n in summary.attention if n.name == "node-000"]
    assert note.reason == f"{BLOCKED}{RETRY_WAITS}{EXHAUSTED}"
    progressing = status.conditions_for(summary, enabled=True, deleting=False)[ConditionType.PROGRESSING]
    assert (
        progressing.status and EXHAUSTED in progressing.message
    )  # Progressing names the budget it waits for
    world.run()  # the budget allows at 1 h: taken again as usual
    assert nodes["node-000"].drains == 2
    assert all(n.annotations[protocol.ANN_CURRENT] == H_ON for n in nodes.values())


def test_no_automatic_retry_when_retries_is_zero() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"timeoutSeconds": 30, "retries": 0}))
    final = world.run()
    assert nodes["node-000"].drains == 1 and final.summary.halted


def test_every_state_a_retry_cannot_take_says_what_ends_it() -> None:
    for state in [*NodeState, None]:
        annotations = {protocol.ANN_OWNER: "cluster"}
        if state is not None:
            annotations |= {protocol.ANN_STATE: state.value, protocol.ANN_STATE_SINCE: T0.isoformat()}
        view = node_view({"metadata": {"name": "n", "annotations": annotations}})
        if retry.retryable(view, "cluster"):
            assert state in retry.RETRYABLE
            continue
        assert not retry.way_out(view, "cluster").startswith("state "), state  # a named way out each
    stranger = node_view({"metadata": {"name": "n", "annotations": {}}})
    assert "taken by itself once the agent runs" in retry.way_out(stranger, "cluster")

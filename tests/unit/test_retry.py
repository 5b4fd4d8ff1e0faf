"""Retrying failed nodes (core.retry): `eventedpleg retry` writes a request on the NodeConfig, the planner
acts on it once per failure, from what is on the nodes alone."""

from __future__ import annotations

import random

from eventedpleg import constants as c
from eventedpleg.core import retry
from eventedpleg.core.snapshot import node_view
from tests.unit.rolloutworld import World, fleet, spec


def ask(world: World, *only: str) -> None:
    """What the CLI does: merge a request for the failed nodes into the NodeConfig's annotation."""
    asked = retry.request(world.views(), world.name, world.retry, frozenset(only))
    world.retry = retry.parse(retry.encode(asked))  # through the annotation's text, as on the cluster


def test_a_rolled_back_node_is_retried_once_the_cause_is_fixed_and_the_halt_lifts() -> None:
    nodes = fleet(3)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec())
    halted = world.run()
    assert halted.summary.halted and nodes["node-000"].annotations[c.ANN_STATE] == "RolledBack"
    assert nodes["node-001"].annotations.get(c.ANN_STATE) is None  # nothing else started

    nodes["node-000"].agent_fails = False  # the cause is fixed
    ask(world)
    assert set(world.retry) == {"node-000"}
    final = world.run()
    assert final.summary.complete and not final.summary.halted and final.summary.counts.failed == 0
    assert all(n.annotations[c.ANN_STATE] == "Done" for n in nodes.values())
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
        world = World(nodes, spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
        world.run()
        failed = nodes["node-001"].annotations
        assert failed[c.ANN_STATE] == "Failed" and failed[c.ANN_CORDONED_BY_US] == "true"
        nodes["node-001"].agent_silent = False
        ask(world, "node-001")
        final = world.run(drop=random.Random(seed))
        assert final.summary.complete and nodes["node-001"].annotations[c.ANN_STATE] == "Done", seed
        assert nodes["node-001"].unschedulable  # the administrator's cordon is still there
        assert c.ANN_CORDONED_BY_US not in nodes["node-001"].annotations


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

"""Conditions and status built from a plan summary."""

from __future__ import annotations

from datetime import timedelta

from eventedpleg.core import status
from tests.unit.rolloutworld import T0, World, fleet, spec


def conds(world: World) -> dict[str, tuple[str, str, str]]:
    result = status.build_status(
        world.plan().summary, enabled=True, deleting=False, generation=3, previous=[], now=T0
    )
    return {c.type.value: (c.status.value, c.reason, c.message) for c in result.conditions}


def test_complete_rollout_is_available() -> None:
    world = World(fleet(3), spec())
    world.run()
    got = conds(world)
    assert got["Available"][:2] == ("True", "AllNodesUpdated")
    assert got["Available"][2] == "3 of 3 eligible node(s) run Evented PLEG"
    assert got["Progressing"][:2] == ("False", "RolloutComplete")
    assert got["Degraded"][:2] == ("False", "AsExpected")
    assert got["Paused"][0] == "False"


def test_in_progress_names_the_nodes() -> None:
    world = World(fleet(3), spec())
    world.tick()
    world.tick()
    got = conds(world)
    assert got["Available"][:2] == ("False", "RolloutInProgress")
    assert got["Progressing"][0] == "True"
    assert "node-000" in got["Progressing"][2]


def test_halt_is_degraded_and_names_the_node() -> None:
    nodes = fleet(3)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec())
    world.run()
    got = conds(world)
    assert got["Degraded"][:2] == ("True", "RolloutHalted")
    assert "node-000: kubelet did not start" in got["Degraded"][2]
    assert got["Available"][:2] == ("False", "NodesFailed")
    assert got["Progressing"][:2] == ("False", "RolloutHalted")


def test_paused() -> None:
    world = World(fleet(2), spec(rollout={"paused": True}))
    got = conds(world)
    assert got["Paused"][:2] == ("True", "SpecPaused")
    assert got["Progressing"][:2] == ("False", "Paused")


def test_last_transition_time_moves_only_on_change() -> None:
    world = World(fleet(2), spec())
    summary = world.plan().summary
    first = status.build_status(summary, enabled=True, deleting=False, generation=1, previous=[], now=T0)
    later = T0 + timedelta(minutes=5)
    again = status.build_status(
        summary, enabled=True, deleting=False, generation=1, previous=first.conditions, now=later
    )
    assert again == first  # nothing changed: identical status, so no write
    world.run()
    done = status.build_status(
        world.plan().summary, enabled=True, deleting=False, generation=1, previous=first.conditions, now=later
    )
    available = next(c for c in done.conditions if c.type.value == "Available")
    degraded = next(c for c in done.conditions if c.type.value == "Degraded")
    assert available.last_transition_time == later
    assert degraded.last_transition_time == T0


def test_status_counts_and_bounded_node_list() -> None:
    nodes = fleet(60)
    for node in nodes.values():
        node.kubelet = "v1.25.0"
    world = World(nodes, spec())
    result = status.build_status(
        world.plan().summary, enabled=True, deleting=False, generation=1, previous=[], now=T0
    )
    assert result.nodes.skipped == 60
    assert len(result.node_statuses) == 50
    assert result.node_statuses_truncated == 10

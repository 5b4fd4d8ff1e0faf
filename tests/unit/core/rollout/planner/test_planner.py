"""The rollout planner: tables for each rule, then properties over random clusters and crashes."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.constants import ConditionType
from eventedpleg.core import hostcheck
from eventedpleg.core.rollout import planner, status
from eventedpleg.core.rollout.actions import Cordon, MarkFailed
from eventedpleg.core.rollout.drain import rules as drainrules
from eventedpleg.core.rollout.snapshot import NodeView, Peer, node_view
from eventedpleg.models.nodeconfig import DrainBehavior, NodeCounts
from eventedpleg_lab.sim.rolloutworld import H_OFF, H_ON, NEVER, T0, SimNode, World, fleet, spec
from tests.unit.core.rollout.drain.drawn import DRAIN_RULES, NAMESPACES, node_pods


def states(world: World) -> dict[str, str | None]:
    return {name: n.annotations.get(protocol.ANN_STATE) for name, n in world.nodes.items()}


def protocol_keys(node: SimNode) -> dict[str, str]:
    """The node's protocol annotations but the agent's host check (which a release leaves)."""
    return {
        k: v
        for k, v in node.annotations.items()
        if k.startswith(protocol.GROUP) and k != protocol.ANN_HOST_CHECK
    }


def assert_converged_on(world: World, want: str) -> None:
    for node in world.nodes.values():
        assert node.annotations.get(protocol.ANN_CURRENT) == want, node
        assert node.annotations.get(protocol.ANN_STATE) == "Done", node
        assert protocol.ANN_CORDONED_BY_US not in node.annotations, node


def test_full_rollout_one_at_a_time() -> None:
    world = World(fleet(10), spec())
    final = world.run()
    assert_converged_on(world, H_ON)
    assert not any(n.unschedulable for n in world.nodes.values())
    assert max(u for _, u in world.history) == 1
    assert all(n.drains == 1 for n in world.nodes.values())
    assert final.summary.complete
    assert final.summary.counts == NodeCounts(total=10, eligible=10, updated=10)


@pytest.mark.parametrize(("value", "parallel"), [(3, 3), ("30%", 3), ("5%", 1), ("100%", 10)])
def test_max_unavailable_int_or_percent(value: int | str, parallel: int) -> None:
    world = World(fleet(10), spec(rollout={"maxUnavailable": value}))
    world.run()
    assert_converged_on(world, H_ON)
    assert max(u for _, u in world.history) == parallel


def test_zone_then_name_order() -> None:
    nodes = fleet(4)
    for name, zone in zip(nodes, ["b", "a", "b", "a"], strict=True):
        nodes[name].labels[c.LABEL_ZONE] = zone
    world = World(nodes, spec())
    first = [a.node for a in world.plan().actions]
    assert first == ["node-001"]
    world.run()
    order = sorted(world.nodes.values(), key=lambda n: n.annotations[protocol.ANN_STATE_SINCE])
    assert [n.name for n in order] == ["node-001", "node-003", "node-000", "node-002"]


def taken_order(world: World) -> list[str]:
    """Run one node at a time to the end; the nodes in the order they were cordoned."""
    taken: list[str] = []
    for _ in range(500):
        result = world.tick()
        taken += [a.node for a in result.actions if isinstance(a, Cordon) and a.node not in taken]
        if result.summary.complete:
            break
    assert_converged_on(world, H_ON)
    return taken


def test_oldest_first_takes_nodes_by_creation_then_name_within_each_zone() -> None:
    nodes = fleet(5)
    ages = [3, 1, None, 1, 2]  # days before T0; node-002 has no creationTimestamp: last of its zone
    for (name, node), age in zip(nodes.items(), ages, strict=True):
        node.created = None if age is None else T0 - timedelta(days=age)
        node.labels[c.LABEL_ZONE] = "b" if name == "node-004" else "a"
    world = World(nodes, spec(rollout={"order": {"by": "OldestFirst"}}))
    # zone a: node-000 (3 days), then node-001 and node-003 (1 day, by name), node-002 (unknown); zone b
    assert taken_order(world) == ["node-000", "node-001", "node-003", "node-002", "node-004"]


def test_label_order_by_value_numbers_as_numbers_unlabelled_last() -> None:
    nodes = fleet(5)
    ranks = ["10", None, "9", "b", "a"]
    for (name, node), rank in zip(nodes.items(), ranks, strict=True):
        if rank is not None:
            node.labels["example.com/rank"] = rank
        if name == "node-000":
            node.labels[c.LABEL_ZONE] = "a"  # zone first: the zone-less nodes ("") go before it
    world = World(nodes, spec(rollout={"order": {"by": "Label", "label": "example.com/rank"}}))
    assert taken_order(world) == ["node-002", "node-004", "node-003", "node-001", "node-000"]


def test_name_order_is_the_default_and_batches_start_in_order() -> None:
    def zoned() -> dict[str, SimNode]:
        nodes = fleet(4, labels={})
        for node, zone in zip(nodes.values(), "baba", strict=True):
            node.labels = {c.LABEL_ZONE: zone, "rank": "1"}
        return nodes

    assert spec().rollout.order.by == "Name"
    by_label = {"by": "Label", "label": "rank"}  # every rank equal: zone, then name
    for order in ({}, {"order": by_label}):
        world = World(zoned(), spec(rollout={"maxUnavailable": 2, **order}))
        assert [a.node for a in world.plan().actions] == ["node-001", "node-003"]  # zone a, by name


def test_not_ready_nodes_count_against_the_budget() -> None:
    nodes = fleet(3)
    nodes["node-002"].ready = False
    world = World(nodes, spec())
    result = world.plan()
    assert result.actions == ()
    assert "1 of 3 node(s) unavailable" in result.summary.waiting


def test_a_node_someone_else_cordoned_is_not_taken_until_uncordoned() -> None:
    """Another maintenance may own it (issue: a cordon that is not ours): it waits, named, and still
    counts against the budget; once uncordoned it is taken like any other."""
    nodes = fleet(3)
    nodes["node-000"].unschedulable = True
    world = World(nodes, spec(rollout={"maxUnavailable": 2}))
    for _ in range(50):
        result = world.tick()
    assert states(world) == {"node-000": None, "node-001": "Done", "node-002": "Done"}
    (note,) = [n for n in result.summary.attention if n.name == "node-000"]
    assert note.reason.startswith("waiting, not taken: cordoned by someone else")
    assert max(u for _, u in world.history) == 2  # node-000 plus one of ours at a time
    nodes["node-000"].unschedulable = False
    world.run()
    assert_converged_on(world, H_ON)
    assert nodes["node-000"].drains == 1


def test_pre_cordoned_node_is_processed_for_free_and_stays_cordoned_when_allowed() -> None:
    nodes = fleet(3)
    nodes["node-000"].unschedulable = True
    world = World(nodes, spec(rollout={"maxUnavailable": 2, "takeCordonedNodes": True}))
    assert {a.node for a in world.plan().actions} == {"node-000", "node-001"}  # node-000 costs nothing
    world.run()
    assert_converged_on(world, H_ON)
    assert nodes["node-000"].unschedulable  # the administrator's cordon is kept
    assert not nodes["node-001"].unschedulable
    assert max(u for _, u in world.history) == 2


def test_an_administrators_cordon_uses_up_the_budget() -> None:
    """Already-unavailable nodes count (README, "Availability budget"; as in MCO): with maxUnavailable 1
    nothing else starts."""
    nodes = fleet(3)
    nodes["node-000"].unschedulable = True
    world = World(nodes, spec(rollout={"takeCordonedNodes": True}))
    for _ in range(50):
        result = world.tick()
    assert states(world) == {"node-000": "Done", "node-001": None, "node-002": None}
    assert result.summary.waiting == (
        "waiting for capacity: 1 of 3 node(s) unavailable, maxUnavailable=1 (1); "
        "made unavailable outside this rollout: node-000 (cordoned)"
    )
    assert result.summary.held_by == (planner.HeldNode("node-000", "cordoned"),)
    assert result.summary.budget_stuck  # nothing of ours in flight: only a human can free it


def test_the_budget_named_while_our_own_nodes_use_it_too_is_not_stuck() -> None:
    nodes = fleet(4)
    nodes["node-003"].ready = False
    world = World(nodes, spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    world.tick()  # node-000 starts: our node plus the NotReady one use the budget
    summary = world.plan().summary
    assert summary.held_by == (planner.HeldNode("node-003", "NotReady"),) and not summary.budget_stuck
    assert "made unavailable outside this rollout: node-003 (NotReady)" in summary.waiting
    world.run()
    assert world.plan().summary.budget_stuck  # 3 Done is all it can do; node-003 holds the rest


def test_unsupported_and_risky_nodes_are_skipped_with_reasons() -> None:
    nodes = fleet(3)
    nodes["node-000"].kubelet = "v1.25.3"
    nodes["node-001"].runtime = "containerd://1.7.13"
    world = World(nodes, spec())
    final = world.run()
    notes = {n.name: n.reason for n in final.summary.attention}
    assert "unrecognized feature gate" in notes["node-000"]
    assert "allowRisky" in notes["node-001"]
    assert protocol.ANN_STATE not in nodes["node-000"].annotations
    assert final.summary.counts.skipped == 2
    assert final.summary.complete

    risky = World(fleet(1, runtime="containerd://1.7.13"), spec(allowRisky=True))
    risky.run()
    assert_converged_on(risky, H_ON)


def test_skip_label_is_respected() -> None:
    nodes = fleet(2)
    nodes["node-000"].labels[c.LABEL_SKIP] = "true"
    world = World(nodes, spec())
    world.run()
    assert protocol.ANN_STATE not in nodes["node-000"].annotations
    assert nodes["node-001"].annotations[protocol.ANN_CURRENT] == H_ON


def test_node_selector() -> None:
    nodes = fleet(4)
    nodes["node-001"].labels["pool"] = "evented"
    world = World(nodes, spec(nodeSelector={"matchLabels": {"pool": "evented"}}))
    final = world.run()
    assert [n for n in nodes.values() if protocol.ANN_CURRENT in n.annotations] == [nodes["node-001"]]
    assert final.summary.counts.total == 1


def test_canary_goes_alone_then_soaks() -> None:
    world = World(fleet(5), spec(rollout={"maxUnavailable": 3, "canary": {"nodes": 1, "soakSeconds": 60}}))
    while states(world)["node-000"] != "Done":
        result = world.tick()
        assert len([a for a in result.actions if isinstance(a, Cordon)]) <= 1
        assert world.unavailable() <= 1
    done_at = world.now
    held = world.tick()
    assert "canary soaking until" in held.summary.waiting
    while world.now < done_at + timedelta(seconds=59):
        assert not [a for a in world.tick().actions if isinstance(a, Cordon)]
    world.run()
    assert_converged_on(world, H_ON)
    assert max(u for _, u in world.history) == 3


def test_failed_node_is_rolled_back_uncordoned_and_halts() -> None:
    nodes = fleet(4)
    nodes["node-001"].agent_fails = True
    world = World(nodes, spec())
    final = world.run()
    assert final.summary.halted
    assert "halted after 1 failed node" in final.summary.waiting
    assert nodes["node-001"].annotations[protocol.ANN_STATE] == "RolledBack"
    assert not nodes["node-001"].unschedulable  # healthy after rollback: given back
    assert protocol.ANN_STATE not in nodes["node-002"].annotations  # nothing new started after the failure
    assert [f.name for f in final.summary.failures] == ["node-001"]


def test_max_failed_nodes_lets_the_rollout_go_on() -> None:
    nodes = fleet(4)
    nodes["node-001"].agent_fails = True
    world = World(nodes, spec(rollout={"maxFailedNodes": 2}))
    final = world.run()
    assert not final.summary.halted
    assert final.summary.counts.updated == 3
    assert final.summary.counts.failed == 1


def test_silent_agent_marks_failed_and_keeps_the_node_cordoned() -> None:
    nodes = fleet(2)
    nodes["node-000"].agent_silent = True
    world = World(nodes, spec(verification={"timeoutSeconds": 10}))
    final = world.run(limit=400)
    assert nodes["node-000"].annotations[protocol.ANN_STATE] == "Failed"
    reason = nodes["node-000"].annotations[protocol.ANN_REASON]
    # Unknown whether files changed: it stays cordoned, and the reason says what was seen and what to run.
    assert "no report from the agent within 130s of Applying" in reason
    assert "host check is fresh" in reason and "eventedpleg retry node-000" in reason
    assert nodes["node-000"].unschedulable
    assert final.summary.halted
    degraded = status.conditions_for(final.summary, enabled=True, deleting=False)[ConditionType.DEGRADED]
    assert degraded.message.startswith("halted after 1 failed node(s)"), degraded


def test_pdb_blocked_drain_waits_and_names_it() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(seconds=30)
    world = World(nodes, spec())
    for _ in range(10):
        world.tick()
    result = world.plan()
    assert {n.name: n.reason for n in result.summary.attention}["node-000"] == "PDB blocks eviction"
    assert states(world)["node-001"] is None  # maxUnavailable 1: the blocked node holds the slot
    world.run()
    assert_converged_on(world, H_ON)


@pytest.mark.parametrize(
    ("on_blocked", "state", "last"), [("Skip", "Skipped", "Done"), ("Fail", "Failed", None)]
)
def test_a_drain_that_could_never_finish_never_cordons_its_node(
    on_blocked: str, state: str, last: str | None
) -> None:
    nodes = fleet(3)
    nodes["node-001"].drain_never_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"onBlocked": on_blocked}))
    for _ in range(200):
        world.tick()
        assert not nodes["node-001"].unschedulable
    final = world.plan()
    # Skip goes on; Fail counts against maxFailedNodes (0 by default): the rollout halts
    assert states(world) == {"node-000": "Done", "node-001": state, "node-002": last}
    assert final.summary.halted is (on_blocked == "Fail")
    note = {n.name: n.reason for n in final.summary.attention}["node-001"]
    assert note == f"not cordoned: the drain could never finish: {NEVER} (drain.onBlocked: {on_blocked})"


def test_on_blocked_wait_holds_the_rollout_with_the_node_in_service_until_the_budget_changes() -> None:
    nodes = fleet(3)
    nodes["node-000"].drain_never_until = T0 + timedelta(minutes=10)
    world = World(nodes, spec(drain={"onBlocked": "Wait"}))
    for _ in range(20):
        world.tick()
        assert not nodes["node-000"].unschedulable
    result = world.plan()
    assert {n.name: n.reason for n in result.summary.attention}[
        "node-000"
    ] == f"waiting, not cordoned: {NEVER}"
    assert states(world)["node-001"] is None  # the rollout waits (maxUnavailable 1, node order)
    assert [e for e in world.events if e == ("node-000", "DrainBlocked")] == [("node-000", "DrainBlocked")]
    world.run()  # the budget is changed at 10 min: the node is taken and the rollout completes
    assert_converged_on(world, H_ON)
    assert protocol.ANN_BLOCKED not in nodes["node-000"].annotations


def test_drain_timeout_skip_skips_the_node_and_goes_on() -> None:
    nodes = fleet(3)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"timeoutSeconds": 20, "onTimeout": "Skip"}))
    final = world.run()
    assert nodes["node-000"].annotations[protocol.ANN_STATE] == "Skipped"
    assert nodes["node-000"].annotations[protocol.ANN_CAUSE] == "DrainTimeout"
    assert not nodes["node-000"].unschedulable  # a timed-out drain never leaves our cordon behind
    assert final.summary.counts.updated == 2
    assert not final.summary.halted


def test_drain_timeout_fail_without_retries_halts() -> None:
    nodes = fleet(3)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"timeoutSeconds": 20, "onTimeout": "Fail", "retries": 0}))
    final = world.run()
    assert nodes["node-000"].annotations[protocol.ANN_STATE] == "Failed"
    assert not nodes["node-000"].unschedulable
    assert final.summary.halted


def test_drain_timeout_force_delete_proceeds() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"timeoutSeconds": 20, "onTimeout": "ForceDelete"}))
    world.run()
    assert_converged_on(world, H_ON)


def test_drain_timeout_force_delete_not_granted_fails_the_node_and_gives_it_back() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"timeoutSeconds": 20, "onTimeout": "ForceDelete"}))
    world.allow_force_delete = False
    world.run()
    assert states(world)["node-000"] == "Failed"
    assert "drain.allowForceDelete=true" in world.nodes["node-000"].annotations[protocol.ANN_REASON]
    assert not world.nodes["node-000"].unschedulable  # a timed-out drain never keeps our cordon


def test_pause_holds_new_nodes_but_finishes_started_ones() -> None:
    world = World(fleet(3), spec())
    world.tick()
    assert states(world)["node-000"] == "Applying"  # cordoned and drained in one step
    world.spec = spec(rollout={"paused": True})
    final = world.run()
    assert final.summary.paused
    assert final.summary.waiting == "paused (spec.rollout.paused)"
    assert states(world) == {"node-000": "Done", "node-001": None, "node-002": None}
    assert not world.nodes["node-000"].unschedulable


def test_window_gates_starts() -> None:
    # T0 is a Monday 12:00 UTC.
    closed = World(
        fleet(2), spec(rollout={"window": {"days": ["tuesday"], "start": "01:00", "end": "05:00"}})
    )
    result = closed.plan()
    assert result.actions == ()
    assert "outside the maintenance window (tuesday 01:00-05:00 UTC)" in result.summary.waiting
    open_now = World(fleet(2), spec(rollout={"window": {"start": "11:00", "end": "13:00"}}))
    assert open_now.plan().actions


def test_flip_to_false_mid_rollout_converges_to_off() -> None:
    world = World(fleet(4), spec())
    while states(world)["node-001"] != "Done":
        world.tick()
    world.spec = spec(eventedPleg=False)
    world.run()
    for name, node in world.nodes.items():
        if name in ("node-000", "node-001"):
            assert node.annotations[protocol.ANN_CURRENT] == H_OFF  # our drop-ins removed again
        else:
            assert (
                protocol.ANN_CURRENT not in node.annotations
                or node.annotations[protocol.ANN_CURRENT] == H_OFF
            )
        assert protocol.ANN_CORDONED_BY_US not in node.annotations
        assert not node.unschedulable


def test_delete_with_revert_removes_everything_then_finalizes() -> None:
    world = World(fleet(3), spec())
    world.run()
    world.deleting = True
    assert not world.plan().summary.finalized
    final = world.run()
    assert final.summary.finalized
    for node in world.nodes.values():
        assert not protocol_keys(node), node.annotations
        assert node.drains == 2
        assert not node.unschedulable


def test_delete_with_keep_releases_without_draining() -> None:
    nodes = fleet(3)
    nodes["node-001"].drain_blocked_until = T0 + timedelta(hours=1)
    world = World(nodes, spec(onDelete="Keep"))
    while states(world)["node-000"] != "Done":
        world.tick()
    while states(world)["node-001"] != "Draining":
        world.tick()
    world.deleting = True
    final = world.run()
    assert final.summary.finalized
    assert protocol_keys(world.nodes["node-000"]) == {
        protocol.ANN_CURRENT: H_ON
    }  # files stay, marked as ours
    assert world.nodes["node-001"].annotations.get(protocol.ANN_CURRENT) is None
    assert not any(n.unschedulable for n in world.nodes.values())


# A NodeConfig created a day earlier that selects the nodes labelled pool=a.
OLDER_PEER = Peer(
    "older", T0 - timedelta(days=1), spec(nodeSelector={"matchLabels": {"pool": "a"}}).node_selector
)


def test_overlapping_nodeconfigs_the_older_one_wins() -> None:
    nodes = fleet(2)
    nodes["node-000"].labels["pool"] = "a"
    world = World(nodes, spec())
    target = world.target
    result = planner.plan(
        world.views(), target.__class__(**{**target.__dict__, "peers": (OLDER_PEER,)}), world.now
    )
    assert result.summary.conflicts == (planner.OwnerConflict("node-000", "older"),)
    assert [a.node for a in result.actions] == ["node-001"]
    skipped = [n for n in result.summary.attention if n.name == "node-000"]
    assert "conflict: also selected by NodeConfig 'older'" in skipped[0].reason


@pytest.mark.parametrize("max_failed", [1, 2, 5])
def test_a_failed_canary_halts_whatever_max_failed_nodes_says(max_failed: int) -> None:
    nodes = fleet(5)
    nodes["node-000"].agent_fails = True  # the first node in order is the canary
    world = World(
        nodes, spec(rollout={"maxFailedNodes": max_failed, "canary": {"nodes": 1, "soakSeconds": 5}})
    )
    final = world.run()
    assert final.summary.halted and final.summary.canary_failed
    assert "a canary node failed" in final.summary.waiting
    assert nodes["node-000"].annotations[protocol.ANN_STATE] == "RolledBack"
    assert not any(
        protocol.ANN_STATE in nodes[f"node-00{i}"].annotations for i in range(1, 5)
    )  # none started


def test_after_the_canaries_passed_max_failed_nodes_applies_again() -> None:
    nodes = fleet(5)
    nodes["node-002"].agent_fails = True  # fails after the canary (node-000) was Done and soaked
    world = World(nodes, spec(rollout={"maxFailedNodes": 2, "canary": {"nodes": 1, "soakSeconds": 5}}))
    final = world.run()
    assert not final.summary.halted and not final.summary.canary_failed
    assert final.summary.counts.updated == 4
    assert final.summary.counts.failed == 1


def test_every_canary_must_pass_before_a_failure_stops_being_a_canarys() -> None:
    nodes = fleet(5)
    nodes["node-001"].agent_fails = True  # the second of two canaries
    world = World(
        nodes,
        spec(rollout={"maxFailedNodes": 3, "maxUnavailable": 2, "canary": {"nodes": 2, "soakSeconds": 5}}),
    )
    final = world.run()
    assert final.summary.canary_failed
    assert final.summary.counts.updated == 1  # node-000 finished; nothing after the canaries started


def test_deselected_node_gets_our_files_removed_then_released() -> None:
    nodes = fleet(2)
    for node in nodes.values():
        node.labels["pool"] = "x"
    world = World(nodes, spec(nodeSelector={"matchLabels": {"pool": "x"}}))
    world.run()
    del nodes["node-000"].labels["pool"]
    world.run()
    assert not protocol_keys(nodes["node-000"])
    assert nodes["node-000"].drains == 2
    assert nodes["node-001"].annotations[protocol.ANN_CURRENT] == H_ON


def test_new_nodes_joining_later_are_rolled() -> None:
    world = World(fleet(2), spec())
    world.run()
    world.nodes["node-new"] = SimNode(name="node-new")
    world.run()
    assert_converged_on(world, H_ON)
    assert world.nodes["node-000"].drains == 1


def test_agent_options_change_needs_no_drain() -> None:
    world = World(fleet(1), spec())
    world.run()
    world.nodes["node-000"].annotations[protocol.ANN_AGENT_OPTIONS] = '{"o":0}'
    world.nodes["node-000"].rv += 1
    (action,) = world.plan().actions
    assert action.__class__.__name__ == "SetAgentOptions"
    world.run()
    assert world.nodes["node-000"].drains == 1


def test_spec_change_produces_a_new_rollout_but_done_nodes_are_never_drained_twice_for_one_hash() -> None:
    world = World(fleet(3), spec())
    world.run()
    assert all(n.drains == 1 and n.annotations[protocol.ANN_CURRENT] == H_ON for n in world.nodes.values())
    # A spec change that renders the same drop-ins (same hash) starts nothing.
    world.spec = spec(rollout={"maxUnavailable": 2})
    for _ in range(5):
        assert world.plan().actions == ()
        world.tick()
    # One that renders other drop-ins (Evented PLEG off: a new hash) rolls out again, once per node...
    world.spec = spec(eventedPleg=False)
    assert world.plan().actions != ()
    world.run()
    assert all(n.drains == 2 and n.annotations[protocol.ANN_CURRENT] == H_OFF for n in world.nodes.values())
    # ...and then no node is touched again for that hash.
    for _ in range(5):
        assert world.plan().actions == ()
        world.tick()
    assert all(n.drains == 2 for n in world.nodes.values())


def test_mark_failed_is_only_for_the_agent_phase() -> None:
    world = World(fleet(1), spec(drain={"timeoutSeconds": 0}))
    world.nodes["node-000"].drain_blocked_until = T0 + timedelta(hours=2)
    for _ in range(600):
        assert not [a for a in world.tick().actions if isinstance(a, MarkFailed)]
    assert states(world)["node-000"] == "Draining"  # timeout 0 waits forever, like kubectl


# --- properties -----------------------------------------------------------------------------------

KARPENTER, SCALE_DOWN = protocol.AUTOSCALER_ANNOTATIONS
KUBELETS = ["v1.34.2", "v1.36.4", "v1.37.2", "v1.25.0", "v1.30.1"]
RUNTIMES = ["containerd://2.1.4", "containerd://1.7.13", "cri-o://1.34.1", "containerd://1.6.20"]


RANKS = st.sampled_from([{}, {"rank": "2"}, {"rank": "10"}, {"rank": "x"}])  # for rollout.order: Label
DRAINING = {"key": "eventedpleg.io/draining", "effect": "PreferNoSchedule"}
TAINTING = st.sampled_from([None, None, {"seconds": 3}, {"key": "k", "value": "v", "effect": "NoSchedule"}])
ORDERS = st.sampled_from([{"by": "Name"}, {"by": "OldestFirst"}, {"by": "Label", "label": "rank"}])


@st.composite
def clusters(draw: st.DrawFn) -> World:
    size = draw(st.integers(1, 12))
    nodes = {}
    for i in range(size):
        node = SimNode(
            name=f"n{i:02d}",
            kubelet=draw(st.sampled_from(KUBELETS)),
            runtime=draw(st.sampled_from(RUNTIMES)),
            labels={c.LABEL_ZONE: draw(st.sampled_from(["a", "b", "c"])), **draw(RANKS)},
            created=draw(st.sampled_from([None, T0 - timedelta(days=2), T0 - timedelta(days=1)])),
            # the user's taints, one with taintBeforeCordon's key: kept through the rollout (tick checks)
            taints=draw(st.sampled_from([[], [], [DRAINING], [{"key": "gpu", "effect": "NoSchedule"}]])),
            unschedulable=draw(st.integers(0, 4)) == 0,
            # some nodes carry an autoscaler annotation the user set: kept through the rollout (tick checks)
            annotations=draw(st.sampled_from([{}, {}, {KARPENTER: "true"}, {SCALE_DOWN: "false"}])),
        )
        node.pods, node.completes = draw(node_pods())  # what drain.rules act on
        nodes[node.name] = node
    max_unavailable = draw(st.one_of(st.integers(1, 4), st.sampled_from(["10%", "25%", "50%"])))
    canary = draw(st.integers(0, 2))
    return World(
        nodes,
        spec(
            allowRisky=draw(st.booleans()),
            drain={"taintBeforeCordon": draw(TAINTING), "rules": draw(DRAIN_RULES)},
            rollout={
                "maxUnavailable": max_unavailable,
                "canary": {"nodes": canary, "soakSeconds": 5},
                "order": draw(ORDERS),
                "takeCordonedNodes": draw(st.booleans()),
            },
        ),
        namespaces=NAMESPACES,
    )


def perturb(world: World, rng: random.Random, tick: int, *, chance: float, churn: bool = False) -> None:
    """At most one change, each kind with probability `chance`, to a random node: the skip label, the
    label OLDER_PEER selects, another kubelet version; with `churn` also Ready flipping, a node joining
    and a node leaving."""
    node = rng.choice(list(world.nodes.values()))
    kinds = 6 if churn else 3
    kind = int(rng.random() / chance)
    if kind >= kinds:
        return
    if kind == 0:
        node.labels = {**node.labels, c.LABEL_SKIP: "true"}
    elif kind == 1:
        node.labels = {**node.labels, "pool": "a"}
    elif kind == 2:
        node.kubelet = rng.choice(["v1.34.2", "v1.25.0", "v1.36.1"])
    elif kind == 3:
        node.ready = not node.ready
    elif kind == 4:
        joined = SimNode(name=f"late{tick:03d}", labels={c.LABEL_ZONE: rng.choice("abc")})
        world.nodes[joined.name] = joined
    elif len(world.nodes) > 1:
        del world.nodes[node.name]


def end_state(world: World) -> dict[str, tuple[str | None, str | None, bool]]:
    return {
        name: (
            n.annotations.get(protocol.ANN_CURRENT),
            n.annotations.get(protocol.ANN_STATE),
            n.unschedulable,
        )
        for name, n in world.nodes.items()
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(0, 2**32))
def test_random_clusters_converge_within_budget_despite_crashes(world: World, seed: int) -> None:
    originally_cordoned = {name for name, n in world.nodes.items() if n.unschedulable}
    external = len(originally_cordoned)
    allowed = planner.int_or_percent(world.spec.rollout.max_unavailable, len(world.nodes))
    pods = {name: list(n.pods) for name, n in world.nodes.items()}
    final = world.run(drop=random.Random(seed))
    for name, node in world.nodes.items():  # drain.rules: skipped pods stay, a drain takes every other
        behaviors = [
            drainrules.place(body, world.spec.drain.rules, NAMESPACES).behavior for body in pods[name]
        ]
        skipped = [body for body, how in zip(pods[name], behaviors, strict=True) if how is DrainBehavior.SKIP]
        assert all(body in node.pods for body in skipped), name
        if node.drains:  # what is left running: the skipped pods (a skipped Job's pod may have completed)
            running = [body for body in node.pods if body["status"]["phase"] != "Succeeded"]
            assert running == [body for body in skipped if body["status"]["phase"] != "Succeeded"], name
    assert max(u for _, u in world.history) <= max(allowed, external)
    if world.spec.rollout.take_cordoned_nodes:
        if external < allowed:
            assert final.summary.complete, final.summary
    else:  # someone else's cordon: never taken
        for name in originally_cordoned:
            assert (
                world.nodes[name].drains == 0 and protocol.ANN_STATE not in world.nodes[name].annotations
            ), name
    for name, node in world.nodes.items():
        assert node.unschedulable == (name in originally_cordoned), name  # nobody left cordoned by us
        assert node.drains <= 1, name  # no Done node is drained again
        if node.annotations.get(protocol.ANN_STATE) is not None:
            assert node.annotations[protocol.ANN_STATE] == "Done"
            assert node.annotations[protocol.ANN_CURRENT] == H_ON


def test_every_interrupted_prefix_replans_to_the_same_end_state() -> None:
    """Crash after every possible number of ticks, losing half of that tick's actions: same end state."""

    def make() -> World:
        nodes = fleet(6, labels={})
        nodes["node-002"].unschedulable = True
        nodes["node-004"].kubelet = "v1.25.0"
        nodes["node-001"].annotations[KARPENTER] = "true"  # the user's: kept, never removed by us
        nodes["node-003"].annotations[SCALE_DOWN] = "false"
        rollout = {"maxUnavailable": 2, "canary": {"nodes": 1, "soakSeconds": 3}, "takeCordonedNodes": True}
        return World(nodes, spec(rollout=rollout))

    reference = make()
    reference.run()
    expected = end_state(reference)
    ticks = len(reference.history)
    for crash_at in range(ticks):
        world = make()
        for _ in range(crash_at):
            world.tick()
        world.tick(drop=random.Random(crash_at))
        world.run()
        assert end_state(world) == expected, f"crash after {crash_at} ticks"
        assert all(n.drains <= 1 for n in world.nodes.values())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(0, 2**32))
def test_a_selection_memo_never_changes_a_plan(world: World, seed: int) -> None:
    """The memo only remembers answers of the pure rules: every pass plans the same with it and without
    it, while nodes' labels, the selector, peers and allowRisky change between passes."""
    rng = random.Random(seed)
    memo = planner.SelectionMemo()
    plain = world.plan

    def both() -> planner.Plan:
        views, target = world.views(), world.target
        remembered = planner.plan(views, target, world.now, memo)
        assert remembered == plain()
        return remembered

    world.plan = both  # type: ignore[method-assign]
    for tick in range(80):
        perturb(world, rng, tick, chance=0.05)
        if tick == 20:
            world.peers = (OLDER_PEER,)
        if tick == 40:
            world.spec = spec(allowRisky=not world.spec.allow_risky, nodeSelector={"matchExpressions": []})
        if tick == 60:
            world.spec = spec(nodeSelector={"matchLabels": {"pool": "a"}})
        world.tick(drop=rng)


def _reused_views(world: World, cache: dict[str, tuple[dict[str, object], NodeView]]) -> list[NodeView]:
    """Views as the node cache hands them out: the very same object while a node's body is unchanged."""
    views = []
    for name, node in world.nodes.items():
        body = node.body()
        kept = cache.get(name)
        if kept is None or kept[0] != body:
            kept = cache[name] = (body, node_view(body))
        views.append(kept[1])
    return views


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.integers(0, 2**32))
def test_incremental_planning_never_changes_a_plan(world: World, seed: int) -> None:
    """A PassMemo recomputes only the nodes whose view changed or whose deadline passed -- found by looking
    at every node, or told which nodes changed (as the node cache tells it) -- and every pass plans
    exactly as a pass without it, through PDB-blocked drains and their timeouts and retries (held in
    service while the budget allows nothing), drains that could never finish (every drain.onBlocked),
    silent and failing agents, absent agents and agents that die once their node is cordoned, clock jumps past
    deadlines and past host checks' freshness, label, selector, peer and spec changes, a retry request,
    nodes joining and leaving, and deletion."""
    rng = random.Random(seed)
    memo, told = planner.PassMemo(), planner.PassMemo()  # told: is given the changed nodes
    cache: dict[str, tuple[dict[str, object], NodeView]] = {}
    seen: dict[str, NodeView] = {}  # what `told` saw last
    for node in world.nodes.values():
        roll = rng.random()
        if roll < 0.2:
            node.drain_blocked_until = T0 + timedelta(seconds=rng.choice([5, 40, 400]))
            node.budget_allows = rng.random() < 0.5  # else a retry waits in service while it allows 0
        elif roll < 0.25:  # a drain that could never finish (drain.onBlocked), until the budget changes
            node.drain_never_until = T0 + timedelta(seconds=rng.choice([30, 3600]))
        elif roll < 0.3:
            node.agent_silent = True
        elif roll < 0.4:
            node.agent_fails = True
        elif roll < 0.45:
            node.agent_absent = True
            node.annotations.pop(protocol.ANN_HOST_CHECK, None)
        elif roll < 0.5:
            node.agent_dies_on_cordon = True
    drain = {
        "timeoutSeconds": rng.choice([0, 10, 30]),
        "onTimeout": rng.choice(["Fail", "Skip", "ForceDelete"]),
        "retries": rng.choice([0, 1, 2]),
        "onBlocked": rng.choice(["Skip", "Wait", "Fail"]),
        "retryBackoffSeconds": 10,
        "taintBeforeCordon": rng.choice([None, {"seconds": 5}]),
    }
    base = world.spec.model_dump(by_alias=True, mode="json")
    drain["rules"] = base["drain"]["rules"]  # as drawn: drains go order by order
    world.spec = spec(**{**base, "drain": drain, "verification": {"timeoutSeconds": 10}})

    def both() -> planner.Plan:
        target = world.target
        views = _reused_views(world, cache)
        remembered = planner.plan(views, target, world.now, memo)
        reference = planner.plan(world.views(), target, world.now)
        assert remembered == reference
        now = {view.name: view for view in views}
        changed = {
            name: now.get(name) for name in now.keys() | seen.keys() if now.get(name) is not seen.get(name)
        }
        assert planner.plan(views, target, world.now, told, changed if seen else None) == reference
        seen.clear()
        seen.update(now)
        return remembered

    world.plan = both  # type: ignore[method-assign]
    for tick in range(120):
        perturb(world, rng, tick, chance=0.03, churn=True)
        if tick == 30:
            world.peers = (OLDER_PEER,)
        if tick == 50:
            world.retry = {
                n.name: planner_since
                for n in world.views()
                if (planner_since := n.marks.since) is not None and n.marks.state is not None
            }
        if tick == 70:
            world.spec = spec(**{**base, "drain": drain, "allowRisky": not world.spec.allow_risky})
        if tick == 100:
            world.deleting = True
        world.tick(seconds=rng.choice([1, 1, 1, 7, 60, 3 * 3600]), drop=rng)  # 3 h: host checks go stale


def test_post_node_delay_spaces_each_start_after_the_last_node_done() -> None:
    nodes = fleet(3)
    world = World(nodes, spec(rollout={"canary": {"nodes": 0}, "postNodeDelaySeconds": 300}))
    taken: dict[str, datetime] = {}
    for _ in range(2000):
        result = world.tick(5)
        for name, node in nodes.items():
            if node.unschedulable and name not in taken:
                taken[name] = world.now
        if result.summary.complete:
            break
    assert_converged_on(world, H_ON)
    done = {
        n: datetime.fromisoformat(node.annotations[protocol.ANN_STATE_SINCE]) for n, node in nodes.items()
    }
    order = sorted(taken, key=taken.__getitem__)
    assert order == ["node-000", "node-001", "node-002"]
    for before, after in itertools.pairwise(order):
        assert taken[after] - done[before] >= timedelta(seconds=300)
        assert taken[after] - done[before] < timedelta(seconds=330)  # and not much later


def test_post_node_delay_is_said_in_status() -> None:
    nodes = fleet(2)
    world = World(nodes, spec(rollout={"canary": {"nodes": 0}, "postNodeDelaySeconds": 600}))
    while states(world)["node-000"] != "Done":
        world.tick()
    result = world.plan()
    assert not result.actions or all(a.node == "node-000" for a in result.actions)
    assert "rollout.postNodeDelaySeconds: 600" in result.summary.waiting
    assert result.summary.next_wake is not None


@pytest.mark.parametrize(("mode", "skipped"), [("DropInOnly", True), ("EditConfigFile", False)])
def test_the_agents_host_check_skips_a_node_before_any_cordon_in_the_mode_it_refuses(
    mode: str, skipped: bool
) -> None:
    nodes = fleet(2)
    check = hostcheck.HostCheck(T0, {"DropInOnly": "Unsupported: no --config-dir", "EditConfigFile": ""})
    nodes["node-000"].annotations[protocol.ANN_HOST_CHECK] = check.to_json()
    world = World(nodes, spec(kubeletConfig=mode))
    for _ in range(300):
        world.tick()
        if skipped:
            assert not nodes["node-000"].unschedulable
    world.run()
    if skipped:
        assert states(world) == {"node-000": "Skipped", "node-001": "Done"}
        reason = nodes["node-000"].annotations[protocol.ANN_REASON]
        at = T0.isoformat(timespec="seconds")
        assert reason == f"not cordoned: Unsupported: no --config-dir (the agent's host check at {at})"
    else:
        assert_converged_on(world, H_ON)


def test_the_host_check_never_holds_taking_our_files_off() -> None:
    nodes = fleet(1)
    nodes["node-000"].annotations[protocol.ANN_HOST_CHECK] = hostcheck.HostCheck(
        T0, {"DropInOnly": "Unsupported: x"}
    ).to_json()
    world = World(nodes, spec(eventedPleg=False))
    world.run()
    assert states(world)["node-000"] != "Skipped"


def test_in_place_updates_safe_nodes_without_a_cordon_and_drains_the_others_first() -> None:
    nodes = fleet(3)
    nodes["node-002"].runtime = "containerd://1.7.35"  # Risky: drained first even with InPlace
    world = World(nodes, spec(drain={"mode": "InPlace"}, allowRisky=True))
    plan = world.run()
    assert_converged_on(world, H_ON)
    assert plan.summary.complete
    assert {n.name: n.drains for n in nodes.values()} == {"node-000": 0, "node-001": 0, "node-002": 1}
    assert not any(n.unschedulable for n in nodes.values())
    assert ("node-000", "InPlace") in world.events and ("node-002", "NotInPlace") in world.events


# --- drain.taintBeforeCordon ---------------------------------------------------------------------------

DRAINING_KEY = "eventedpleg.io/draining"


def our_taint(node: SimNode) -> bool:
    return any(t["key"] == DRAINING_KEY for t in node.taints)


def test_taint_then_cordon_after_the_seconds_then_the_taint_goes_with_the_uncordon() -> None:
    nodes = fleet(2)
    world = World(nodes, spec(drain={"taintBeforeCordon": {"seconds": 30}}))
    first = world.tick()
    assert [type(a).__name__ for a in first.actions] == ["Cordon"]
    assert our_taint(nodes["node-000"]) and not nodes["node-000"].unschedulable
    assert ("node-000", "Tainted") in world.events
    waiting = world.plan()
    assert waiting.actions == ()  # neither the cordon yet nor a second node: the tainted one holds the budget
    assert waiting.summary.next_wake == T0 + timedelta(seconds=30)
    assert "cordoned at" in waiting.summary.attention[0].reason
    cordoned_at: datetime | None = None
    for _ in range(200):
        at = world.now
        world.tick()
        cordoned = world.nodes["node-000"].unschedulable  # a fresh read each tick (mypy narrows otherwise)
        if cordoned_at is None and cordoned:
            cordoned_at = at
        if states(world)["node-000"] == "Done" and not cordoned:
            break
    assert cordoned_at == T0 + timedelta(seconds=30)  # tainted at T0, cordoned when the wait is over
    assert not our_taint(nodes["node-000"])  # given back: untainted with the uncordon
    assert not our_taint(nodes["node-001"])  # the next node waits for the budget, untainted
    world.run()
    assert_converged_on(world, H_ON)
    assert not any(our_taint(n) or n.annotations.get(protocol.ANN_TAINTED_SINCE) for n in nodes.values())
    assert sum(reason == "Tainted" for _, reason in world.events) == 2


def test_a_taint_with_our_key_set_before_the_rollout_is_never_removed() -> None:
    nodes = fleet(2)
    theirs = {"key": DRAINING_KEY, "value": "ops", "effect": "NoSchedule"}
    nodes["node-000"].taints = [theirs]
    world = World(nodes, spec(drain={"taintBeforeCordon": {"seconds": 5}}))
    world.run()
    assert_converged_on(world, H_ON)
    assert nodes["node-000"].taints == [theirs]
    assert nodes["node-001"].taints == []


@pytest.mark.parametrize("how", ["skip label", "deselected", "deleted, Keep"])
def test_a_node_tainted_but_no_longer_to_be_taken_is_given_back_untainted_never_cordoned(how: str) -> None:
    nodes = fleet(2, labels={"pool": "a"})
    tainting = {"taintBeforeCordon": {"seconds": 60}}
    world = World(nodes, spec(drain=tainting))
    world.tick()
    assert our_taint(nodes["node-000"])
    if how == "skip label":
        nodes["node-000"].labels[c.LABEL_SKIP] = "true"
    elif how == "deselected":
        world.spec = spec(drain=tainting, nodeSelector={"matchLabels": {"pool": "b"}})
    else:
        world.spec = spec(drain=tainting, onDelete="Keep")
        world.deleting = True
    world.run()
    assert not our_taint(nodes["node-000"]) and not protocol_keys(nodes["node-000"])  # released
    assert nodes["node-000"].drains == 0
    assert ("node-000", "Released") in world.events


@pytest.mark.parametrize("how", ["deselected", "deleted, Revert"])
def test_a_tainted_node_with_our_drop_ins_to_remove_is_still_cordoned_after_its_wait(how: str) -> None:
    """Not given back untainted: it would be chosen and tainted again, round and round."""
    nodes = fleet(2, labels={"pool": "a"})
    tainting = {"taintBeforeCordon": {"seconds": 20}}
    world = World(nodes, spec(drain=tainting, rollout={"maxUnavailable": 2}))
    world.run()
    assert_converged_on(world, H_ON)
    world.spec = spec(eventedPleg=False, drain=tainting)  # our drop-ins come off: each node is tainted
    world.tick()
    assert our_taint(nodes["node-000"])
    if how == "deselected":
        world.spec = spec(drain=tainting, nodeSelector={"matchLabels": {"pool": "b"}})
    else:
        world.deleting = True
    world.run()
    for node in nodes.values():
        assert node.annotations.get(protocol.ANN_CURRENT) in (None, H_OFF) and not our_taint(node)
    assert sum(reason == "Tainted" for _, reason in world.events) == 4  # two rollouts, once per node each


def test_the_tainted_node_is_cordoned_after_its_wait_even_when_the_rollout_is_paused_meanwhile() -> None:
    nodes = fleet(2)
    world = World(nodes, spec(drain={"taintBeforeCordon": {"seconds": 10}}))
    world.tick()
    world.spec = spec(drain={"taintBeforeCordon": {"seconds": 10}}, rollout={"paused": True})
    for _ in range(60):
        world.tick()
    assert states(world) == {"node-000": "Done", "node-001": None}  # started, so it finished
    assert not our_taint(nodes["node-000"]) and not nodes["node-000"].unschedulable

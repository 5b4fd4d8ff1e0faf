"""Conditions and status built from a plan summary."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from eventedpleg import protocol
from eventedpleg.core.evidence import Evidence
from eventedpleg.core.rollout import status
from eventedpleg.core.rollout.snapshot import Peer
from eventedpleg.models.nodeconfig import NodeConfigStatus
from eventedpleg_lab.sim.rolloutworld import H_ON, NEVER, T0, World, fleet, pod, spec


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
    assert "node-000: verification failed: kubelet did not start" in got["Degraded"][2]
    assert got["Available"][:2] == ("False", "NodesFailed")
    assert got["Progressing"][:2] == ("False", "RolloutHalted")


def test_a_halt_on_the_last_node_is_not_reported_as_complete() -> None:
    nodes = fleet(1)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec())
    world.run()
    assert world.plan().summary.complete  # nothing is left to start, yet the rollout did not finish
    got = conds(world)
    assert got["Progressing"][:2] == ("False", "RolloutHalted")
    assert "nothing left to do" not in got["Progressing"][2]


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


# --- kstatus: Ready, Reconciling, Stalled ----------------------------------------------------------------


def kstatus(got: dict[str, tuple[str, str, str]]) -> tuple[str, str, str]:
    return got["Ready"][0], got["Reconciling"][0], got["Stalled"][0]


def test_ready_only_when_the_rollout_is_complete() -> None:
    world = World(fleet(3), spec())
    assert kstatus(conds(world)) == ("False", "True", "False")  # nothing started yet: reconciling
    world.tick()
    assert kstatus(conds(world)) == ("False", "True", "False")
    world.run()
    got = conds(world)
    assert kstatus(got) == ("True", "False", "False")
    assert got["Ready"][1:] == ("RolloutComplete", "3 of 3 eligible node(s) run Evented PLEG")


def test_halt_is_stalled_not_reconciling() -> None:
    nodes = fleet(3)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec())
    world.run()
    got = conds(world)
    assert kstatus(got) == ("False", "False", "True")
    assert got["Stalled"][1] == "RolloutHalted"
    assert "node-000: verification failed: kubelet did not start" in got["Stalled"][2]


def test_a_failure_below_max_failed_nodes_reconciles_then_stalls_when_the_rest_is_done() -> None:
    nodes = fleet(4)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec(rollout={"maxFailedNodes": 2}))
    while world.plan().summary.counts.failed == 0:
        world.tick()
    mid = conds(world)
    assert mid["Degraded"][0] == "True"
    assert kstatus(mid) == ("False", "True", "False")  # the others still roll
    world.run()
    end = conds(world)
    assert kstatus(end) == ("False", "False", "True")
    assert end["Stalled"][1] == "NodesFailed"


def test_paused_with_work_left_is_reconciling_and_says_why() -> None:
    world = World(fleet(2), spec(rollout={"paused": True}))
    got = conds(world)
    assert kstatus(got) == ("False", "True", "False")
    assert got["Reconciling"][1] == "SpecPaused"
    assert got["Ready"][1] == "SpecPaused"


def test_deleting_is_reconciling_never_ready() -> None:
    world = World(fleet(2), spec())
    world.run()
    result = status.build_status(
        world.plan().summary, enabled=True, deleting=True, generation=3, previous=[], now=T0
    )
    got = {c.type.value: (c.status.value, c.reason) for c in result.conditions}
    assert got["Ready"] == ("False", "Deleting")
    assert got["Reconciling"] == ("True", "Deleting")
    assert got["Stalled"][0] == "False"


def test_a_deletion_says_which_nodes_it_waits_for_and_nothing_once_done() -> None:
    world = World(fleet(2), spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    world.run()
    world.deleting = True  # onDelete: Revert (the default): our drop-ins come off, node by node
    world.tick()
    text = status.deleting_text(world.plan().summary)
    assert text.startswith("2 node(s) still in progress: node-000: ") and "node-001" in text
    world.run()
    assert world.plan().summary.finalized and status.deleting_text(world.plan().summary) == ""


def test_a_failed_canary_is_reported_as_such() -> None:
    nodes = fleet(4)
    nodes["node-000"].agent_fails = True
    world = World(nodes, spec(rollout={"maxFailedNodes": 3, "canary": {"nodes": 1, "soakSeconds": 5}}))
    world.run()
    got = conds(world)
    assert got["Degraded"][:2] == ("True", "CanaryFailed")
    assert "a canary node failed" in got["Degraded"][2]
    assert got["Stalled"][:2] == ("True", "CanaryFailed")


def conflict_world(count: int) -> World:
    nodes = fleet(count + 1)
    for name in list(nodes)[:count]:
        nodes[name].labels["pool"] = "a"
    older = Peer(
        "older", T0 - timedelta(days=1), spec(nodeSelector={"matchLabels": {"pool": "a"}}).node_selector
    )
    return World(nodes, spec(), peers=(older,))


def test_a_conflict_names_its_nodes_once_and_is_not_available() -> None:
    world = conflict_world(3)
    world.run()
    got = conds(world)
    message = got["Degraded"][2]
    assert got["Degraded"][:2] == ("True", "Conflict")
    assert message.count("'older'") == 1
    for name in ("node-000", "node-001", "node-002"):
        assert message.count(name) == 1
    assert "3 node(s)" in message
    assert got["Available"][:2] == ("False", "Conflict")
    assert kstatus(got) == ("False", "False", "True")


def test_a_large_conflict_is_bounded() -> None:
    world = conflict_world(9)
    message = conds(world)["Degraded"][2]
    assert "9 node(s)" in message and "and 4 more" in message


def test_condition_invariants_over_whole_rollouts() -> None:
    """Through every pass of rollouts that complete, fail, halt and pause: Ready means complete, at most one
    of Reconciling/Stalled, never Available while Degraded, every condition at the current generation."""
    worlds = [World(fleet(4), spec(rollout={"maxUnavailable": 2}))]
    failing = fleet(4)
    failing["node-002"].agent_fails = True
    worlds.append(World(failing, spec(rollout={"maxFailedNodes": 2})))
    halting = fleet(4)
    halting["node-001"].agent_fails = True
    worlds.append(World(halting, spec()))
    worlds.append(conflict_world(2))
    waiting = fleet(3)  # onBlocked: Wait on two nodes whose drains never finish: stalls, named
    for name in ("node-001", "node-002"):
        waiting[name].drain_never_until = T0 + timedelta(days=1)
    worlds.append(World(waiting, spec(drain={"onBlocked": "Wait"})))
    faulted = World(fleet(2), spec())  # every eligible node skipped for a host fault: never Ready
    for name in faulted.nodes:
        host_fault(faulted, name)
    worlds.append(faulted)
    seen: set[tuple[str, str, str]] = set()
    for world in worlds:
        for _ in range(200):
            summary = world.plan().summary
            result = status.build_status(
                summary, enabled=True, deleting=False, generation=7, previous=[], now=T0
            )
            got = {c.type.value: c.status.value for c in result.conditions}
            assert {c.observed_generation for c in result.conditions} == {7}
            assert not (got["Available"] == "True" and got["Degraded"] == "True")
            assert not (got["Reconciling"] == "True" and got["Stalled"] == "True")
            ready = (
                got["Available"] == "True" and got["Progressing"] == "False" and got["Degraded"] == "False"
            )
            assert (got["Ready"] == "True") == ready
            nothing_done = summary.counts.updated == 0 and summary.counts.eligible > 0
            assert (got["Ready"] == "True") == (
                summary.complete and not summary.counts.failed and not summary.conflicts and not nothing_done
            )
            seen.add((got["Ready"], got["Reconciling"], got["Stalled"]))
            world.tick()
    assert seen == {("True", "False", "False"), ("False", "True", "False"), ("False", "False", "True")}


def test_a_budget_held_by_others_names_them_and_stalls_after_the_configured_time() -> None:
    """One node cordoned by an administrator under maxUnavailable 1: processed, kept cordoned, and then it
    holds the budget for good. Status names it at once; after stallAfterSeconds the rollout is Stalled
    with what to do; the clock survives a restart (it is in status); uncordoning clears it all."""
    nodes = fleet(3)
    nodes["node-000"].unschedulable = True
    world = World(nodes, spec(rollout={"stallAfterSeconds": 600, "canary": {"nodes": 0}}))
    world.run()
    summary = world.plan().summary
    stall_after = timedelta(seconds=world.spec.rollout.stall_after_seconds)

    def build(now: datetime, held_since: datetime | None) -> tuple[dict[str, tuple[str, str, str]], Any]:
        built = status.build_status(
            summary, enabled=True, deleting=False, generation=1, previous=[], now=now,
            held_since=held_since, stall_after=stall_after,
        )  # fmt: skip
        return {c.type.value: (c.status.value, c.reason, c.message) for c in built.conditions}, built

    first, built = build(T0, None)
    assert built.budget_held_by == ["node-000 (cordoned)"] and built.budget_held_since == T0
    assert "node-000 (cordoned)" in first["Progressing"][2]
    assert first["Stalled"][0] == "False" and first["Reconciling"][0] == "True"

    before, again = build(T0 + timedelta(seconds=599), built.budget_held_since)
    assert again.budget_held_since == T0 and before["Stalled"][0] == "False"

    later, _ = build(T0 + timedelta(seconds=600), built.budget_held_since)
    assert later["Stalled"][:2] == ("True", "BudgetHeldByOtherNodes")
    assert later["Ready"][0] == "False" and later["Reconciling"][0] == "False"
    message = later["Stalled"][2]
    assert "kubectl uncordon node-000" in message and "raise spec.rollout.maxUnavailable" in message
    assert "for 10 min" in message

    nodes["node-000"].unschedulable = False  # the administrator gives it back
    world.run()
    summary = world.plan().summary
    done, cleared = build(T0 + timedelta(seconds=700), T0)
    assert cleared.budget_held_by == [] and cleared.budget_held_since is None
    assert done["Ready"][0] == "True" and done["Stalled"][0] == "False"


def test_our_own_nodes_in_flight_stop_the_stall_clock() -> None:
    nodes = fleet(3)
    nodes["node-002"].ready = False
    world = World(nodes, spec(rollout={"maxUnavailable": 2, "canary": {"nodes": 0}}))
    world.tick()  # node-000 in flight, node-002 NotReady: the budget is used, partly by us
    summary = world.plan().summary
    assert summary.held_by and not summary.budget_stuck
    built = status.build_status(
        summary, enabled=True, deleting=False, generation=1, previous=[], now=T0 + timedelta(days=1),
        held_since=T0, stall_after=timedelta(0),
    )  # fmt: skip
    assert built.budget_held_since is None
    assert {c.type.value: c.status.value for c in built.conditions}["Stalled"] == "False"


def _by_type(built: NodeConfigStatus) -> dict[str, tuple[str, str]]:
    return {cond.type.value: (cond.status.value, cond.reason) for cond in built.conditions}


def test_first_sight_is_reconciling_for_this_generation_and_written_once() -> None:
    first = status.first_status(NodeConfigStatus(), generation=3, now=T0, waiting="waiting for nodes")
    assert first is not None
    assert first.observed_generation == 3
    assert all(cond.observed_generation == 3 for cond in first.conditions)
    conditions = _by_type(first)
    assert conditions["Reconciling"] == ("True", "Reconciling")
    assert conditions["Ready"][0] == conditions["Stalled"][0] == "False"
    assert status.first_status(first, generation=3, now=T0, waiting="waiting for nodes") is None
    assert status.first_status(first, generation=4, now=T0, waiting="waiting for nodes") is not None


def test_an_invalid_spec_is_stalled_not_ready_and_keeps_the_counts() -> None:
    world = World(fleet(3), spec())
    world.run()
    done = status.build_status(
        world.plan().summary, enabled=True, deleting=False, generation=1, previous=[], now=T0
    )
    later = T0 + timedelta(minutes=5)
    invalid = status.invalid_status(done, problems="spec.drain.retries: too many", generation=2, now=later)
    conditions = _by_type(invalid)
    assert conditions["Stalled"] == ("True", "InvalidSpec")
    assert conditions["Degraded"] == ("True", "InvalidSpec")
    assert conditions["Ready"] == ("False", "InvalidSpec")
    assert conditions["Reconciling"] == ("False", "InvalidSpec")
    stalled = next(cond for cond in invalid.conditions if cond.type.value == "Stalled")
    assert (stalled.message, stalled.observed_generation, stalled.last_transition_time) == (
        "spec.drain.retries: too many",
        2,
        later,
    )
    assert invalid.observed_generation == 2
    assert invalid.nodes == done.nodes  # nothing changed on a node: the counts stay as they were
    again = status.invalid_status(
        invalid, problems="spec.drain.retries: too many", generation=2, now=later + timedelta(minutes=1)
    )
    assert again == invalid  # unchanged: no new write, no new Event


# --- nothing done: every eligible node skipped for a fault; every remaining node blocked for good ------


def host_fault(world: World, name: str, result: str = "fault") -> None:
    """The node as its agent's Skipped report leaves it: a host fault (or refusal) before any write."""
    world.nodes[name].annotations.update(
        {
            protocol.ANN_OWNER: "cluster",
            protocol.ANN_DESIRED: H_ON,
            protocol.ANN_STATE: "Skipped",
            protocol.ANN_STATE_SINCE: T0.isoformat(),
            protocol.ANN_REASON: "EROFS writing the drop-in: fix it on the host",
            protocol.ANN_EVIDENCE: Evidence(result=result, changed="nothing").to_json(),
        }
    )


def test_a_nodeconfig_whose_only_node_was_skipped_for_a_host_fault_is_not_available() -> None:
    world = World(fleet(1), spec())
    host_fault(world, "node-000")
    world.run()
    got = conds(world)
    done = "0 of 1 eligible node(s) run Evented PLEG, 1 skipped: host fault"
    assert got["Available"] == ("False", "NodesSkipped", done)
    assert got["Ready"][:2] == ("False", "NodesSkipped")
    assert got["Degraded"] == ("True", "NodesSkipped", done)
    assert got["Stalled"][:2] == ("True", "NodesSkipped")  # a person has to fix the host
    assert kstatus(got) == ("False", "False", "True")  # kstatus: Failed, not Current


def test_skipped_nodes_are_counted_by_cause_and_one_done_node_keeps_it_available() -> None:
    world = World(fleet(3), spec())
    host_fault(world, "node-000")
    host_fault(world, "node-001", result="refused")
    world.run()
    got = conds(world)
    assert got["Available"] == (
        "True",
        "AllNodesUpdated",
        "1 of 3 eligible node(s) run Evented PLEG, 2 skipped: 1 host fault, 1 host refused",
    )


def test_a_node_skipped_by_the_operator_is_counted_by_its_typed_cause() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_never_until = T0 + timedelta(days=1)
    world = World(nodes, spec())  # onBlocked: Skip
    world.run()
    assert world.nodes["node-000"].annotations[protocol.ANN_CAUSE] == "DrainBlocked"
    assert conds(world)["Available"] == (
        "True",
        "AllNodesUpdated",
        "1 of 2 eligible node(s) run Evented PLEG, 1 skipped: blocked drain",
    )
    alone = fleet(1)
    alone["node-000"].drain_never_until = T0 + timedelta(days=1)
    world = World(alone, spec())
    world.run()
    assert conds(world)["Available"][:2] == ("False", "NodesSkipped")


def test_static_pods_are_a_choice_of_the_spec_not_a_fault() -> None:
    nodes = fleet(1)
    nodes["node-000"].mirror_pods = ("kube-system/etcd-node-000",)
    world = World(nodes, spec())
    world.run()
    assert conds(world)["Available"] == (
        "True",
        "AllNodesUpdated",
        "0 of 1 eligible node(s) run Evented PLEG, 1 skipped: static pods",
    )


def test_every_remaining_node_blocked_for_good_under_on_blocked_wait_is_stalled_and_named() -> None:
    nodes = fleet(3)
    nodes["node-001"].drain_never_until = T0 + timedelta(days=1)
    nodes["node-002"].drain_never_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"onBlocked": "Wait"}, rollout={"maxUnavailable": 3}))
    for _ in range(30):
        world.tick()
    assert world.nodes["node-000"].annotations[protocol.ANN_STATE] == "Done"
    got = conds(world)
    assert got["Stalled"][:2] == ("True", "NodesBlocked")
    assert got["Progressing"][:2] == ("False", "NodesBlocked")
    assert kstatus(got) == ("False", "False", "True")
    message = got["Stalled"][2]
    assert message.startswith("no remaining node can make progress until someone acts: node-001: ")
    assert "node-002: " in message and NEVER in message
    assert not any(n.unschedulable for n in world.nodes.values())


def test_a_node_still_moving_or_held_for_now_keeps_the_rollout_reconciling() -> None:
    nodes = fleet(2)
    nodes["node-000"].drain_never_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"onBlocked": "Wait"}))
    world.tick()  # node-000 is left in service; node-001 is not done yet
    assert conds(world)["Stalled"][0] == "False"
    held = fleet(1)
    held["node-000"].pods = [pod("backup-0", labels={"app": "backup"})]
    world = World(held, spec(drain={"blockingPodSelector": {"matchLabels": {"app": "backup"}}}))
    for _ in range(5):
        world.tick()
    got = conds(world)
    assert got["Stalled"][0] == "False" and got["Reconciling"][0] == "True"  # the pod may finish
    assert "runs default/backup-0" in got["Progressing"][2]

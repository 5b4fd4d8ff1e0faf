"""spec.guard in the rollout world (the product's planner and step policy over the model fleet): a node
Done and given back that its agent later rolls back to generic PLEG (Done -> RolledBack, eventedpleg.io/
cause GuardRollback) counts against rollout.maxFailedNodes, so a fleet where the gate misbehaves halts
itself, names the guard and the node, and never takes that node again by itself. The agent's report
carries the typed cause as its evidence's result (core.guardincidents), as it writes no
eventedpleg.io/cause of its own."""

from __future__ import annotations

from eventedpleg.core.evidence import Evidence
from eventedpleg.core.rollout import status
from eventedpleg.core.rollout.planner.decider import failure_cause
from eventedpleg.core.rollout.snapshot import NodeMarks
from eventedpleg.protocol import (
    ANN_CAUSE,
    ANN_CURRENT,
    ANN_EVIDENCE,
    ANN_OWNER,
    ANN_REASON,
    ANN_STATE,
    ANN_STATE_SINCE,
    Cause,
    NodeState,
    format_time,
)
from eventedpleg_lab.sim.rolloutworld import World, fleet, spec

REASON = "rolled back to generic PLEG: 2 PLEG incidents within 86400s (spec.guard)"


def states(world: World) -> dict[str, str | None]:
    return {name: n.annotations.get(ANN_STATE) for name, n in world.nodes.items()}


def until_done(world: World, name: str, limit: int = 200) -> None:
    node = world.nodes[name]
    for _ in range(limit):
        if node.annotations.get(ANN_STATE) == "Done" and not node.unschedulable:
            return
        world.tick()
    raise AssertionError(f"{name} not Done: {states(world)}")


def guard_rolls_back(world: World, name: str, *, typed: bool = True) -> None:
    """The agent's report after its second incident: the node, Done and in service, is RolledBack."""
    node = world.nodes[name]
    assert node.annotations[ANN_STATE] == "Done" and not node.unschedulable
    node.annotations.update(
        {
            ANN_STATE: NodeState.ROLLED_BACK.value,
            ANN_STATE_SINCE: format_time(world.now),
            ANN_REASON: REASON,
        }
    )
    result = Cause.GUARD_ROLLBACK.value if typed else "fail"
    node.annotations[ANN_EVIDENCE] = Evidence(result=result, reason="2 incidents: wedge, wedge").to_json()
    node.annotations.pop(ANN_CURRENT, None)
    node.rv += 1


def test_a_guard_rollback_after_done_halts_the_rollout_naming_the_guard_and_the_node() -> None:
    nodes = fleet(4)
    world = World(nodes, spec(rollout={"maxFailedNodes": 1}))
    until_done(world, "node-000")
    guard_rolls_back(world, "node-000")
    final = world.run()
    summary = final.summary
    assert summary.halted and summary.counts.failed == 1
    assert summary.waiting == (
        "halted after 1 failed node(s) (rollout.maxFailedNodes=1); 1 of them (node-000) rolled back to "
        "generic PLEG by the guard after repeated PLEG incidents (spec.guard)"
    )
    # Reported before the next node was taken: none is.
    assert states(world) == {"node-000": "RolledBack", "node-001": None, "node-002": None, "node-003": None}
    taken = {name: n.drains for name, n in nodes.items()}
    for _ in range(300):
        world.tick()
    assert {name: n.drains for name, n in nodes.items()} == taken  # nothing new starts
    assert nodes["node-000"].drains == 1  # not rolled out again by itself
    assert nodes["node-000"].annotations[ANN_STATE] == "RolledBack"
    built = status.build_status(
        summary, enabled=True, deleting=False, generation=1, previous=[], now=world.now
    )
    degraded = {cond.type.value: cond for cond in built.conditions}["Degraded"]
    assert degraded.status.value == "True" and degraded.reason == "RolloutHalted"
    assert "by the guard" in degraded.message and f"node-000: {REASON}" in degraded.message
    stalled = {cond.type.value: cond for cond in built.conditions}["Stalled"]
    assert stalled.status.value == "True" and "(node-000) rolled back" in stalled.message
    assert {n.name: n.state for n in built.node_statuses}["node-000"] == "RolledBack"


def test_a_guard_rollback_is_one_failure_among_max_failed_nodes() -> None:
    """Below rollout.maxFailedNodes the rollout goes on (the node stays RolledBack, counted failed)."""
    nodes = fleet(3)
    world = World(nodes, spec(rollout={"maxFailedNodes": 2}))
    until_done(world, "node-000")
    guard_rolls_back(world, "node-000")
    final = world.run()
    assert not final.summary.halted and final.summary.counts.failed == 1
    assert states(world) == {"node-000": "RolledBack", "node-001": "Done", "node-002": "Done"}
    assert nodes["node-000"].drains == 1
    guard_rolls_back(world, "node-002")  # the second one reaches the budget
    halted = world.run().summary
    assert halted.halted and halted.counts.failed == 2
    assert halted.waiting.endswith(
        "2 of them (node-000, node-002) rolled back to generic PLEG by the guard after repeated PLEG "
        "incidents (spec.guard)"
    )


def test_the_guard_is_named_by_the_typed_cause_never_by_the_reason_text() -> None:
    nodes = fleet(2)
    world = World(nodes, spec(rollout={"maxFailedNodes": 1}))
    until_done(world, "node-000")
    guard_rolls_back(world, "node-000", typed=False)  # the same words, another result
    summary = world.run().summary
    assert summary.halted and summary.counts.failed == 1  # RolledBack after Done fails the node anyway
    assert summary.waiting == "halted after 1 failed node(s) (rollout.maxFailedNodes=1)"


def test_a_failures_typed_cause_is_the_agents_evidence_result_else_the_operators() -> None:
    def marks(cause: str = "", result: str | None = None) -> NodeMarks:
        annotations = {ANN_CAUSE: cause} if cause else {}
        if result is not None:
            annotations[ANN_EVIDENCE] = Evidence(result=result).to_json()
        return NodeMarks.parse(annotations)

    assert failure_cause(marks(result="GuardRollback")) is Cause.GUARD_ROLLBACK
    assert failure_cause(marks("WorkloadNotReady", result="pass")) is Cause.WORKLOAD_NOT_READY
    assert failure_cause(marks(result="fail")) is None
    assert failure_cause(marks()) is None


def test_turning_the_guard_off_takes_kubelet_136_nodes_back_unless_risky_is_allowed() -> None:
    """spec.guard.enabled: false makes kubelets 1.32-1.36 Risky: Done ones are taken back to generic PLEG
    the same safe way (as any node that is no longer eligible), a 1.37 node keeps the gate; with
    allowRisky: true nothing changes."""
    nodes = fleet(2)
    nodes["node-001"].kubelet = "v1.37.2"
    world = World(nodes, spec())
    assert world.run().summary.complete
    assert states(world) == {"node-000": "Done", "node-001": "Done"}
    world.spec = spec(guard={"enabled": False}, allowRisky=True)
    assert world.run().summary.complete
    assert {name: n.drains for name, n in nodes.items()} == {"node-000": 1, "node-001": 1}
    world.spec = spec(guard={"enabled": False})
    final = world.run().summary
    assert nodes["node-000"].drains == 2 and ANN_OWNER not in nodes["node-000"].annotations  # given back
    assert nodes["node-001"].drains == 1 and states(world)["node-001"] == "Done"
    skipped = {n.name: n.reason for n in final.attention}
    assert "spec.guard.enabled: true" in skipped["node-000"] and "allowRisky" in skipped["node-000"]

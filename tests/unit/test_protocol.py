"""The node protocol (eventedpleg.protocol): each side writes only the keys WRITERS gives it, and every time
stamp in one format, over rollouts of the rollout world (the product's step policy and the real agent
phases on model hosts) with random NodeConfig options, agent failures, crashes and deletion."""

from __future__ import annotations

import ast
import random
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventedpleg import constants, protocol
from eventedpleg.core.rollout import approval
from eventedpleg.protocol import (
    ANN_APPROVED,
    ANN_CURRENT,
    ANN_HOST_CHECK,
    ANN_STATE_SINCE,
    ANN_TAINTED_SINCE,
    AUTOSCALER_ANNOTATIONS,
    NODE_ANNOTATIONS,
    WRITERS,
    Writer,
    format_time,
    parse_time,
)
from eventedpleg_lab.sim.rolloutworld import T0, World, fleet, pod, spec
from tests.unit.core.rollout.drain.drawn import DRAIN_RULES, NAMESPACES, node_pods

OPERATOR_KEYS = {key for key, writer in WRITERS.items() if writer in {Writer.OPERATOR, Writer.HANDOFF}}
AGENT_KEYS = {key for key, writer in WRITERS.items() if writer in {Writer.AGENT, Writer.HANDOFF}}
# What the release (the end of the protocol for a node) removes, current-config aside (kept when our files
# stay on the node)
RELEASED = set(NODE_ANNOTATIONS) - {ANN_HOST_CHECK, ANN_CURRENT}
STAMPED = (ANN_STATE_SINCE, ANN_TAINTED_SINCE)


def test_the_table_names_every_node_key_once() -> None:
    assert set(WRITERS) == {*NODE_ANNOTATIONS, *AUTOSCALER_ANNOTATIONS}
    assert ANN_APPROVED not in WRITERS  # on the NodeConfig: `eventedpleg approve`, never a Node key


def check_writers(world: World) -> None:
    """Every write the world saw keeps to the table; the operator removes the agent's keys only in the
    release, which removes every key of the protocol but the host check (and current-config). Time stamps
    are written as format_time writes them."""
    for by, node, changes in world.writes:
        for key in STAMPED:  # both sides write time stamps one way
            value = changes.get(key)
            if value is not None:
                when = parse_time(value)
                assert when is not None and format_time(when) == value, (by, node, key, value)
        keys = set(changes)
        if by is Writer.AGENT:
            assert keys <= AGENT_KEYS, (node, keys - AGENT_KEYS)
            continue
        assert by is Writer.OPERATOR
        foreign = keys - OPERATOR_KEYS
        if foreign:
            removed = {key for key, value in changes.items() if value is None}
            assert foreign <= removed and removed >= RELEASED, (node, foreign, changes)


@st.composite
def worlds(draw: st.DrawFn) -> World:
    nodes = fleet(draw(st.integers(1, 6)))
    for node in nodes.values():
        trouble = draw(
            st.sampled_from(["", "", "", "fails", "silent", "absent", "dies", "pdb", "never", "static"])
        )
        node.agent_fails = trouble == "fails"
        node.agent_silent = trouble == "silent"
        node.agent_absent = trouble == "absent"
        node.agent_dies_on_cordon = node.agent_stops_cleanly = trouble == "dies"
        if trouble == "pdb":
            node.drain_blocked_until = T0 + timedelta(seconds=draw(st.sampled_from([5, 60])))
        if trouble == "never":
            node.drain_never_until = T0 + timedelta(seconds=30)
            node.pods = [pod("db-0")]
        if trouble == "static":
            node.mirror_pods = ("kube-system/etcd",)
        if trouble != "never":  # pods drain.rules act on
            node.pods, node.completes = draw(node_pods())
        if draw(st.booleans()):
            node.unschedulable = True
    rollout = {
        "maxUnavailable": draw(st.one_of(st.integers(1, 3), st.sampled_from(["50%", "100%"]))),
        "canary": {"nodes": draw(st.integers(0, 2)), "soakSeconds": 5},
        "maxFailedNodes": draw(st.integers(1, 3)),
        "onFailure": draw(st.sampled_from(["Rollback", "Halt"])),
        "takeCordonedNodes": draw(st.booleans()),
        "approval": draw(st.sampled_from(["Automatic", "Automatic", "Manual"])),
    }
    drain = {
        "mode": draw(st.sampled_from(["CordonAndDrain", "CordonAndDrain", "InPlace"])),
        "timeoutSeconds": draw(st.sampled_from([0, 10, 30])),
        "onTimeout": draw(st.sampled_from(["Fail", "Skip", "ForceDelete"])),
        "onBlocked": draw(st.sampled_from(["Skip", "Wait", "Fail"])),
        "retries": draw(st.integers(0, 2)),
        "retryBackoffSeconds": 10,
        "taintBeforeCordon": draw(st.sampled_from([None, {"seconds": 3}])),
        "rules": draw(DRAIN_RULES),
    }
    return World(
        nodes,
        spec(
            eventedPleg=draw(st.booleans()),
            allowRisky=draw(st.booleans()),
            rollout=rollout,
            drain=drain,
            verification={"timeoutSeconds": 10},
        ),
        namespaces=NAMESPACES,
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.integers(0, 2**32), st.booleans())
def test_each_side_writes_only_its_keys(world: World, seed: int, delete: bool) -> None:
    rng = random.Random(seed)
    for tick in range(150):
        if tick % 20 == 5 and world.spec.rollout.approval == "Manual":  # a person approves a node
            node = rng.choice(list(world.nodes.values()))
            asked = node.annotations.get(protocol.ANN_AWAITING_APPROVAL, "")
            world.approved = approval.approve(world.approved, node.name, asked) if asked else world.approved
        if tick == 100 and delete:
            world.deleting = True
        world.tick(seconds=rng.choice([1, 1, 1, 7, 60]), drop=rng)
    check_writers(world)


def test_a_plain_rollout_and_its_release_use_every_key_of_both_sides() -> None:
    """Not vacuous: in one rollout, its failures and its release, each side writes the hand-off keys and
    keys of its own."""
    nodes = fleet(3)
    nodes["node-001"].agent_fails = True
    world = World(nodes, spec(rollout={"maxFailedNodes": 2}))
    world.run()
    world.deleting = True
    world.run()
    world.tick(seconds=3 * 3600)
    world.tick()  # its host check is old news by now: the agent publishes a fresh one
    check_writers(world)
    written = {by: set[str]() for by in Writer}
    for by, _, changes in world.writes:
        written[by] |= {key for key, value in changes.items() if value is not None}
    handoff = {key for key, writer in WRITERS.items() if writer is Writer.HANDOFF}
    assert handoff <= written[Writer.OPERATOR] and handoff <= written[Writer.AGENT]
    assert {protocol.ANN_DESIRED, protocol.ANN_OWNER, protocol.ANN_CORDONED_BY_US} <= written[Writer.OPERATOR]
    assert {protocol.ANN_CURRENT, protocol.ANN_EVIDENCE, ANN_HOST_CHECK} <= written[Writer.AGENT]


def test_every_time_the_product_writes_goes_through_format_time() -> None:
    """One way to write a time: annotations, reasons and reports all say it as format_time does. An
    Event's own time is Kubernetes' (a "Z" suffix), written in k8s/events.py."""
    root = Path(__file__).resolve().parents[2] / "operator"
    allowed = {root / "eventedpleg" / "protocol.py", root / "eventedpleg" / "k8s" / "events.py"}
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path not in allowed
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "isoformat(timespec" in line
    ]
    assert found == [], "write times with protocol.format_time: " + ", ".join(found)


def _defined_in(path: Path) -> set[str]:
    """The public names a module defines itself (not the ones it imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


def test_the_protocol_names_are_reached_from_the_protocol_only() -> None:
    """eventedpleg.constants exposes none of the protocol's names (keys, NodeState, GROUP, ...): a user of
    one imports eventedpleg.protocol, so there is one way to reach each name."""
    defined = _defined_in(Path(protocol.__file__))
    assert {"ANN_STATE", "LABEL_STATE", "NodeState", "GROUP", "WRITERS"} <= defined
    assert sorted(defined & set(vars(constants))) == []

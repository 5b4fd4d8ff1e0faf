"""Rollout controls in the rollout world, which runs the product's planner and step policy:
pods that ask the autoscalers not to be disrupted block the drain before the cordon."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.cli.approve_cmd import approved_config
from eventedpleg.cli.report import status_view
from eventedpleg.core.rollout import approval, planner, status, window
from eventedpleg.core.rollout.planner import start
from eventedpleg_lab.sim.rolloutworld import H_OFF, H_ON, T0, World, fleet, pod, spec

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
    assert nodes["node-000"].annotations[protocol.ANN_STATE] == state
    note = {n.name: n.reason for n in final.summary.attention}["node-000"]
    assert (
        note
        == f"not cordoned: the drain could never finish: {KARPENTER_TEXT} (drain.onBlocked: {on_blocked})"
    )
    assert ("node-000", "DrainBlocked") in world.events
    assert [nodes[n].annotations[protocol.ANN_STATE] for n in ("node-001", "node-002")] == ["Done", "Done"]


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
    assert nodes["node-000"].annotations[protocol.ANN_CURRENT] == H_ON and nodes["node-000"].drains == 1


def test_a_granted_force_delete_never_deletes_a_pod_that_asked_not_to_be_disrupted() -> None:
    nodes = fleet(2)
    nodes["node-001"].pods = [pod("train-0", KARPENTER, namespace="ml")]
    world = World(nodes, spec(drain={"onTimeout": "ForceDelete", "timeoutSeconds": 5}))
    world.run()
    assert nodes["node-001"].annotations[protocol.ANN_STATE] == "Skipped" and nodes["node-001"].drains == 0
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
            assert node.annotations[protocol.ANN_STATE] == ("Skipped" if asks else "Done"), node.name
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


# --- rollout.approval: Manual --------------------------------------------------------------------------


def approve(world: World, name: str, config: str = H_ON) -> None:
    """What `eventedpleg approve NAME` writes: an entry of the NodeConfig's ANN_APPROVED."""
    world.approved = approval.approve(world.approved, name, config)


def test_manual_approval_keeps_every_node_in_service_until_a_person_approves_it() -> None:
    nodes = fleet(3)
    world = World(nodes, spec(rollout={"approval": "Manual", "maxUnavailable": 3}))
    for _ in range(30):
        world.tick()
    assert all(n.drains == 0 and not n.unschedulable for n in nodes.values())
    result = world.plan()
    assert not result.summary.complete and result.summary.counts.awaiting_approval == 3
    assert result.summary.awaiting_approval == ("node-000", "node-001", "node-002")
    note = {n.name: (n.state, n.reason) for n in result.summary.attention}["node-001"]
    assert note == (
        "AwaitingApproval",
        f"not cordoned: waiting for approval of config {H_ON} (spec.rollout.approval: Manual); "
        "approve with `eventedpleg approve node-001`",
    )
    # one Event per node and config, however often the planner looks
    assert sorted(e for e in world.events if e[1] == "AwaitingApproval") == [
        (name, "AwaitingApproval") for name in nodes
    ]
    approve(world, "node-001")
    world.approved["node-002"] = "an-older-config"  # left from an earlier config: approves nothing now
    for _ in range(60):
        world.tick()
    assert states(world) == {"node-000": None, "node-001": "Done", "node-002": None}
    assert protocol.ANN_APPROVED not in nodes["node-001"].annotations  # on the NodeConfig, never on the Node
    approve(world, "node-000")
    approve(world, "node-002")
    final = world.run()
    assert final.summary.complete and final.summary.counts.awaiting_approval == 0
    assert world.approved == dict.fromkeys(nodes, H_ON)


def states(world: World) -> dict[str, str | None]:
    return {name: n.annotations.get(protocol.ANN_STATE) for name, n in world.nodes.items()}


def test_a_new_config_needs_a_new_approval_and_says_so_again() -> None:
    nodes = fleet(1)
    world = World(nodes, spec(rollout={"approval": "Manual"}))
    world.tick()
    approve(world, "node-000")
    world.run()
    assert nodes["node-000"].annotations[protocol.ANN_CURRENT] == H_ON
    world.spec = spec(eventedPleg=False, rollout={"approval": "Manual"})  # turning it off: another config
    for _ in range(10):
        world.tick()
    assert nodes["node-000"].annotations[protocol.ANN_CURRENT] == H_ON and nodes["node-000"].drains == 1
    assert [e for e in world.events if e[1] == "AwaitingApproval"] == [("node-000", "AwaitingApproval")] * 2
    approve(world, "node-000", H_OFF)
    world.run()
    assert nodes["node-000"].annotations[protocol.ANN_CURRENT] == H_OFF and nodes["node-000"].drains == 2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 8), st.sets(st.integers(0, 7)), st.integers(0, 2**32))
def test_no_node_is_ever_cordoned_without_its_approval_despite_crashes(
    size: int, approved: set[int], seed: int
) -> None:
    nodes = fleet(size)
    world = World(nodes, spec(rollout={"approval": "Manual", "maxUnavailable": "50%"}))
    for i in approved:
        if i < size:
            approve(world, f"node-{i:03d}")
    world.run(drop=random.Random(seed))
    for name, node in nodes.items():
        if name in world.approved:
            assert node.annotations[protocol.ANN_STATE] == "Done", name
        else:
            assert (
                node.drains == 0 and not node.unschedulable and protocol.ANN_STATE not in node.annotations
            ), name
    assert world.plan().summary.complete is (len([i for i in approved if i < size]) == size)


def test_status_and_the_status_command_say_which_nodes_await_approval() -> None:
    nodes = fleet(2)
    world = World(nodes, spec(rollout={"approval": "Manual"}))
    for _ in range(3):
        world.tick()
    built = status.build_status(
        world.plan().summary, enabled=True, deleting=False, generation=3, previous=[], now=T0
    )
    got = {cond.type.value: (cond.status.value, cond.reason, cond.message) for cond in built.conditions}
    assert got["Progressing"] == (
        "True",
        "AwaitingApproval",
        "0/2 updated; awaiting approval (rollout.approval: Manual; `eventedpleg approve NODE`): "
        "node-000, node-001",
    )
    assert got["Ready"][0] == "False" and got["Stalled"][0] == "False"
    assert built.nodes.awaiting_approval == 2
    assert {(n.name, n.state.value) for n in built.node_statuses} == {
        ("node-000", "AwaitingApproval"),
        ("node-001", "AwaitingApproval"),
    }
    body = {"metadata": {"name": "cluster"}, "spec": {"eventedPleg": True}, "status": built.to_api()}
    text = status_view(body, world.views())
    assert "0/2 updated, 0 updating, 0 failed, 0 skipped, 2 selected, 2 awaiting approval" in text
    rows = [line.split()[:4] for line in text.splitlines() if line.startswith("node-")]
    assert [row[0] for row in rows] == ["node-000", "node-001"] and {row[3] for row in rows} == {
        "AwaitingApproval"
    }


def test_approve_writes_the_config_the_nodeconfig_rolls_out_now_and_only_once_rendered() -> None:
    current = {"metadata": {"generation": 4}, "status": {"observedGeneration": 4, "renderedHash": H_ON}}
    assert approved_config(current) == H_ON
    behind = {"metadata": {"generation": 5}, "status": {"observedGeneration": 4, "renderedHash": H_ON}}
    assert approved_config(behind) == ""  # the hash would be the config before the present spec
    assert approved_config({"metadata": {"generation": 1}}) == ""


# --- rollout.steps: growing batches after the canary ---------------------------------------------------


def test_steps_grow_the_batches_each_after_the_previous_one_is_done_and_soaked() -> None:
    nodes = fleet(20)
    rollout = {"canary": {"nodes": 1, "soakSeconds": 30}, "steps": [2, "25%", "100%"], "maxUnavailable": 10}
    world = World(nodes, spec(rollout=rollout))
    assert start.stages(world.spec.rollout, 20, 20) == [
        (0, 1, "canary"),
        (1, 2, "step 1 of 3 (rollout.steps[0]: 2)"),
        (2, 5, "step 2 of 3 (rollout.steps[1]: 25%)"),
        (3, 20, "step 3 of 3 (rollout.steps[2]: 100%)"),
    ]
    world.run()
    done_at = sorted(n.annotations[protocol.ANN_STATE_SINCE] for n in nodes.values())
    # batches of 1, 1, 3, 10 and 5 (maxUnavailable 10 bounds the last step): each starts after the one
    # before is all Done and 30 s older
    batches = sorted(set(done_at))
    counts = [done_at.count(t) for t in batches]
    assert counts == [1, 1, 3, 10, 5], counts
    gaps = [
        (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()
        for a, b in itertools.pairwise(batches)
    ]
    assert all(gap >= 30 for gap in gaps[:3]), gaps  # the soak between stages
    assert max(u for _, u in world.history) == 10


def test_a_step_waits_for_its_soak_and_says_which_step() -> None:
    nodes = fleet(10)
    world = World(
        nodes,
        spec(rollout={"canary": {"nodes": 0, "soakSeconds": 60}, "steps": ["20%"], "maxUnavailable": 5}),
    )
    for _ in range(40):
        world.tick()
        waiting = world.plan().summary.waiting
        if "soaking" in waiting:
            break
    assert waiting.startswith("step 1 of 1 (rollout.steps[0]: 20%) (2 node(s) Done) soaking until "), waiting
    assert sum(1 for n in nodes.values() if n.annotations.get(protocol.ANN_STATE) == "Done") == 2
    assert sum(1 for n in nodes.values() if protocol.ANN_STATE in n.annotations) == 2  # no third node started
    world.run()
    assert all(n.annotations[protocol.ANN_STATE] == "Done" for n in nodes.values())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 12),
    st.integers(0, 2),
    st.lists(st.one_of(st.integers(1, 12), st.sampled_from(["10%", "30%", "60%", "100%"])), max_size=4),
    st.integers(0, 2**32),
)
def test_no_stage_starts_before_the_one_before_is_done_despite_crashes(
    size: int, canary: int, steps: list[int | str], seed: int
) -> None:
    nodes = fleet(size)
    rollout = {"canary": {"nodes": canary, "soakSeconds": 5}, "steps": steps, "maxUnavailable": 4}
    world = World(nodes, spec(rollout=rollout))
    bounds = [needed for _, needed, _ in start.stages(world.spec.rollout, size, size)]
    rng = random.Random(seed)
    for _ in range(400):
        world.tick(drop=rng)
        done = sum(1 for n in nodes.values() if n.annotations.get(protocol.ANN_STATE) == "Done")
        taken = sum(1 for n in nodes.values() if protocol.ANN_STATE in n.annotations or n.unschedulable)
        # the nodes taken never go past the first stage not Done yet
        limit = next((b for b in bounds if done < b), size)
        assert taken <= limit, (done, taken, bounds)
    world.run(drop=rng)
    assert all(n.annotations[protocol.ANN_STATE] == "Done" for n in nodes.values())


# --- rollout.windows: several maintenance windows ------------------------------------------------------

TUESDAY_NIGHT = {"days": ["tuesday"], "start": "01:00", "end": "05:00"}
MONDAY_LUNCH_BERLIN = {"days": ["monday"], "start": "12:30", "end": "14:00", "timeZone": "Europe/Berlin"}


def test_nodes_start_while_any_of_the_windows_is_open_each_in_its_own_zone() -> None:
    # T0 is Monday 12:00 UTC: 13:00 in Berlin, inside the second window only
    world = World(fleet(2), spec(rollout={"windows": [TUESDAY_NIGHT, MONDAY_LUNCH_BERLIN]}))
    assert world.plan().actions
    both_closed = World(
        fleet(2), spec(rollout={"windows": [TUESDAY_NIGHT, {**MONDAY_LUNCH_BERLIN, "end": "12:45"}]})
    )
    result = both_closed.plan()
    assert result.actions == ()
    assert result.summary.waiting == (
        "outside the maintenance window (tuesday 01:00-05:00 UTC; monday 12:30-12:45 Europe/Berlin)"
    )


def test_the_single_window_keeps_working_and_is_the_list_of_one() -> None:
    single = spec(rollout={"window": TUESDAY_NIGHT}).rollout
    listed = spec(rollout={"windows": [TUESDAY_NIGHT]}).rollout
    assert window.windows_of(single) == window.windows_of(listed)
    for hours in range(0, 24 * 7, 5):
        now = T0 + timedelta(hours=hours)
        assert (
            window.any_open(single, now) is window.any_open(listed, now) is window.is_open(single.window, now)
        )
    assert window.any_open(spec().rollout, T0)  # none set: always open


# --- drain.inPlace.onIneligible: Skip (fail closed) ----------------------------------------------------


def test_strict_in_place_skips_and_names_a_node_it_cannot_do_in_place_never_draining_it() -> None:
    nodes = fleet(3)
    nodes["node-002"].runtime = "containerd://1.7.35"  # Risky: not safe in place
    nodes["node-002"].pods = [pod("web-0")]
    strict = {"mode": "InPlace", "inPlace": {"onIneligible": "Skip"}}
    world = World(nodes, spec(drain=strict, allowRisky=True))
    final = world.run()
    assert {n.name: n.drains for n in nodes.values()} == {"node-000": 0, "node-001": 0, "node-002": 0}
    assert not any(n.unschedulable for n in nodes.values())
    assert [nodes[n].annotations[protocol.ANN_STATE] for n in nodes] == ["Done", "Done", "Skipped"]
    reason = nodes["node-002"].annotations[protocol.ANN_REASON]
    assert reason.startswith("not cordoned: drain.mode is InPlace, not safe on this node: ")
    assert reason.endswith("(drain.inPlace.onIneligible: Skip)") and "Risky" in reason
    assert ("node-002", "NotInPlace") in world.events and final.summary.counts.skipped == 1
    # the default, Drain, keeps the fallback: drained first
    fallback = World(
        fleet(1, runtime="containerd://1.7.35"), spec(drain={"mode": "InPlace"}, allowRisky=True)
    )
    fallback.run()
    assert (
        fallback.nodes["node-000"].drains == 1
        and fallback.nodes["node-000"].annotations[protocol.ANN_STATE] == "Done"
    )


def test_strict_in_place_skips_a_node_whose_static_pods_are_included() -> None:
    nodes = fleet(1, mirror_pods=("kube-system/etcd-node-000",), labels={c.LABEL_CONTROL_PLANE: ""})
    world = World(
        nodes, spec(drain={"mode": "InPlace", "inPlace": {"onIneligible": "Skip"}}, includeControlPlane=True)
    )
    world.run()
    node = nodes["node-000"]
    assert node.drains == 0 and not node.unschedulable and node.annotations[protocol.ANN_STATE] == "Skipped"
    assert "static pods" in node.annotations[protocol.ANN_REASON]


def test_approvals_parse_and_keep_only_the_present_config() -> None:
    """ANN_APPROVED on the NodeConfig: an approval for another config is dropped by the next one, and a
    value that is not a map of hashes approves nothing."""
    earlier = approval.approve(approval.approve({}, "node-000", H_OFF), "node-001", H_ON)
    assert approval.approve(earlier, "node-002", H_ON) == {"node-001": H_ON, "node-002": H_ON}
    assert approval.parse(approval.encode(earlier)) == earlier
    for broken in ("not json", "[]", '{"node-000": 1}', '{"node-000": ""}', None):
        assert approval.parse(broken) == {}, broken

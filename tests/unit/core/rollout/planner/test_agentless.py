"""Nodes whose agent never runs, dies after the cordon, or reports a failure: never taken without a live
agent, given back when it goes, and a deletion that always finishes with every node given back."""

from __future__ import annotations

import random
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventedpleg import protocol
from eventedpleg.constants import ConditionType
from eventedpleg.core import hostcheck
from eventedpleg.core.rollout import planner, status
from eventedpleg.core.rollout.actions import Cordon, Release, Uncordon
from eventedpleg.core.rollout.planner.taking import NO_AGENT
from eventedpleg_lab.sim.rolloutworld import H_ON, T0, World, fleet, spec


def notes(plan: planner.Plan) -> dict[str, str]:
    return {n.name: n.reason for n in plan.summary.attention}


def test_absence_says_why_and_freshness_is_three_publishing_periods() -> None:
    assert hostcheck.absence(None, T0) == hostcheck.NO_CHECK
    assert hostcheck.absence("{not json", T0).startswith("unreadable host check")
    check = hostcheck.HostCheck(T0, {}, every=60.0)
    text = check.to_json()
    assert hostcheck.parse(text) == check
    assert hostcheck.absence(text, T0 + timedelta(seconds=180)) == ""
    stale = hostcheck.absence(text, T0 + timedelta(seconds=181))
    assert "older than 3 of its 60s publishing periods" in stale
    # A check from an older agent (no `every`) is taken to be published hourly.
    old = '{"at":"2026-11-02T12:00:00+00:00","refusals":{}}'
    assert hostcheck.absence(old, T0 + timedelta(hours=3)) == ""
    assert hostcheck.absence(old, T0 + timedelta(hours=3, seconds=1))


def test_a_node_without_an_agent_is_never_cordoned_named_and_the_rest_go_on() -> None:
    nodes = fleet(3)
    nodes["node-001"].agent_absent = True
    world = World(nodes, spec())
    final = world.run()
    assert nodes["node-001"].drains == 0 and not nodes["node-001"].unschedulable
    assert protocol.ANN_STATE not in nodes["node-001"].annotations
    for name in ("node-000", "node-002"):
        assert (
            nodes[name].annotations[protocol.ANN_CURRENT] == H_ON
            and nodes[name].annotations[protocol.ANN_STATE] == "Done"
        )
    reason = notes(final)["node-001"]
    assert reason.startswith(NO_AGENT) and "no host check from the eventedpleg agent" in reason
    # what code branches on is the typed cause, in status as on the note
    causes = {n.name: n.cause for n in final.summary.attention}
    assert causes["node-001"] is protocol.Cause.NO_AGENT
    written = status.build_status(
        final.summary, enabled=True, deleting=False, generation=1, previous=[], now=T0
    )
    assert {n.name: n.cause for n in written.node_statuses}["node-001"] is protocol.Cause.NO_AGENT
    assert written.model_dump(by_alias=True, mode="json")["nodeStatuses"][0]["cause"] == "NoAgent"
    assert not final.summary.complete  # it still waits for its agent
    assert "1 node(s) wait, not cordoned, for a live eventedpleg agent: node-001" in final.summary.waiting
    conditions = status.conditions_for(final.summary, enabled=True, deleting=False)
    assert conditions[ConditionType.PROGRESSING].message.endswith(final.summary.waiting)
    assert not conditions[ConditionType.READY].status
    # Its agent starts: it is taken like any other.
    nodes["node-001"].agent_absent = False
    final = world.run()
    assert nodes["node-001"].annotations[protocol.ANN_CURRENT] == H_ON and final.summary.complete


def test_on_no_agent_hold_starts_no_further_node() -> None:
    nodes = fleet(3)
    nodes["node-000"].agent_absent = True
    world = World(nodes, spec(rollout={"onNoAgent": "Hold"}))
    plan = world.plan()
    assert not [a for a in plan.actions if isinstance(a, Cordon)]
    assert plan.summary.waiting.startswith("holding (rollout.onNoAgent: Hold) while 1 node(s) wait")
    world.run()
    assert not any(n.drains for n in nodes.values())


def test_a_stale_host_check_counts_as_no_agent() -> None:
    nodes = fleet(2)
    world = World(nodes, spec())
    nodes["node-000"].agent_absent = True  # it ran once (its check is there), then stopped for good
    world.now = T0 + timedelta(hours=3, seconds=1)
    plan = world.plan()
    assert [a.node for a in plan.actions if isinstance(a, Cordon)] == []  # node-001's check is stale too
    assert "older than 3 of its 3600s publishing periods" in notes(plan)["node-000"]
    world.agents()  # node-001's agent publishes again; node-000's cannot
    assert [a.node for a in world.plan().actions if isinstance(a, Cordon)] == ["node-001"]


def test_an_agent_that_dies_after_the_cordon_gets_its_node_given_back_unchanged() -> None:
    nodes = fleet(2)
    nodes["node-000"].agent_dies_on_cordon = True
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)  # still draining when the check goes
    world = World(nodes, spec(drain={"timeoutSeconds": 0}))
    world.tick()
    assert nodes["node-000"].unschedulable and nodes["node-000"].annotations[protocol.ANN_STATE] == "Draining"
    fresh_until = T0 + timedelta(seconds=hostcheck.FRESH_PERIODS * 3600)
    world.now = fresh_until  # still fresh: still ours
    assert not [a for a in world.plan().actions if isinstance(a, Uncordon) and a.node == "node-000"]
    world.now = fresh_until + timedelta(seconds=1)
    (back,) = [a for a in world.plan().actions if a.node == "node-000"]
    assert isinstance(back, Uncordon) and "publishing periods" in back.agent_gone
    world.apply(back)
    node = nodes["node-000"]
    assert not node.unschedulable and protocol.ANN_CORDONED_BY_US not in node.annotations
    assert protocol.ANN_STATE not in node.annotations and node.annotations.get(protocol.ANN_DESIRED) is None
    assert ("node-000", "AgentGone") in world.events
    assert notes(world.plan())["node-000"].startswith(NO_AGENT)


def test_a_stopped_check_names_the_stop_and_since_when() -> None:
    live = hostcheck.HostCheck(T0, {"merged": "no"}, every=60.0)
    assert hostcheck.back_by(live.to_json()) is None
    stopped = hostcheck.stopped(live.to_json(), T0 + timedelta(seconds=5))
    assert hostcheck.parse(stopped.to_json()) == stopped  # keeps its last verdict, says when it stopped
    assert stopped.refusals == {"merged": "no"} and stopped.at == T0
    text = stopped.to_json()
    assert hostcheck.absence(text, T0 + timedelta(seconds=6)).startswith(
        "the eventedpleg agent stopped at 2026-"
    )
    assert hostcheck.back_by(text) == T0 + timedelta(seconds=5) + hostcheck.GONE_GRACE
    assert hostcheck.back_by(live.to_json()) is None  # gone stale without a word: no grace beyond that
    assert hostcheck.back_by(None) is None
    assert hostcheck.stopped("{not json", T0).stopped == T0


def test_an_agent_that_stops_cleanly_after_the_cordon_gets_a_grace_then_its_node_given_back() -> None:
    nodes = fleet(2)
    nodes["node-000"].agent_dies_on_cordon = True
    nodes["node-000"].agent_stops_cleanly = True
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec(drain={"timeoutSeconds": 0}))
    world.tick()
    world.agents()  # the agent stops and marks its check
    assert nodes["node-000"].annotations[protocol.ANN_STATE] == "Draining"
    plan = world.plan()
    assert not [a for a in plan.actions if a.node == "node-000"]  # paused, not given back, not drained
    assert notes(plan)["node-000"].startswith(
        "drain paused, waiting for its agent: the eventedpleg agent stopped"
    )
    assert plan.summary.next_wake == T0 + hostcheck.GONE_GRACE
    world.now = T0 + hostcheck.GONE_GRACE
    (back,) = [a for a in world.plan().actions if a.node == "node-000"]
    assert isinstance(back, Uncordon) and "stopped at" in back.agent_gone
    world.apply(back)
    assert not nodes["node-000"].unschedulable and ("node-000", "AgentGone") in world.events


def test_an_agent_replaced_mid_drain_keeps_its_node_taken_once() -> None:
    """A rolling update of the agent DaemonSet (helm upgrade) replaces the agent while the operator drains
    its node: the node waits for the new agent, is not given back, and is drained once."""
    nodes = fleet(2)
    nodes["node-000"].agent_dies_on_cordon = True
    nodes["node-000"].agent_stops_cleanly = True
    world = World(nodes, spec())
    world.tick()
    world.agents()
    world.now = T0 + timedelta(seconds=20)
    nodes["node-000"].agent_dies_on_cordon = False  # the new pod starts and publishes its check
    nodes["node-000"].agent_dead = False
    final = world.run()
    assert final.summary.complete
    assert nodes["node-000"].drains == 1 and nodes["node-000"].annotations[protocol.ANN_CURRENT] == H_ON
    assert ("node-000", "AgentGone") not in world.events


def test_a_skipped_node_is_always_given_back() -> None:
    nodes = fleet(2)
    nodes["node-000"].mirror_pods = ("kube-system/etcd-node-000",)  # appears after the survey: taken
    world = World(nodes, spec())
    final = world.run()
    assert (
        nodes["node-000"].annotations[protocol.ANN_STATE] == "Skipped" and not nodes["node-000"].unschedulable
    )
    assert final.summary.complete


def failed_halted_skipped_and_agentless() -> World:
    """A rollout halted by a node left Failed and cordoned (its agent never answers), with a node Skipped
    (static pods) and one without an agent."""
    nodes = fleet(4)
    nodes["node-000"].agent_silent = True
    nodes["node-001"].mirror_pods = ("kube-system/etcd-node-001",)
    nodes["node-002"].agent_absent = True
    world = World(nodes, spec(verification={"timeoutSeconds": 10}, rollout={"maxUnavailable": 2}))
    final = world.run(limit=1000)
    assert nodes["node-000"].annotations[protocol.ANN_STATE] == "Failed" and nodes["node-000"].unschedulable
    assert nodes["node-001"].annotations[protocol.ANN_STATE] == "Skipped"
    assert final.summary.halted
    return world


def test_deleting_with_failed_halted_skipped_and_agentless_nodes_finishes_with_every_node_given_back() -> (
    None
):
    world = failed_halted_skipped_and_agentless()
    world.deleting = True
    first = world.plan()
    assert not first.summary.halted  # a deletion is never halted
    released = {a.node: a for a in first.actions if isinstance(a, Release)}
    assert "left as it Failed" in released["node-000"].left
    assert "eventedPleg: false" in released["node-000"].left  # and how to end it
    final = world.run()
    assert final.summary.finalized
    assert status.deleting_text(final.summary) == ""
    for node in world.nodes.values():
        assert not node.unschedulable, node
        assert (
            protocol.ANN_OWNER not in node.annotations and protocol.ANN_CORDONED_BY_US not in node.annotations
        ), node
    assert ("node-000", "ReleasedAsIs") in world.events


def test_turning_evented_pleg_off_gives_a_failed_node_back() -> None:
    world = failed_halted_skipped_and_agentless()
    world.spec = spec(eventedPleg=False, verification={"timeoutSeconds": 10}, rollout={"maxUnavailable": 2})
    final = world.run()
    assert not world.nodes["node-000"].unschedulable
    assert not final.summary.halted


def test_deleting_text_names_what_it_waits_for_never_an_opaque_wait() -> None:
    world = failed_halted_skipped_and_agentless()
    world.deleting = True
    text = status.deleting_text(world.plan().summary)
    assert "node-000" in text and "in flight" not in text


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.sampled_from(["ok", "silent", "absent", "dies", "fails", "static", "blocked"]),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["Revert", "Keep"]),
    st.integers(0, 2**32),
)
def test_any_deletion_finishes_and_gives_back_every_node(kinds: list[str], on_delete: str, seed: int) -> None:
    """Whatever the nodes' agents did, and wherever the rollout is when the NodeConfig goes, the deletion
    finishes within a bounded number of passes with no node left cordoned or marked ours."""
    rng = random.Random(seed)
    nodes = fleet(len(kinds))
    for node, kind in zip(nodes.values(), kinds, strict=True):
        node.agent_silent = kind == "silent"
        node.agent_absent = kind == "absent"
        node.agent_dies_on_cordon = kind == "dies"
        node.agent_fails = kind == "fails"
        node.mirror_pods = ("kube-system/etcd",) if kind == "static" else ()
        if kind == "blocked":
            node.drain_blocked_until = T0 + timedelta(days=1)
    world = World(
        nodes,
        spec(
            onDelete=on_delete,
            verification={"timeoutSeconds": 10},
            rollout={"maxUnavailable": rng.choice([1, 2, 6]), "onFailure": rng.choice(["Rollback", "Halt"])},
            drain={"timeoutSeconds": 30},
        ),
    )
    for _ in range(rng.randrange(0, 400)):
        world.tick(rng.choice([1, 1, 7]))
    world.deleting = True
    final = world.run(limit=2000)
    assert final.summary.finalized, final.summary
    for node in world.nodes.values():
        assert not node.unschedulable, node
        assert protocol.ANN_OWNER not in node.annotations, node

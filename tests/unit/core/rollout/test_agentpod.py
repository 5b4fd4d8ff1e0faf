"""An agent pod that crash-loops or is not Ready counts as no live agent once it has been so for longer
than GONE_GRACE, whatever its (still fresh) host check says; no pod known changes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from eventedpleg import protocol
from eventedpleg.controller.nodecache import NodeCache
from eventedpleg.core.hostcheck import GONE_GRACE
from eventedpleg.core.rollout import planner
from eventedpleg.core.rollout.actions import Cordon, Drain, Uncordon
from eventedpleg.core.rollout.agentpod import AgentPod, agent_pod, pick, pod_absence
from eventedpleg.core.rollout.planner.taking import NO_AGENT
from eventedpleg_lab.sim.rolloutworld import T0, World, fleet, spec

SECOND = timedelta(seconds=1)


def _pod(
    node: str = "n1",
    *,
    ready: bool = False,
    since: datetime = T0,
    waiting: str = "CrashLoopBackOff",
    restarts: int = 7,
    name: str = "x",
    owner: str = "DaemonSet",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "evented-pleg-agent",
        "ownerReferences": [{"kind": owner}],
        "creationTimestamp": "2020-01-01T00:00:00Z",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    state = {"running": {}} if ready else {"waiting": {"reason": waiting, "message": "back-off 5m0s"}}
    status = {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": since.isoformat()}
        ],
        "containerStatuses": [{"state": state, "restartCount": restarts}],
    }
    return {"metadata": meta, "spec": {"nodeName": node}, "status": status}


def _summary(node: str = "n1", **kw: Any) -> AgentPod:
    pod = agent_pod(_pod(node, **kw))
    assert pod is not None
    return pod


def notes(plan: planner.Plan) -> dict[str, str]:
    return {n.name: n.reason for n in plan.summary.attention}


def test_a_pod_summary_has_its_readiness_since_when_and_its_own_reason() -> None:
    pod = _summary()
    assert pod == AgentPod("evented-pleg-agent/x", "n1", False, T0, "CrashLoopBackOff (restarts 7)")
    assert _summary(ready=True, restarts=0).reason == "Running"
    failing = _pod(ready=False, restarts=0)
    failing["status"]["containerStatuses"] = [{"state": {"running": {}}, "restartCount": 0}]
    summary = agent_pod(failing)
    assert summary is not None and summary.reason == "Running, failing its readiness probe"
    assert agent_pod(_pod(owner="ReplicaSet")) is None  # not a DaemonSet's: not our agent
    assert agent_pod(_pod(deleting=True)) is None  # going away: its agent marks its check stopped
    unplaced = _pod()
    unplaced["spec"] = {}
    assert agent_pod(unplaced) is None
    no_condition = _pod()
    no_condition["status"]["conditions"] = []
    assert agent_pod(no_condition) == AgentPod(
        "evented-pleg-agent/x", "n1", False, datetime.fromisoformat("2020-01-01T00:00:00+00:00"), pod.reason
    )


def test_pod_absence_only_after_the_grace_and_never_without_a_pod() -> None:
    pod = _summary()
    assert pod.gone_at == T0 + GONE_GRACE
    assert pod_absence(pod, T0 + GONE_GRACE - SECOND) == ""
    assert pod_absence(pod, T0 + GONE_GRACE) == (
        "agent pod evented-pleg-agent/x on node n1 not Ready since "
        f"{T0.isoformat(timespec='seconds')}: CrashLoopBackOff (restarts 7)"
    )
    assert pod_absence(_summary(ready=True), T0 + timedelta(days=1)) == ""
    assert pod_absence(None, T0 + timedelta(days=1)) == ""


def test_a_ready_pod_speaks_for_its_node_else_the_newest_not_ready_one() -> None:
    old = _summary(name="old", since=T0)
    new = _summary(name="new", since=T0 + timedelta(minutes=5))
    ready = _summary(name="ready", ready=True, since=T0 - timedelta(hours=1))
    assert pick([old, new]) == new
    assert pick([new, ready, old]) == ready
    assert pick([]) is None


def test_a_crash_looping_agent_pod_keeps_its_node_from_being_taken_despite_a_fresh_check() -> None:
    nodes = fleet(2)
    nodes["node-000"].agent_pod = _summary("node-000", since=T0 - GONE_GRACE)
    world = World(nodes, spec())
    plan = world.plan()
    assert [a.node for a in plan.actions if isinstance(a, Cordon)] == ["node-001"]
    assert notes(plan)["node-000"] == (
        NO_AGENT + "agent pod evented-pleg-agent/x on node node-000 not Ready since "
        f"{(T0 - GONE_GRACE).isoformat(timespec='seconds')}: CrashLoopBackOff (restarts 7)"
    )
    nodes["node-000"].agent_pod = _summary("node-000", ready=True)  # Ready again: taken like any other
    world.run()
    assert nodes["node-000"].drains == 1 and nodes["node-000"].annotations[protocol.ANN_STATE] == "Done"


def test_no_pod_known_is_judged_by_the_host_check_alone() -> None:
    nodes = fleet(1)
    world = World(nodes, spec())
    assert [a.node for a in world.plan().actions if isinstance(a, Cordon)] == ["node-000"]


def test_a_node_is_never_taken_while_its_agent_pod_is_not_ready_even_within_the_grace() -> None:
    nodes = fleet(1)
    world = World(nodes, spec())
    nodes["node-000"].agent_pod = _summary("node-000", since=T0 - GONE_GRACE + SECOND)  # within its grace
    plan = world.plan()
    assert [a for a in plan.actions if isinstance(a, Cordon)] == []
    assert notes(plan)["node-000"].startswith(
        NO_AGENT + "agent pod evented-pleg-agent/x on node node-000 not Ready"
    )


def _draining(world: World) -> None:
    world.tick()  # cordoned
    assert world.nodes["node-000"].annotations[protocol.ANN_STATE] == "Draining"


def test_a_draining_node_whose_agent_pod_goes_not_ready_is_given_back_after_the_grace() -> None:
    nodes = fleet(1)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)  # still draining meanwhile
    world = World(nodes, spec())
    _draining(world)
    went = world.now
    nodes["node-000"].agent_pod = _summary("node-000", since=went)
    world.now = went + GONE_GRACE - SECOND
    plan = world.plan()
    assert not [a for a in plan.actions if a.node == "node-000"]  # paused: no drain, not given back
    assert notes(plan)["node-000"].startswith("drain paused, waiting for its agent: agent pod evented-pleg")
    assert plan.summary.next_wake == went + GONE_GRACE
    world.now = went + GONE_GRACE
    (back,) = [a for a in world.plan().actions if a.node == "node-000"]
    assert isinstance(back, Uncordon) and "CrashLoopBackOff (restarts 7)" in back.agent_gone
    world.apply(back)
    assert not nodes["node-000"].unschedulable and ("node-000", "AgentGone") in world.events
    assert notes(world.plan())["node-000"].startswith(NO_AGENT + "agent pod evented-pleg-agent/x")


def test_a_pod_ready_again_within_the_grace_keeps_its_node() -> None:
    nodes = fleet(1)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec())
    _draining(world)
    nodes["node-000"].agent_pod = _summary("node-000", since=world.now)
    world.now += GONE_GRACE - SECOND
    assert not [a for a in world.plan().actions if a.node == "node-000"]
    nodes["node-000"].agent_pod = _summary("node-000", ready=True, since=world.now)
    assert [type(a) for a in world.plan().actions if a.node == "node-000"] == [Drain]
    nodes["node-000"].drain_blocked_until = None
    final = world.run()
    assert final.summary.complete and nodes["node-000"].drains == 1
    assert ("node-000", "AgentGone") not in world.events


def test_a_pass_memo_plans_a_node_again_when_its_pods_grace_ends() -> None:
    """The decision for a Draining node whose agent pod is not Ready (its drain paused) holds only until the
    grace ends: the memo plans it again then, without any change of its view, and gives the node back."""
    nodes = fleet(1)
    nodes["node-000"].drain_blocked_until = T0 + timedelta(days=1)
    world = World(nodes, spec())
    _draining(world)
    nodes["node-000"].agent_pod = _summary("node-000", since=world.now)
    memo = planner.PassMemo()
    views = world.views()
    first = planner.plan(views, world.target, world.now, memo)
    assert [a for a in first.actions if a.node == "node-000"] == []
    late = planner.plan(views, world.target, world.now + GONE_GRACE, memo, changed={})
    assert [type(a) for a in late.actions if a.node == "node-000"] == [Uncordon]


def test_the_node_cache_puts_each_nodes_agent_pod_on_its_view() -> None:
    cache = NodeCache()
    node = {"metadata": {"name": "n1", "resourceVersion": "3"}, "status": {}}
    assert cache.apply_event("ADDED", node)
    cache.changes("loop")  # a reader from now on
    assert cache.apply_pod_event("ADDED", _pod("n1"))
    (view,) = cache.snapshot()
    assert view.agent_pod == _summary("n1")
    assert set((cache.changes("loop")[1] or {}).keys()) == {"n1"}
    assert not cache.apply_pod_event("MODIFIED", _pod("n1"))  # the same summary: no change
    assert cache.apply_pod_event("MODIFIED", _pod("n1", ready=True))
    assert cache.snapshot()[0].agent_pod == _summary("n1", ready=True)
    # A node event keeps the pod; a pod for a node not seen yet waits for it.
    assert cache.apply_event("MODIFIED", {**node, "metadata": {"name": "n1", "resourceVersion": "4"}})
    assert cache.snapshot()[0].agent_pod == _summary("n1", ready=True)
    assert not cache.apply_pod_event("ADDED", _pod("n2", name="y"))
    assert cache.apply_event("ADDED", {"metadata": {"name": "n2", "resourceVersion": "5"}, "status": {}})
    assert {v.name: v.agent_pod for v in cache.snapshot()}["n2"] == _summary("n2", name="y")
    assert cache.apply_pod_event("DELETED", _pod("n1", ready=True))
    assert cache.snapshot()[0].agent_pod is None
    assert cache.retain_pods({"x"})  # y is gone (its DELETED fell in a watch gap)
    assert all(v.agent_pod is None for v in cache.snapshot())
    assert not cache.apply_pod_event("ADDED", _pod("n1", owner="ReplicaSet"))  # not an agent pod

"""A tiny model of a cluster for the planner tests and bench/passcost.py: nodes as annotation dicts. The
operator's steps run the product's own step policy (core.rollout.steps), answered from this model, one
write at a time, so a crash can end a step between two writes; each node's agent is the product's own apply
phase on a model host (eventedpleg_lab.sim.agentmodel). Pure and fast, so the property tests can replay
thousands of interrupted rollouts."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from eventedpleg.core import hostcheck, render
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.node.blocks.nodeapi import AgentNode
from eventedpleg.core.node.phases import hostcheckphase
from eventedpleg.core.rollout import planner, steps
from eventedpleg.core.rollout.actions import Action, Cordon
from eventedpleg.core.rollout.agentpod import AgentPod
from eventedpleg.core.rollout.drain import pods as drainpods
from eventedpleg.core.rollout.drain.pods import Blocker, DrainResult
from eventedpleg.core.rollout.drain.policy import DrainPolicy
from eventedpleg.core.rollout.drain.survey import PodSurvey
from eventedpleg.core.rollout.snapshot import NodeView, Peer, Target, node_view
from eventedpleg.core.rollout.steps import AttemptDrain, Emit, Write
from eventedpleg.models.nodeconfig import NodeConfigSpec
from eventedpleg.protocol import (
    AGENT_PHASE,
    ANN_AUTOSCALER_HOLD,
    ANN_CORDONED_BY_US,
    ANN_DESIRED,
    ANN_HOST_CHECK,
    ANN_REASON,
    ANN_STATE,
    ANN_STATE_SINCE,
    ANN_TAINT,
    ANN_TAINTED_SINCE,
    AUTOSCALER_ANNOTATIONS,
    AUTOSCALER_VALUE,
    IN_PROGRESS,
    NodeState,
    Writer,
    format_time,
)
from eventedpleg_lab.sim.agentmodel import ModelAgent, ModelHost

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
NEVER = "default/db-0: PodDisruptionBudget default/db (maxUnavailable: 0) allows no eviction"
EXHAUSTED = "PodDisruptionBudget default/web (minAvailable: 2) allows 0 disruptions now"

# What the operator renders for the world's NodeConfig ("cluster"): the agents read it from these ConfigMaps.
RENDERED = {
    r.hash: r
    for r in (
        render.render(enabled=True, owner="cluster", kubelet_config_mode="DropInOnly"),
        render.render(enabled=False, owner="cluster", kubelet_config_mode="DropInOnly"),
    )
}
H_ON, H_OFF = RENDERED
CONFIGMAPS = {r.configmap_name: r.configmap_data() for r in RENDERED.values()}


@dataclass
class SimNode:
    name: str
    kubelet: str = "v1.34.2"
    runtime: str = "containerd://2.1.4"
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    created: datetime | None = None  # metadata.creationTimestamp (rollout.order: OldestFirst)
    drain_blocked_until: datetime | None = None  # a PDB keeps pods here until then
    # ... while it says it allows a disruption (its pods' replacements are never ready): a retry is not held
    budget_allows: bool = False
    drain_never_until: datetime | None = None  # a PDB that allows no eviction at all, until it is changed
    mirror_pods: tuple[str, ...] = ()  # static pods the kubelet runs from files
    # spec.rollout.healthGate's pods on the node, "namespace/name" -> Ready (the API server's selection)
    workload: dict[str, bool] = field(default_factory=dict)
    # Pods as the API lists them, through the drain's own filters (core.rollout.drain.pods.select_pods): a
    # drain attempt evicts those it says to evict now (one order of drain.rules per attempt, as the
    # executor), and an evicted pod is gone at once.
    pods: list[dict[str, Any]] = field(default_factory=list)
    # "namespace/name" -> when that running pod completes (phase Succeeded), e.g. a Job's pod that a
    # drain.rules WaitCompleted rule waits for
    completes: dict[str, datetime] = field(default_factory=dict)
    agent_fails: bool = False  # the agent rolls back (kubelet would not start)
    agent_silent: bool = False  # its agent publishes host checks but never answers an apply request
    agent_absent: bool = False  # no agent ever runs here (not scheduled, wrong architecture, a taint)
    agent_dies_on_cordon: bool = False  # its agent stops for good once the node is cordoned
    agent_stops_cleanly: bool = False  # ... and marks its host check stopped on the way out (a SIGTERM)
    agent_dead: bool = False  # set by the world: this node's agent stopped
    agent: ModelAgent | None = None  # the real agent's phases on a model host (made on first use)
    agent_pod: AgentPod | None = None  # its agent pod as the operator's pod watch sees it (None: unknown)
    drains: int = 0  # times the operator took the node (cordoned it for a rollout)
    rv: int = 1

    # Autoscaler annotations the user set before any rollout (World takes them at its start): they must
    # survive it unchanged.
    user_autoscaler: dict[str, str] = field(default_factory=dict)
    user_taints: list[dict[str, str]] = field(default_factory=list)  # likewise, the taints set before

    def check_taints(self) -> None:
        """The user's taints stay as they were; ours (drain.taintBeforeCordon) is on exactly while its mark
        says so, and only with the mark of the wait-then-cordon."""
        assert all(t in self.taints for t in self.user_taints), (self.name, self.taints)
        ours = self.annotations.get(ANN_TAINT)
        added = [t for t in self.taints if t not in self.user_taints]
        assert [t["key"] for t in added] == ([ours] if ours else []), (self.name, self.taints, ours)
        if ours:
            assert ANN_TAINTED_SINCE in self.annotations, (self.name, self.annotations)

    def check_autoscaler_hold(self) -> None:
        """While our cordon is on, every autoscaler key is set (ours "true", the user's as they were);
        without it, only the user's are; never a hold list without our cordon."""
        ann = self.annotations
        for key, value in self.user_autoscaler.items():
            assert ann.get(key) == value, (self.name, key, ann)
        present = {k for k in AUTOSCALER_ANNOTATIONS if k in ann}
        if ann.get(ANN_CORDONED_BY_US) == "true":
            assert present == set(AUTOSCALER_ANNOTATIONS), (self.name, ann)
            assert all(ann[k] == AUTOSCALER_VALUE for k in present - set(self.user_autoscaler)), ann
        else:
            assert present == set(self.user_autoscaler) and ANN_AUTOSCALER_HOLD not in ann, (self.name, ann)

    def body(self) -> dict[str, Any]:
        created = {"creationTimestamp": self.created.isoformat()} if self.created else {}
        return {
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": dict(self.annotations),
                "resourceVersion": str(self.rv),
                **created,
            },
            "spec": {"unschedulable": self.unschedulable, "taints": [dict(t) for t in self.taints]},
            "status": {
                "nodeInfo": {"kubeletVersion": self.kubelet, "containerRuntimeVersion": self.runtime},
                "conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}],
            },
        }


@dataclass
class World:
    nodes: dict[str, SimNode]
    spec: NodeConfigSpec
    name: str = "cluster"
    now: datetime = T0
    deleting: bool = False
    peers: tuple[Peer, ...] = ()  # other NodeConfigs (name, created, selector)
    retry: dict[str, datetime] = field(default_factory=dict)  # the NodeConfig's ANN_RETRY (retry.py)
    approved: dict[str, str] = field(default_factory=dict)  # the NodeConfig's ANN_APPROVED (approval.py)
    allow_force_delete: bool = True  # the installation grants `pods delete` (chart drain.allowForceDelete)
    history: list[tuple[datetime, int]] = field(default_factory=list)  # (time, unavailable)
    log: list[str] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)  # (node, reason) of Node Events
    alerts: str = ""  # what spec.rollout.alertGate's Prometheus says fires ("" when nothing)
    # The Namespaces' labels by name, as k8s.drain.namespace_labels reads them (namespaceSelector)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    health_watch: tuple[str, ...] = ()  # the nodes the last plan asked the gate's pods of (as the reconciler)
    health_reads: list[tuple[str, ...]] = field(default_factory=list)  # the nodes read, pass by pass
    # Every annotation write, by whom (operator or agent), on which node, with its changes (None removes)
    writes: list[tuple[Writer, str, dict[str, str | None]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for node in self.nodes.values():
            node.user_autoscaler = {k: v for k, v in node.annotations.items() if k in AUTOSCALER_ANNOTATIONS}
            if not node.agent_absent:  # the agents ran before the NodeConfig came: part of the start
                check = hostcheck.HostCheck(self.now, {}, hostcheckphase.REFRESH.total_seconds())
                node.annotations.setdefault(ANN_HOST_CHECK, check.to_json())
            node.user_taints = [dict(t) for t in node.taints]

    @property
    def target(self) -> Target:
        on = H_ON if self.spec.evented_pleg else H_OFF
        return Target(
            name=self.name,
            spec=self.spec,
            created=T0,
            generation=1,
            hash_on=on,
            hash_off=H_OFF,
            agent_options=AgentOptions.from_spec(self.spec).to_json(),
            deleting=self.deleting,
            peers=self.peers,
            retry=self.retry,
            approved=self.approved,
            alerts=self.alerts,
            health=self._health(),
        )

    def _health(self) -> dict[str, tuple[str, ...]]:
        """What eventedpleg.k8s.workloads answers for the nodes the last plan named."""
        if not self.spec.rollout.health_gate.enabled or self.deleting:
            return {}
        read = {n: self.nodes[n].workload for n in self.health_watch if n in self.nodes}
        return {n: tuple(sorted(p for p, ok in pods.items() if not ok)) for n, pods in read.items()}

    def views(self) -> list[NodeView]:
        return [replace(node_view(n.body()), agent_pod=n.agent_pod) for n in self.nodes.values()]

    def plan(self) -> planner.Plan:
        """One pass, as the reconciler makes it: the gate's pods read for the nodes the last one named."""
        target = self.target
        if target.health:
            self.health_reads.append(tuple(target.health))
        result = planner.plan(self.views(), target, self.now)
        self.health_watch = result.summary.health_watch
        return result

    # -- the executor's effects: the product's step policy, answered by this model -------------------

    def _mark(self, node: SimNode, state: NodeState, reason: str = "") -> None:
        node.annotations[ANN_STATE] = state.value
        node.annotations[ANN_STATE_SINCE] = format_time(self.now)
        node.annotations[ANN_REASON] = reason

    def _write(self, node: SimNode, write: Write, by: Writer = Writer.OPERATOR) -> None:
        self.writes.append((by, node.name, dict(write.annotations)))
        if write.annotations.get(ANN_CORDONED_BY_US) == "true":
            node.drains += 1
        for key, value in write.annotations.items():
            if value is None:
                node.annotations.pop(key, None)
            else:
                node.annotations[key] = value
        if write.unschedulable is not None:
            node.unschedulable = write.unschedulable
        if write.taints is not None:
            node.taints = [t.to_api() for t in write.taints]
        node.rv += 1

    def _blocked(self, node: SimNode) -> bool:
        """Pods a PDB keeps on the node are there to evict."""
        return node.drain_blocked_until is not None and self.now < node.drain_blocked_until

    def _never(self, node: SimNode) -> str:
        """What a PDB that allows no eviction says (core.rollout.drain.budgets), while it is in place."""
        if node.drain_never_until is not None and self.now < node.drain_never_until:
            return NEVER
        return ""

    def _selection(self, node: SimNode, *, force_delete: bool = False) -> drainpods.DrainSelection:
        for body in node.pods:  # the pods that have completed by now
            done_at = node.completes.get(str(_ref(body)))
            if done_at is not None and done_at <= self.now:
                body["status"] = {**(body.get("status") or {}), "phase": "Succeeded"}
        policy = DrainPolicy.of(self.spec.drain)
        options = policy.options(self.now, force_delete=force_delete, namespaces=self.namespaces)
        return drainpods.select_pods(node.pods, options)

    def _drain(self, node: SimNode, request: AttemptDrain) -> DrainResult:
        """The executor's attempt (k8s.drain.attempt): evict what select says to evict now, the lowest
        order of drain.rules; a later order is evicted by a later attempt, once this one's pods are gone
        (here at once), and WaitCompleted pods hold the drain until they complete."""
        selection = self._selection(node, force_delete=request.force_delete)
        if selection.blocked:  # what the filters keep; the rest is evicted by this very attempt
            return drainpods.result(drainpods.DrainSelection((), (), (), selection.blocked))
        if self._never(node) and not request.force_delete:
            refused = frozenset({Blocker.EVICTION_REFUSED, Blocker.NEVER_ALLOWED})
            return DrainResult(False, "PDB blocks eviction", refused, never=self._never(node))
        if self._blocked(node) and not request.force_delete:
            return DrainResult(False, "PDB blocks eviction", frozenset({Blocker.EVICTION_REFUSED}))
        gone = set(selection.evict + selection.terminating)  # evictions finish at once
        node.pods = [body for body in node.pods if _ref(body) not in gone]
        if selection.later or selection.wait_completed:
            return drainpods.result(selection)
        return DrainResult(True)

    def apply(self, action: Action, *, writes: int | None = None) -> bool:
        """Apply one action as the executor would; False when its resourceVersion is stale (409).
        `writes`: the operator dies after that many of the step's writes (None: the step completes)."""
        node = self.nodes[action.node]
        if action.resource_version != str(node.rv):
            return False
        if isinstance(action, Cordon):
            assert action.was_unschedulable == node.unschedulable  # the rv precondition makes it so
        step = steps.step(
            action, clock=lambda: self.now, nodeconfig=self.name, allow_force_delete=self.allow_force_delete
        )
        with contextlib.suppress(_CrashError):  # a crash: the rest of the step never happens
            steps.run(step, _ModelAnswers(self, node, writes))
        return True

    # -- the agent's effects ---------------------------------------------------------------------------

    def agents(self) -> None:
        """Each node's agent: the product's apply phase, its effects answered by a model host."""
        for node in self.nodes.values():
            if node.agent_dies_on_cordon and node.unschedulable and not node.agent_dead:
                node.agent_dead = True
                if node.agent_stops_cleanly:  # agent.main.withdraw_host_check's write
                    stopped = hostcheck.stopped(node.annotations.get(ANN_HOST_CHECK), self.now)
                    self._write(node, Write({ANN_HOST_CHECK: stopped.to_json()}), Writer.AGENT)
            if node.agent_absent or node.agent_dead:
                continue
            self._host_check(node)
            if node.agent_silent:
                continue
            if node.agent is None:
                node.agent = ModelAgent(ModelHost(node.kubelet, node.runtime), CONFIGMAPS)
            node.agent.host.fails = node.agent_fails  # a test may fix the cause between runs
            view = AgentNode(
                node.name,
                annotations=dict(node.annotations),
                kubelet_version=node.kubelet,
                runtime_version=node.runtime,
                ready=node.ready,
            )
            node.agent.step(view, self.now, partial(self._report, node), partial(self._event, node))

    def _host_check(self, node: SimNode) -> None:
        """The agent's host check while it does not hold the node: nothing refused, published by the
        product's own rule for when a check is news (hostcheckphase.is_news)."""
        if node.annotations.get(ANN_STATE) in AGENT_PHASE:
            return
        check = hostcheck.HostCheck(self.now, {}, hostcheckphase.REFRESH.total_seconds())
        if hostcheckphase.is_news(check, hostcheck.parse(node.annotations.get(ANN_HOST_CHECK))):
            self._write(node, Write({ANN_HOST_CHECK: check.to_json()}), Writer.AGENT)

    def _report(self, node: SimNode, changes: Mapping[str, str | None], desired: str) -> bool:
        """The agent's conditional patch: only while desired-config is what it acted on."""
        if node.annotations.get(ANN_DESIRED, "") != desired:
            return False
        self._write(node, Write(changes), Writer.AGENT)
        return True

    def _event(self, node: SimNode, reason: str) -> None:
        self.events.append((node.name, reason))

    def unavailable(self) -> int:
        return sum(1 for n in self.nodes.values() if not n.ready or n.unschedulable)

    def tick(self, seconds: int = 1, *, drop: random.Random | None = None) -> planner.Plan:
        """Plan, apply (optionally dropping actions as a crash would), let agents work, advance time."""
        result = self.plan()
        if result.summary.complete:  # complete: nobody is left cordoned by us but a Failed node (for a human)
            held = [
                n
                for n in self.nodes.values()
                if (n.annotations.get(ANN_CORDONED_BY_US) or n.annotations.get(ANN_TAINTED_SINCE))
                and n.annotations.get(ANN_STATE) != "Failed"
            ]
            assert not held, result
        for action in result.actions:
            if drop is not None and drop.random() < 0.5:
                self.apply(action, writes=drop.randrange(3))  # a crash before, or between, its writes
                continue
            self.apply(action)
        self.agents()
        for node in self.nodes.values():
            node.check_autoscaler_hold()  # after crashes between writes too
            node.check_taints()
        self.history.append((self.now, self.unavailable()))
        self.now += timedelta(seconds=seconds)
        return result

    def run(self, limit: int = 3000, *, drop: random.Random | None = None) -> planner.Plan:
        """Tick until nothing can change any more: no action, no node in progress, no deadline ahead."""
        result = self.plan()
        for _ in range(limit):
            before = {name: n.rv for name, n in self.nodes.items()}
            result = self.tick(drop=drop)
            wake = result.summary.next_wake
            moved = before != {name: n.rv for name, n in self.nodes.items()}  # an agent wrote
            if not result.actions and not moved and self._quiet() and (wake is None or wake < self.now):
                return self.plan()
        raise AssertionError(f"no convergence in {limit} ticks: {result.summary}")

    def _quiet(self) -> bool:
        return all(n.annotations.get(ANN_STATE) not in IN_PROGRESS for n in self.nodes.values())


def _ref(body: Mapping[str, Any]) -> drainpods.PodRef:
    meta = body["metadata"]
    return drainpods.PodRef(str(meta.get("namespace", "")), str(meta.get("name", "")))


class _CrashError(Exception):
    """The operator died in the middle of a step."""


@dataclass
class _ModelAnswers:
    """A step's requests answered from the model, dying after `writes` writes (None: never)."""

    world: World
    node: SimNode
    writes: int | None
    done: int = 0

    def write(self, request: Write) -> None:
        if self.writes is not None and self.done >= self.writes:
            raise _CrashError
        self.world._write(self.node, request)
        self.done += 1

    def survey_pods(self) -> PodSurvey:
        pdb = self.world._never(self.node)
        selection = self.world._selection(self.node)
        never = drainpods.never(selection, [pdb] if pdb else [])
        blocked = self.world._blocked(self.node)
        nothing = selection.done and not (blocked or never)
        return PodSurvey(
            self.node.mirror_pods,
            nothing_to_evict=nothing,
            never=never,
            protected=drainpods.protected(selection),
            exhausted=EXHAUSTED if blocked and not self.node.budget_allows else "",
            holding=drainpods.holding(self.node.pods, DrainPolicy.of(self.world.spec.drain).blocking_pods),
        )

    def find_mirror_pods(self) -> tuple[str, ...]:
        return self.node.mirror_pods

    def attempt_drain(self, request: AttemptDrain) -> DrainResult:
        return self.world._drain(self.node, request)

    def emit(self, request: Emit) -> None:
        self.world.events.append((self.node.name, request.reason))


def spec(**kw: Any) -> NodeConfigSpec:
    data: dict[str, Any] = {"eventedPleg": True, "rollout": {"canary": {"nodes": 0}}}
    for key, value in kw.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return NodeConfigSpec.model_validate(data)


def pod(
    name: str,
    annotations: Mapping[str, str] | None = None,
    namespace: str = "default",
    labels: Mapping[str, str] | None = None,
    owner: str = "ReplicaSet",
) -> dict[str, Any]:
    """A running pod as the API lists it, controlled by a ReplicaSet (or `owner`)."""
    meta = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
        "ownerReferences": [{"kind": owner, "name": name, "controller": True}],
    }
    return {"metadata": meta, "spec": {}, "status": {"phase": "Running"}}


def fleet(n: int, **kw: Any) -> dict[str, SimNode]:
    return {f"node-{i:03d}": SimNode(name=f"node-{i:03d}", **kw) for i in range(n)}

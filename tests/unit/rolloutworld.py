"""A tiny model of a cluster for planner tests: nodes as annotation dicts, the executor's and the agent's
effects applied by the same rules the real ones follow (constants.py protocol). Pure and fast, so the
property tests can replay thousands of interrupted rollouts."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from eventedpleg import constants as c
from eventedpleg.constants import NodeState
from eventedpleg.core import planner
from eventedpleg.core.actions import Action, Cordon, Drain, MarkFailed, Release, SetAgentOptions, Uncordon
from eventedpleg.core.snapshot import NodeView, Peer, Target, node_view
from eventedpleg.models.nodeconfig import NodeConfigSpec, OnDrainTimeout

T0 = datetime(2026, 11, 2, 12, 0, tzinfo=UTC)
H_ON, H_OFF = "on0000000000", "off000000000"


@dataclass
class SimNode:
    name: str
    kubelet: str = "v1.34.2"
    runtime: str = "containerd://2.1.4"
    labels: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    drain_blocked_until: datetime | None = None  # a PDB keeps pods here until then
    agent_fails: bool = False  # the agent rolls back (kubelet would not start)
    agent_silent: bool = False  # no agent answers on this node
    drains: int = 0
    rv: int = 1

    def body(self) -> dict[str, Any]:
        return {
            "metadata": {
                "name": self.name,
                "labels": self.labels,
                "annotations": dict(self.annotations),
                "resourceVersion": str(self.rv),
            },
            "spec": {"unschedulable": self.unschedulable},
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
    agent_seconds: int = 5
    deleting: bool = False
    peers: tuple[Peer, ...] = ()  # other NodeConfigs (name, created, selector)
    history: list[tuple[datetime, int]] = field(default_factory=list)  # (time, unavailable)
    log: list[str] = field(default_factory=list)

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
            agent_options='{"o":1}',
            deleting=self.deleting,
            peers=self.peers,
        )

    def views(self) -> list[NodeView]:
        return [node_view(n.body()) for n in self.nodes.values()]

    def plan(self) -> planner.Plan:
        return planner.plan(self.views(), self.target, self.now)

    # -- the executor's effects ------------------------------------------------------------------------

    def _mark(self, node: SimNode, state: NodeState, reason: str = "") -> None:
        node.annotations[c.ANN_STATE] = state.value
        node.annotations[c.ANN_STATE_SINCE] = self.now.isoformat()
        node.annotations[c.ANN_REASON] = reason

    def apply(self, action: Action) -> bool:
        """Apply one action as the executor would; False when its resourceVersion is stale (409)."""
        node = self.nodes[action.node]
        if action.resource_version != str(node.rv):
            return False
        node.rv += 1
        ann = node.annotations
        match action:
            case Cordon():
                assert action.was_unschedulable == node.unschedulable  # the rv precondition makes it so
                ann[c.ANN_WAS_UNSCHEDULABLE] = str(action.was_unschedulable).lower()
                ann[c.ANN_OWNER] = action.owner
                ann[c.ANN_CORDONED_BY_US] = "true"
                node.unschedulable = True
                node.drains += 1
                # The executor's first drain attempt is part of the same step.
                if node.drain_blocked_until is not None and self.now < node.drain_blocked_until:
                    self._mark(node, NodeState.DRAINING, "PDB blocks eviction")
                else:
                    ann[c.ANN_DESIRED] = action.hash
                    ann[c.ANN_AGENT_OPTIONS] = action.agent_options
                    self._mark(node, NodeState.APPLYING)
            case Drain():
                blocked = node.drain_blocked_until is not None and self.now < node.drain_blocked_until
                if blocked and action.deadline_reached:
                    if action.on_timeout is OnDrainTimeout.FORCE_DELETE:
                        blocked = False
                    else:
                        node.unschedulable = action.was_unschedulable
                        ann.pop(c.ANN_CORDONED_BY_US, None)
                        ann[c.ANN_DESIRED] = action.hash
                        failed = action.on_timeout is OnDrainTimeout.FAIL
                        self._mark(node, NodeState.FAILED if failed else NodeState.SKIPPED, "drain timed out")
                        return True
                if blocked:
                    if ann.get(c.ANN_STATE) != NodeState.DRAINING:
                        self._mark(node, NodeState.DRAINING, "PDB blocks eviction")
                    return True
                ann[c.ANN_DESIRED] = action.hash
                ann[c.ANN_AGENT_OPTIONS] = action.agent_options
                self._mark(node, NodeState.APPLYING)
            case Uncordon():
                node.unschedulable = action.was_unschedulable
                ann.pop(c.ANN_CORDONED_BY_US, None)
            case MarkFailed():
                self._mark(node, NodeState.FAILED, action.reason)
            case Release():
                if action.uncordon:
                    node.unschedulable = action.was_unschedulable
                keep = {c.ANN_CURRENT} if action.keep_current else set()
                for key in [k for k in ann if k.startswith(c.GROUP + "/") and k not in keep]:
                    del ann[key]
            case SetAgentOptions():
                ann[c.ANN_AGENT_OPTIONS] = action.agent_options
        return True

    # -- the agent's effects ---------------------------------------------------------------------------

    def agents(self) -> None:
        for node in self.nodes.values():
            ann = node.annotations
            if ann.get(c.ANN_STATE) != NodeState.APPLYING or node.agent_silent:
                continue
            since = datetime.fromisoformat(ann[c.ANN_STATE_SINCE])
            if self.now - since < timedelta(seconds=self.agent_seconds):
                continue
            node.rv += 1
            if node.agent_fails:
                self._mark(node, NodeState.ROLLED_BACK, "kubelet did not start; restored previous files")
            else:
                ann[c.ANN_CURRENT] = ann[c.ANN_DESIRED]
                self._mark(node, NodeState.DONE, "verified")

    def unavailable(self) -> int:
        return sum(1 for n in self.nodes.values() if not n.ready or n.unschedulable)

    def tick(self, seconds: int = 1, *, drop: random.Random | None = None) -> planner.Plan:
        """Plan, apply (optionally dropping actions as a crash would), let agents work, advance time."""
        result = self.plan()
        if result.summary.complete:  # complete means nobody is left cordoned by us
            assert not [n for n in self.nodes.values() if n.annotations.get(c.ANN_CORDONED_BY_US)], result
        for action in result.actions:
            if drop is not None and drop.random() < 0.5:
                continue
            self.apply(action)
        self.agents()
        self.history.append((self.now, self.unavailable()))
        self.now += timedelta(seconds=seconds)
        return result

    def run(self, limit: int = 3000, *, drop: random.Random | None = None) -> planner.Plan:
        """Tick until nothing can change any more: no action, no node in progress, no deadline ahead."""
        result = self.plan()
        for _ in range(limit):
            result = self.tick(drop=drop)
            wake = result.summary.next_wake
            if not result.actions and self._quiet() and (wake is None or wake < self.now):
                return self.plan()
        raise AssertionError(f"no convergence in {limit} ticks: {result.summary}")

    def _quiet(self) -> bool:
        return all(
            n.annotations.get(c.ANN_STATE) not in {"Cordoned", "Draining", "Applying", "Verifying"}
            for n in self.nodes.values()
        )


def spec(**kw: Any) -> NodeConfigSpec:
    data: dict[str, Any] = {"eventedPleg": True, "rollout": {"canary": {"nodes": 0}}}
    for key, value in kw.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return NodeConfigSpec.model_validate(data)


def fleet(n: int, **kw: Any) -> dict[str, SimNode]:
    return {f"node-{i:03d}": SimNode(name=f"node-{i:03d}", **kw) for i in range(n)}

"""The operator's view of the Nodes: name -> NodeView, fed by the node watch and by our own writes, and
which nodes have a step in flight. Shared by the informer's thread, the passes and the step pools, so
every read and write holds its lock."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from eventedpleg.core.rollout import agentpod
from eventedpleg.core.rollout.actions import Cordon
from eventedpleg.core.rollout.agentpod import AgentPod
from eventedpleg.core.rollout.snapshot import NodeView, node_view
from eventedpleg.protocol import NodeState


def _rv_number(value: str | int | None) -> int:
    """A resourceVersion as a number (0 when absent or not one): what the cache orders versions by."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _rv(body: Mapping[str, Any]) -> int:
    return _rv_number((body.get("metadata") or {}).get("resourceVersion"))


def _view_rv(view: NodeView) -> int:
    return _rv_number(view.resource_version)


@dataclass
class NodeCache:
    """Node name -> NodeView, newest resourceVersion wins; plus the nodes with a step in flight (`busy`).

    While a Cordon step is in flight the node is *assumed* cordoned (kube-scheduler's assume cache): the
    next pass already counts it against maxUnavailable, so passes can overlap steps without ever taking
    more nodes than allowed. Watch events for that node are held until the step's own write lands.
    """

    views: dict[str, NodeView] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    # assumed node -> the newest event's body (or our own write's view, see `written`) while it is held
    held: dict[str, Mapping[str, Any] | NodeView | None] = field(default_factory=dict)
    busy: set[str] = field(default_factory=set)  # nodes with a step in flight: no second step for them
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Per reader of `changes` (a NodeConfig's rollout loop): the nodes whose view changed since it last read.
    dirty: dict[str, set[str]] = field(default_factory=dict)
    # The agent DaemonSet's pods, from their own watch: node -> {namespace/name: summary}. Every view is
    # stored with its node's pick (agentpod.pick) as its agent_pod, so the planner sees a pod's change as
    # a change of its node.
    agent_pods: dict[str, dict[str, AgentPod]] = field(default_factory=dict)
    pod_nodes: dict[str, str] = field(default_factory=dict)  # namespace/name -> its node

    def _set(self, name: str, view: NodeView) -> None:
        pod = agentpod.pick(self.agent_pods.get(name, {}).values())
        if view.agent_pod != pod:
            view = replace(view, agent_pod=pod)
        self.views[name] = view
        for names in self.dirty.values():
            names.add(name)

    def _drop(self, name: str) -> None:
        self.views.pop(name, None)
        self.versions.pop(name, None)
        for names in self.dirty.values():
            names.add(name)

    def apply_event(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """A node's watch event; True when a node's view changed. While a step holds the node, the newest
        event waits for the step's end (`settle`)."""
        name = str((body.get("metadata") or {}).get("name", ""))
        with self.lock:
            if name in self.held and event_type != "DELETED":
                self.held[name] = body
                return False
            return self._apply(name, event_type, body)

    def apply_pod_event(self, event_type: str | None, body: Mapping[str, Any]) -> bool:
        """An agent pod's watch event; True when a node's view changed (its agent pod's summary)."""
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        pod = None if event_type == "DELETED" else agentpod.agent_pod(body)
        with self.lock:
            return self._pod(key, pod)

    def retain_pods(self, names: set[str]) -> bool:
        """After a complete LIST of the agent pods (`names` without their namespace): forget the others."""
        with self.lock:
            gone = [key for key in self.pod_nodes if key.partition("/")[2] not in names]
            changed = False
            for key in gone:
                changed = self._pod(key, None) or changed
            return changed

    def _pod(self, key: str, pod: AgentPod | None) -> bool:
        nodes = set[str]()
        old = self.pod_nodes.pop(key, None)
        if old is not None:
            nodes.add(old)
            mine = self.agent_pods.get(old, {})
            mine.pop(key, None)
            if not mine:
                self.agent_pods.pop(old, None)
        if pod is not None:
            nodes.add(pod.node)
            self.pod_nodes[key] = pod.node
            self.agent_pods.setdefault(pod.node, {})[key] = pod
        changed = False
        for node in nodes:
            view = self.views.get(node)
            if view is not None and view.agent_pod != agentpod.pick(self.agent_pods.get(node, {}).values()):
                self._set(node, view)  # with its pick now
                changed = True
        return changed

    def written(self, view: NodeView) -> bool:
        """Our own write's answer, as the step already read it (node_view of the body the write returned):
        taken like a MODIFIED event of that body, without reading the body again."""
        with self.lock:
            if view.name in self.held:
                self.held[view.name] = view
                return False
            return self._take_view(view.name, view)

    def _take_view(self, name: str, view: NodeView) -> bool:
        rv = _view_rv(view)
        return False if self._stale(name, rv) else self._take(name, rv, view)

    def _apply(self, name: str, event_type: str | None, body: Mapping[str, Any]) -> bool:
        if event_type == "DELETED":
            self._drop(name)
            return True
        rv = _rv(body)
        if self._stale(name, rv):
            return False  # older than what we have, or the watch's echo of a write we already took
        return self._take(name, rv, node_view(body))

    def _stale(self, name: str, rv: int) -> bool:
        return bool(rv) and rv <= self.versions.get(name, 0) and name in self.views

    def _take(self, name: str, rv: int, view: NodeView) -> bool:
        old = self.views.get(name)
        if old is not None and old.facts == view.facts:
            # Keep the very object: a pass's selection memo then knows the node at a glance (`is`).
            view = replace(view, facts=old.facts)
        self._set(name, view)
        self.versions[name] = rv
        return True

    def claim(self, name: str, resource_version: str) -> tuple[bool, NodeView | None]:
        """Mark the node busy for one step: (False, None) when a step is already in flight on it, or when
        the node moved on since the pass planned the step at `resource_version` (a step that just ended
        wrote it, or an event came): the next pass plans it again from what is cached now. Else (True,
        the node as cached now, which is the view the step was planned on)."""
        with self.lock:
            if name in self.busy:
                return False, None
            view = self.views.get(name)
            if view is not None and view.resource_version != resource_version:
                return False, None
            self.busy.add(name)
            return True, view

    def release(self, name: str) -> None:
        with self.lock:
            self.busy.discard(name)

    def idle(self) -> bool:
        """No step in flight on any node."""
        with self.lock:
            return not self.busy

    def assume(self, name: str, view: NodeView) -> None:
        with self.lock:
            self.held.setdefault(name, None)
            self._set(name, view)

    def settle(self, name: str, written: NodeView | None, fallback: NodeView | None) -> None:
        """The step is over: take our write's result (the node as our last write returned it, see
        `written`), or put the old view back; then any newer event."""
        with self.lock:
            newest = self.held.pop(name, None)
            if written is not None:
                self._take_view(name, written)
            elif fallback is not None:
                self._set(name, fallback)
            if isinstance(newest, NodeView):
                self._take_view(name, newest)
            elif newest is not None:
                self._apply(name, "MODIFIED", newest)

    def retain(self, names: set[str]) -> None:
        """After a complete LIST: forget nodes that are gone (their DELETED event fell in a watch gap)."""
        with self.lock:
            for name in set(self.views) - names - set(self.held):
                self._drop(name)

    def snapshot(self) -> list[NodeView]:
        with self.lock:
            return list(self.views.values())

    def changes(self, reader: str) -> tuple[list[NodeView], dict[str, NodeView | None] | None]:
        """Every node, and the nodes whose view changed since `reader` last asked (None on its first call:
        it has seen nothing yet), each with its view now (None: gone). For incremental planning."""
        with self.lock:
            names = self.dirty.get(reader)
            self.dirty[reader] = set()
            changed = None if names is None else {name: self.views.get(name) for name in names}
            return list(self.views.values()), changed

    def forget_reader(self, reader: str) -> None:
        with self.lock:
            self.dirty.pop(reader, None)


def assumed_cordoned(view: NodeView, action: Cordon) -> NodeView:
    """The node as it will be once the Cordon step's first write lands: ours, cordoned, draining."""
    marks = replace(
        view.marks,
        owner=action.owner,
        state=NodeState.DRAINING,
        cordoned_by_us=True,
        was_unschedulable=action.was_unschedulable,
    )
    return replace(view, unschedulable=True, marks=marks)

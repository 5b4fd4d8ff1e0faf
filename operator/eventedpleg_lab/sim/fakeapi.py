"""An in-memory stand-in for the API side of the agent (eventedpleg.core.node.blocks.nodeapi.AgentApi).

The Node's Ready condition follows the simulated host's kubelet, as the node lifecycle would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from eventedpleg.core.node.blocks.nodeapi import AgentNode


@dataclass
class FakeEvent:
    node: str
    reason: str
    message: str
    warning: bool


@dataclass
class ApiNode:
    name: str
    kubelet_version: str
    runtime_version: str
    annotations: dict[str, str] = field(default_factory=dict)
    resource_version: int = 1
    unschedulable: bool = False


class FakeApi:
    def __init__(self) -> None:
        self.nodes: dict[str, ApiNode] = {}
        self.ready: dict[str, Callable[[], bool]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}
        self.events: list[FakeEvent] = []
        self.patches: list[tuple[str, dict[str, str | None]]] = []
        self.rejected_patches = 0
        self.conditions: dict[str, dict[str, dict[str, str]]] = {}  # node -> type -> condition

    def add_node(
        self, name: str, kubelet_version: str, runtime_version: str, ready: Callable[[], bool] | None = None
    ) -> None:
        self.nodes[name] = ApiNode(name, kubelet_version, runtime_version)
        if ready is not None:
            self.ready[name] = ready

    def annotate(self, name: str, changes: Mapping[str, str | None]) -> None:
        """What the operator writes."""
        node = self.nodes[name]
        for key, value in changes.items():
            if value is None:
                node.annotations.pop(key, None)
            else:
                node.annotations[key] = value
        node.resource_version += 1

    def cordon(self, name: str, *, on: bool = True) -> None:
        """What the operator (or a human) does to spec.unschedulable."""
        node = self.nodes[name]
        node.unschedulable = on
        node.resource_version += 1

    def view(self, name: str) -> AgentNode:
        node = self.nodes[name]
        ready_fn = self.ready.get(name)
        return AgentNode(
            name=name,
            uid=f"uid-{name}",
            resource_version=str(node.resource_version),
            annotations=dict(node.annotations),
            kubelet_version=node.kubelet_version,
            runtime_version=node.runtime_version,
            ready=ready_fn() if ready_fn else True,
            unschedulable=node.unschedulable,
        )

    # --- AgentApi ---------------------------------------------------------------------------------------

    def get_node(self, name: str) -> AgentNode | None:
        return self.view(name) if name in self.nodes else None

    def watch_node(self, name: str, *, resource_version: str, timeout_seconds: int) -> Iterator[AgentNode]:
        if name in self.nodes and str(self.nodes[name].resource_version) != resource_version:
            yield self.view(name)

    def patch_node_annotations(
        self, name: str, changes: Mapping[str, str | None], *, require: Mapping[str, str] | None = None
    ) -> AgentNode | None:
        node = self.nodes[name]
        for key, value in (require or {}).items():
            if node.annotations.get(key, "") != value:
                self.rejected_patches += 1
                return None
        self.patches.append((name, dict(changes)))
        self.annotate(name, changes)
        return self.view(name)

    def set_node_condition(self, name: str, condition: Mapping[str, str]) -> None:
        self.conditions.setdefault(name, {})[condition["type"]] = dict(condition)

    def read_configmap(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.configmaps.get((namespace, name))

    def emit_event(self, node: AgentNode, *, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(FakeEvent(node.name, reason, message, warning))

    def event_reasons(self, name: str) -> list[str]:
        return [e.reason for e in self.events if e.node == name]

"""The agent's view of the Kubernetes API: its own Node, the rendered-config ConfigMaps, Events.

`eventedpleg.k8s.agentapi.KubeAgentApi` implements it with the kubernetes client; tests use an in-memory
fake. Pure: the types, and the one reading of the Node's annotations the phases share (`holds_node`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from eventedpleg.protocol import AGENT_PHASE, ANN_STATE
from eventedpleg.reasons import EventReason


@dataclass(frozen=True)
class AgentNode:
    """The parts of a Node the agent reads."""

    name: str
    uid: str = ""
    resource_version: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    kubelet_version: str = ""
    runtime_version: str = ""
    ready: bool | None = None
    unschedulable: bool = False
    addresses: tuple[tuple[str, str], ...] = ()  # status.addresses as (type, address)


def holds_node(annotations: Mapping[str, str]) -> bool:
    """An apply of the agent's has the node (Applying, Verifying): nothing else of the agent's may run."""
    return annotations.get(ANN_STATE, "") in AGENT_PHASE


class AgentApi(Protocol):
    def get_node(self, name: str) -> AgentNode | None:
        """The Node now (a fresh read, not a cache), None if it does not exist."""
        ...

    def watch_node(self, name: str, *, resource_version: str, timeout_seconds: int) -> Iterator[AgentNode]:
        """Changes of that one Node (fieldSelector metadata.name=NAME) until the timeout; may end early."""
        ...

    def patch_node_annotations(
        self, name: str, changes: Mapping[str, str | None], *, require: Mapping[str, str] | None = None
    ) -> AgentNode | None:
        """Set (or with None delete) annotations. With `require`, only if those annotations still have those
        values (a JSON-patch `test`); returns None when that precondition failed."""
        ...

    def set_node_condition(self, name: str, condition: Mapping[str, str]) -> None:
        """Set one condition in the Node's status.conditions (a strategic merge patch of nodes/status, keyed
        by type: the kubelet's own conditions are left alone)."""
        ...

    def read_configmap(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The ConfigMap's data, None if it does not exist."""
        ...

    def emit_event(
        self, node: AgentNode, *, reason: EventReason, message: str, warning: bool = False
    ) -> None:
        """An Event about the Node (best effort: never raises for API errors)."""
        ...

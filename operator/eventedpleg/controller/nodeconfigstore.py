"""The NodeConfigs as kopf last delivered them, and the immutable inputs each pass plans from.

Touched only on the event-loop thread (kopf's event handler, the rollout daemons, the delete handler).
A pass runs in a worker thread; it gets a `PassInputs` taken on the loop thread -- the NodeConfig body and
a frozen tuple of its peers -- so no worker ever iterates a collection that the loop changes under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from eventedpleg.core.rollout.snapshot import Peer
from eventedpleg.models.nodeconfig import LabelSelector, NodeConfigSpec
from eventedpleg.protocol import parse_time


@dataclass(frozen=True)
class PassInputs:
    """What one pass over one NodeConfig plans from; nothing in it changes after it is taken."""

    name: str
    body: Mapping[str, Any] | None  # None: not seen by the watch (yet); the pass reads it from the API
    peers: tuple[Peer, ...]  # every other NodeConfig with a valid spec, for overlap detection
    deleting: bool = False


@dataclass
class NodeConfigStore:
    bodies: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # each body is never mutated
    peers: dict[str, Peer] = field(default_factory=dict)  # NodeConfigs with a valid spec

    def observe(self, event_type: str | None, body: Mapping[str, Any]) -> str:
        """Take a watch event; returns the NodeConfig's name."""
        name = str(body["metadata"]["name"])
        if event_type == "DELETED":
            self.bodies.pop(name, None)
            self.peers.pop(name, None)
            return name
        plain = _plain(body)
        self.bodies[name] = plain
        selector = _selector(plain)
        if selector is None:
            self.peers.pop(name, None)  # an invalid NodeConfig manages nothing
        else:
            self.peers[name] = Peer(name, created(plain), selector)
        return name

    def inputs(self, name: str, *, deleting: bool = False) -> PassInputs:
        return PassInputs(
            name=name,
            body=self.bodies.get(name),
            peers=tuple(peer for other, peer in self.peers.items() if other != name),
            deleting=deleting,
        )


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """kopf hands out read-only views; keep plain dicts (a fresh one per event)."""
    return {key: (_plain(value) if isinstance(value, Mapping) else value) for key, value in body.items()}


def created(body: Mapping[str, Any]) -> datetime:
    return parse_time(str(body["metadata"].get("creationTimestamp", ""))) or datetime.min.replace(tzinfo=UTC)


def _selector(body: Mapping[str, Any]) -> LabelSelector | None:
    """The selector of a NodeConfig; None for an invalid one, which manages nothing."""
    try:
        return NodeConfigSpec.model_validate(body.get("spec") or {}).node_selector
    except ValidationError:
        return None

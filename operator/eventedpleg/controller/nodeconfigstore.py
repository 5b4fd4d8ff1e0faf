"""The NodeConfigs as kopf last delivered them, and the immutable inputs each pass plans from.

Touched only on the event-loop thread (kopf's event handler, the rollout daemons, the delete handler).
Each event is validated here, once (nodeconfigview); a pass runs in a worker thread on a `PassInputs` taken
on the loop thread -- the NodeConfig's view and a frozen tuple of its peers -- so no worker ever iterates
a collection that the loop changes under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eventedpleg.controller.nodeconfigview import NodeConfigView, view_of
from eventedpleg.core.rollout.snapshot import Peer


@dataclass(frozen=True)
class PassInputs:
    """What one pass over one NodeConfig plans from; nothing in it changes after it is taken."""

    name: str
    nodeconfig: NodeConfigView | None  # None: not seen by the watch (yet); the pass reads it from the API
    peers: tuple[Peer, ...]  # every other NodeConfig with a valid spec, for overlap detection
    deleting: bool = False


@dataclass
class NodeConfigStore:
    views: dict[str, NodeConfigView] = field(default_factory=dict)
    peers: dict[str, Peer] = field(default_factory=dict)  # NodeConfigs with a valid spec

    def apply_event(self, event_type: str | None, body: Mapping[str, Any]) -> str:
        """Take a watch event; returns the NodeConfig's name."""
        name = str(body["metadata"]["name"])
        if event_type == "DELETED":
            self.views.pop(name, None)
            self.peers.pop(name, None)
            return name
        view = self.views[name] = view_of(_plain(body))
        peer = view.peer
        if peer is None:
            self.peers.pop(name, None)  # an invalid NodeConfig manages nothing
        else:
            self.peers[name] = peer
        return name

    def inputs(self, name: str, *, deleting: bool = False) -> PassInputs:
        return PassInputs(
            name=name,
            nodeconfig=self.views.get(name),
            peers=tuple(peer for other, peer in self.peers.items() if other != name),
            deleting=deleting,
        )


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    """kopf hands out read-only views; validate plain dicts."""
    return {key: (_plain(value) if isinstance(value, Mapping) else value) for key, value in body.items()}

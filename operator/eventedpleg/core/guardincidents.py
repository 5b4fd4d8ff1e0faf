"""The guard's record on a Node, shared by the agent that writes it and whoever reads it. Pure.

- `eventedpleg.io/guard-incidents` (protocol.ANN_GUARD_INCIDENTS): the incidents the agent's guard met on
  the node, `[{"at": "<RFC 3339>", "kind": "wedge"}, ...]`, oldest first, parsed only here. It lives on
  the Node so that an agent restart does not forget how many fell in the window
  (AgentOptions.guard_window_seconds).
- The Node condition `EventedPLEGHealthy` (node-problem-detector style, in status.conditions): True while
  the kubelet syncs pods with the gate on; False with the reason of the last incident, or
  `RolledBackByGuard` once the guard took the gate off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from eventedpleg.protocol import format_time, parse_time

CONDITION_TYPE = "EventedPLEGHealthy"
MAX_KEPT = 16  # incidents kept in the annotation (the window needs at most guardIncidents of them)


class Kind(StrEnum):
    """What went wrong; the label of eventedpleg_agent_guard_incidents_total."""

    WEDGE = "wedge"  # kubelet <= 1.36: the sync loop stopped on a full PLEG channel
    EVENTS_LOST = "eventsLost"  # the CRI event stream fails and the kubelet did not fall back to relisting
    STATUS_LOST = "podStatusLost"  # kubelet <= 1.36: a live pod's status deleted, its sandbox made anew


class HealthReason(StrEnum):
    HEALTHY = "EventedPLEGHealthy"
    WEDGED = "PLEGWedged"
    STREAM_LOST = "EventStreamLost"
    STATUS_LOST = "PodStatusLost"
    ROLLED_BACK = "RolledBackByGuard"


CONDITION_REASON = {
    Kind.WEDGE: HealthReason.WEDGED,
    Kind.EVENTS_LOST: HealthReason.STREAM_LOST,
    Kind.STATUS_LOST: HealthReason.STATUS_LOST,
}


@dataclass(frozen=True)
class Incident:
    at: datetime  # the first sign
    kind: Kind


def parse(text: str | None) -> tuple[Incident, ...]:
    """The annotation's incidents, oldest first; an unreadable entry (or annotation) counts as none."""
    try:
        doc = json.loads(text or "[]")
    except ValueError:
        return ()
    found: list[Incident] = []
    for item in doc if isinstance(doc, list) else ():
        if not isinstance(item, dict):
            continue
        at = parse_time(str(item.get("at", "")))
        try:
            kind = Kind(str(item.get("kind", "")))
        except ValueError:
            continue
        if at is not None:
            found.append(Incident(at, kind))
    return tuple(sorted(found, key=lambda i: i.at))


def to_json(incidents: tuple[Incident, ...]) -> str:
    kept = incidents[-MAX_KEPT:]
    return json.dumps([{"at": format_time(i.at), "kind": i.kind.value} for i in kept], separators=(",", ":"))


def within(incidents: tuple[Incident, ...], now: datetime, window_seconds: int) -> tuple[Incident, ...]:
    """The incidents of the last `window_seconds`."""
    return tuple(i for i in incidents if now - i.at < timedelta(seconds=window_seconds))


def condition(healthy: bool, reason: str, message: str, now: datetime) -> dict[str, str]:
    """The condition as status.conditions holds it (lastHeartbeatTime too, as node-problem-detector writes
    it; the API server keeps a transition time only if told)."""
    stamp = format_time(now)
    return {
        "type": CONDITION_TYPE,
        "status": "True" if healthy else "False",
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }

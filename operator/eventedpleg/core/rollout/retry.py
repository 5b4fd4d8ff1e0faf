"""Retrying failed nodes without editing node annotations (pure).

`eventedpleg retry NODECONFIG [--node N]` writes one annotation on the NodeConfig, ANN_RETRY: a JSON map
node -> the state-since of the failure it retries. The planner retries a node of ours that is still in
that same failure (Failed, RolledBack or Skipped, same state-since): a cordon we left on is undone first,
then the node is taken again like any other. Taking it writes a new state-since, so the request no longer
matches: it acts once, whatever crashes or repeated passes happen, needs no clock shared with the CLI,
and the operator never writes it back. Entries that no longer match are dropped by the next request.

Drains that time out with onTimeout: Fail are also retried automatically, spec.drain.retries times with a
doubling back-off (a PodDisruptionBudget that blocked the eviction may allow it later): the count is
eventedpleg.io/drain-timeouts on the node, written with the Failed state, cleared once a drain finishes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime

from eventedpleg.core.rollout.snapshot import NodeView
from eventedpleg.protocol import NodeState, format_time, json_map, parse_time

RETRYABLE = frozenset({NodeState.FAILED, NodeState.ROLLED_BACK, NodeState.SKIPPED})


def parse(text: str | None) -> dict[str, datetime]:
    """The ANN_RETRY value; anything unreadable requests nothing."""
    parsed = {node: parse_time(str(since)) for node, since in json_map(text).items()}
    return {node: since for node, since in parsed.items() if since is not None}


def requested(node: NodeView, retry: Mapping[str, datetime]) -> bool:
    """The node is still in the very failure a retry was asked for."""
    since = retry.get(node.name)
    return since is not None and node.marks.state in RETRYABLE and node.marks.since == since


def retryable(node: NodeView, nodeconfig: str) -> bool:
    return node.marks.owner == nodeconfig and node.marks.state in RETRYABLE and node.marks.since is not None


def request(
    nodes: Iterable[NodeView],
    nodeconfig: str,
    existing: Mapping[str, datetime],
    only: frozenset[str] = frozenset(),
) -> dict[str, datetime]:
    """The new ANN_RETRY map: every retryable node of `nodeconfig` (or only those named), plus the earlier
    entries that still match."""
    views = list(nodes)
    keep = {n.name: n.marks.since for n in views if requested(n, existing) and n.marks.since is not None}
    new = {
        n.name: n.marks.since
        for n in views
        if retryable(n, nodeconfig) and (not only or n.name in only) and n.marks.since is not None
    }
    return {**keep, **new}


def way_out(node: NodeView, nodeconfig: str) -> str:
    """For a node `eventedpleg retry` cannot take again: what its state means and what ends it (one line).
    Every state a node can be left in has one (README, Troubleshooting)."""
    marks = node.marks
    if marks.owner != nodeconfig:
        owner = f"NodeConfig {marks.owner!r}" if marks.owner else "no NodeConfig"
        return (
            f"it is managed by {owner}; a node waiting, not cordoned, for its agent is taken by itself once "
            "the agent runs (eventedpleg preflight says why it has none)"
        )
    match marks.state:
        case NodeState.DRAINING:
            return "it is being drained: it finishes, or drain.timeoutSeconds gives it back (drain.onTimeout)"
        case NodeState.APPLYING | NodeState.VERIFYING:
            return (
                "its agent has it: it reports, or after verification.timeoutSeconds + 120 s the node is "
                "marked Failed (then retry it)"
            )
        case NodeState.DONE:
            return "it is done: nothing to retry"
        case NodeState.DRIFTED:
            return "the operator takes a Drifted node again by itself"
        case NodeState.PENDING | None:
            return "it has no state yet: it is waiting for its turn (eventedpleg status says why)"
        case NodeState.AWAITING_APPROVAL:  # status only, like Pending: named for completeness
            return "it waits for approval (spec.rollout.approval: Manual): `eventedpleg approve NODE`"
    return f"state {marks.state} cannot be retried"


def encode(retry: Mapping[str, datetime]) -> str:
    return json.dumps(
        {node: format_time(since) for node, since in sorted(retry.items())},
        separators=(",", ":"),
    )

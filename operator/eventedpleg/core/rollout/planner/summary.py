"""What a pass answers: the actions and the summary status, metrics and Events are built from."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from eventedpleg.core.rollout.actions import Action
from eventedpleg.core.rollout.planner.tally import Tally
from eventedpleg.models.nodeconfig import NodeCounts
from eventedpleg.protocol import Cause


@dataclass(frozen=True)
class NodeNote:
    """One node that needs attention (in progress, failed, skipped), for status.nodeStatuses."""

    name: str
    state: str
    reason: str
    since: datetime | None = None
    evidence: str = ""
    unschedulable: bool = False  # still cordoned: a Failed node that is holds capacity until someone acts
    stuck: bool = False  # left in service by a drain that could never finish (drain.onBlocked: Wait)
    cause: Cause | None = None  # the machine-readable kind of `reason`: what code branches on, never the text


@dataclass(frozen=True)
class OwnerConflict:
    """A selected node that an older NodeConfig manages."""

    node: str
    owner: str


@dataclass(frozen=True)
class HeldNode:
    """A node made unavailable outside this rollout (cordoned by someone else, or NotReady): it counts
    against maxUnavailable, as in MCO, so it can hold the whole budget."""

    name: str
    why: str  # "cordoned" | "NotReady"


@dataclass(frozen=True)
class Summary:
    tally: Tally  # every counter of the pass; `counts` is its published part
    want_hash: str
    complete: bool  # every eligible node is at the wanted hash and nothing is in progress
    halted: bool
    canary_failed: bool  # halted because a node failed before the canaries passed
    paused: bool
    window_closed: bool
    waiting: str  # why nothing new starts right now ("" when starting or done)
    conflicts: tuple[OwnerConflict, ...]
    attention: tuple[NodeNote, ...]
    attention_truncated: int
    failures: tuple[NodeNote, ...]
    finalized: bool  # deleting, and no node is ours any more: the finalizer may go
    next_wake: datetime | None
    # Waiting for capacity: the nodes made unavailable outside this rollout that use the budget, and
    # whether only they do (nothing of ours in flight): then nothing moves until someone acts.
    held_by: tuple[HeldNode, ...] = ()
    budget_stuck: bool = False
    retrying: tuple[NodeNote, ...] = ()  # timed-out drains waiting for their automatic retry
    # Every remaining node is blocked in a way waiting will not fix (drain.onBlocked: Wait on a drain that
    # could never finish, failures that need a person): those nodes; () while anything can still move.
    blocked: tuple[NodeNote, ...] = ()
    alerting: bool = False  # spec.rollout.alertGate holds new nodes (waiting says which alerts)
    awaiting_approval: tuple[str, ...] = ()  # nodes waiting for `eventedpleg approve` (approval: Manual)
    # spec.rollout.healthGate: halted because a node's pods were not Ready after it was given back, and the
    # nodes whose pods the next pass needs to know about (the caller reads them: Target.health).
    unhealthy: bool = False
    health_watch: tuple[str, ...] = ()

    @cached_property
    def counts(self) -> NodeCounts:
        """What status.nodes says (and the eventedpleg_nodes buckets)."""
        return self.tally.counts()


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...]
    summary: Summary


def int_or_percent(value: int | str, total: int) -> int:
    """Resolve an int-or-percent (rollout.maxUnavailable, rollout.maxFailedNodes) against the number of
    selected nodes; a percentage rounds down, min 1."""
    if isinstance(value, int):
        return value
    return max(1, math.floor(total * int(value.rstrip("%")) / 100))


def held_text(held: tuple[HeldNode, ...], limit: int = 5) -> str:
    """ "a (cordoned), b (NotReady) and 3 more"."""
    shown = ", ".join(f"{n.name} ({n.why})" for n in held[:limit])
    return shown + (f" and {len(held) - limit} more" if len(held) > limit else "")

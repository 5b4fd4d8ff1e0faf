"""The counters of a pass as one summable value: each node's decision carries its Tally, and a pass's
totals are their sum (PassMemo keeps the running sum, adding a node's new Tally and taking its old one
away). Add a counter here and a Count member for it, count it where a node's situation decides it
(decide.py and its modules), and every sum, the memo's running totals and -- when NodeCounts
(status.nodes, the CRD) has a field of that name -- status and metrics pick it up. A misspelt counter is
a type error."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, fields
from enum import StrEnum

from eventedpleg.models.nodeconfig import NodeCounts


@dataclass(frozen=True, slots=True)
class Tally:
    # Published as status.nodes (NodeCounts) and the eventedpleg_nodes buckets.
    total: int = 0  # selected
    eligible: int = 0  # selected, eligible, and ours to manage
    updated: int = 0  # at the wanted config
    updating: int = 0  # in progress
    failed: int = 0
    skipped: int = 0
    awaiting_approval: int = 0  # selected and eligible, waiting for `eventedpleg approve` (approval: Manual)
    # The pass's own.
    unavailable: int = 0  # selected or ours, and NotReady, cordoned or in our hands (uses the budget)
    in_flight: int = 0  # ours and not finished (our cordon still on counts)
    owned: int = 0  # marked as ours
    retry_pending: int = 0  # a timed-out drain waits for (or starts) its automatic retry
    no_agent: int = 0  # would be taken, but its agent shows no sign of life (core.hostcheck.absence)
    unhealthy: int = 0  # failed: its pods were not Ready after it was given back (rollout.healthGate)
    offered: int = 0  # may be taken now (a candidate of the gates)
    stuck: int = 0  # ... but left in service by a drain that could never finish (drain.onBlocked: Wait)
    # Skipped, by cause (planner.skips.SkippedFor; `skipped` counts them all, and the nodes not eligible).
    skipped_host_fault: int = 0
    skipped_host_refused: int = 0
    skipped_drain_blocked: int = 0
    skipped_drain_timeout: int = 0
    skipped_static_pods: int = 0
    skipped_not_in_place: int = 0
    skipped_not_eligible: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(*[getattr(self, n) + getattr(other, n) for n in NAMES])

    def __sub__(self, other: Tally) -> Tally:
        return Tally(*[getattr(self, n) - getattr(other, n) for n in NAMES])

    def counts(self) -> NodeCounts:
        return NodeCounts(**{n: getattr(self, n) for n in PUBLISHED})


class Count(StrEnum):
    """A Tally counter by name (tests/unit check these are exactly its fields)."""

    TOTAL = "total"
    ELIGIBLE = "eligible"
    UPDATED = "updated"
    UPDATING = "updating"
    FAILED = "failed"
    SKIPPED = "skipped"
    AWAITING_APPROVAL = "awaiting_approval"
    UNAVAILABLE = "unavailable"
    IN_FLIGHT = "in_flight"
    OWNED = "owned"
    RETRY_PENDING = "retry_pending"
    NO_AGENT = "no_agent"
    UNHEALTHY = "unhealthy"
    OFFERED = "offered"
    STUCK = "stuck"
    SKIPPED_HOST_FAULT = "skipped_host_fault"
    SKIPPED_HOST_REFUSED = "skipped_host_refused"
    SKIPPED_DRAIN_BLOCKED = "skipped_drain_blocked"
    SKIPPED_DRAIN_TIMEOUT = "skipped_drain_timeout"
    SKIPPED_STATIC_PODS = "skipped_static_pods"
    SKIPPED_NOT_IN_PLACE = "skipped_not_in_place"
    SKIPPED_NOT_ELIGIBLE = "skipped_not_eligible"


NAMES = tuple(f.name for f in fields(Tally))
PUBLISHED = tuple(n for n in NAMES if n in NodeCounts.model_fields)
EMPTY = Tally()


def tally_of(counted: tuple[Count, ...]) -> Tally:
    """The Tally with one for each name in `counted` (a name twice: two), shared: a fleet's nodes fall
    into a handful of kinds."""
    tally = _KINDS.get(counted)
    if tally is None:
        tally = _KINDS[counted] = Tally(**{count.value: n for count, n in Counter(counted).items()})
    return tally


_KINDS: dict[tuple[Count, ...], Tally] = {}  # a node counts each counter at most once or twice: few keys


def total(parts: list[Tally]) -> Tally:
    """The sum of many: each distinct Tally (see `tally_of`) times how often it occurs."""
    times = Counter(map(id, parts))
    kinds = {id(p): p for p in parts}
    return Tally(*[sum(getattr(kinds[k], n) * c for k, c in times.items()) for n in NAMES])

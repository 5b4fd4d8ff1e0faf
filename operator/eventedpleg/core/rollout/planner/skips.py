"""Why a node was skipped, as a kind the status counts by: read from the node's typed marks (the
operator's eventedpleg.io/cause, the agent's evidence result), never from the English reason. Pure."""

from __future__ import annotations

from enum import StrEnum

from eventedpleg.core.evidence import Evidence
from eventedpleg.core.rollout.planner.tally import Count, Tally
from eventedpleg.core.rollout.snapshot import NodeMarks
from eventedpleg.protocol import Cause


class SkippedFor(StrEnum):
    """The value is how people read it in the Available and Ready messages."""

    HOST_FAULT = "host fault"  # the agent's write or command failed before anything changed
    HOST_REFUSED = "host refused"  # the agent (or its host check) refused the change
    DRAIN_BLOCKED = "blocked drain"  # a drain that could never finish (drain.onBlocked: Skip)
    DRAIN_TIMEOUT = "drain timeout"  # drain.onTimeout: Skip
    STATIC_PODS = "static pods"  # includeControlPlane is off
    NOT_IN_PLACE = "not in place"  # drain.inPlace.onIneligible: Skip
    NO_AGENT = "no agent"  # not Skipped on the node: waits, not cordoned, for its agent
    NOT_ELIGIBLE = "not eligible"  # selected, but not this NodeConfig's to change


# The tally counter of each cause (NO_AGENT is the tally's own `no_agent`).
COUNTERS = {
    SkippedFor.HOST_FAULT: Count.SKIPPED_HOST_FAULT,
    SkippedFor.HOST_REFUSED: Count.SKIPPED_HOST_REFUSED,
    SkippedFor.DRAIN_BLOCKED: Count.SKIPPED_DRAIN_BLOCKED,
    SkippedFor.DRAIN_TIMEOUT: Count.SKIPPED_DRAIN_TIMEOUT,
    SkippedFor.STATIC_PODS: Count.SKIPPED_STATIC_PODS,
    SkippedFor.NOT_IN_PLACE: Count.SKIPPED_NOT_IN_PLACE,
    SkippedFor.NOT_ELIGIBLE: Count.SKIPPED_NOT_ELIGIBLE,
    SkippedFor.NO_AGENT: Count.NO_AGENT,
}
# Causes that leave an eligible node without Evented PLEG through a fault, not a choice of the spec: a
# NodeConfig whose eligible nodes all ended so is not Available.
FAULTS = frozenset(
    {
        SkippedFor.HOST_FAULT,
        SkippedFor.HOST_REFUSED,
        SkippedFor.DRAIN_BLOCKED,
        SkippedFor.DRAIN_TIMEOUT,
        SkippedFor.NO_AGENT,
    }
)
_OF_CAUSE = {
    Cause.DRAIN_BLOCKED: SkippedFor.DRAIN_BLOCKED,
    Cause.DRAIN_TIMEOUT: SkippedFor.DRAIN_TIMEOUT,
    Cause.HOST_REFUSED: SkippedFor.HOST_REFUSED,
    Cause.STATIC_PODS: SkippedFor.STATIC_PODS,
    Cause.NOT_IN_PLACE: SkippedFor.NOT_IN_PLACE,
    Cause.NO_AGENT: SkippedFor.NO_AGENT,
}
_OF_RESULT = {"fault": SkippedFor.HOST_FAULT, "refused": SkippedFor.HOST_REFUSED}


def skip_cause(marks: NodeMarks) -> SkippedFor | None:
    """Why a Skipped node was skipped (None: no typed cause on it)."""
    if marks.cause is not None:
        return _OF_CAUSE.get(marks.cause)
    found = Evidence.parse(marks.evidence)  # the agent's own Skipped report carries its result
    return None if found is None else _OF_RESULT.get(found.result or "")


def counted(tally: Tally) -> list[tuple[SkippedFor, int]]:
    """The skipped nodes by cause, in SkippedFor's order; the rest of `skipped` has no known cause."""
    found = [(cause, getattr(tally, name)) for cause, name in COUNTERS.items()]
    return [(cause, n) for cause, n in found if n]


def faulted(tally: Tally) -> int:
    """Eligible nodes skipped for a fault (FAULTS)."""
    return sum(n for cause, n in counted(tally) if cause in FAULTS)


def skipped_text(tally: Tally) -> str:
    """ ", 1 skipped: host fault", ", 3 skipped: 2 host fault, 1 no agent" ("" when none is skipped)."""
    total = tally.skipped + tally.no_agent
    if not total:
        return ""
    parts = counted(tally)
    other = total - sum(n for _, n in parts)
    if len(parts) == 1 and not other:
        return f", {total} skipped: {parts[0][0]}"
    named = [f"{n} {cause}" for cause, n in parts] + ([f"{other} other"] if other else [])
    return f", {total} skipped: {', '.join(named)}"

"""NodeConfig status from a plan summary: conditions (Available, Progressing, Degraded, Paused, and the
kstatus trio Ready, Reconciling, Stalled), counts and the bounded per-node list. Pure; lastTransitionTime
only moves when a condition's status changes, so an unchanged rollout produces an identical status and no
write.

kstatus (sigs.k8s.io/cli-utils/pkg/kstatus, which Flux uses; Argo CD and `kubectl wait` read Ready):
Reconciling and Stalled are abnormal-true, so True means "not done yet" and "needs a human"; at most one of
them is True, and Ready is True exactly when neither is and the rollout is complete without failures or
conflicts. Every condition carries the generation it describes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from eventedpleg.constants import ConditionType
from eventedpleg.core import evidence
from eventedpleg.core.rollout.planner import NodeNote, OwnerConflict, Summary, skips
from eventedpleg.models.nodeconfig import (
    MAX_NODE_STATUSES,
    Condition,
    ConditionStatus,
    NodeConfigStatus,
    NodeStatus,
)
from eventedpleg.protocol import ANN_OWNER, IN_PROGRESS
from eventedpleg.reasons import ConditionReason

MAX_MESSAGE_NODES = 5
DEFAULT_STALL_AFTER = timedelta(seconds=1800)  # spec.rollout.stallAfterSeconds' default


def _nodes_text(notes: Sequence[NodeNote]) -> str:
    shown = [f"{n.name}: {n.reason}" if n.reason else n.name for n in notes[:MAX_MESSAGE_NODES]]
    more = len(notes) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _awaiting_text(names: Sequence[str]) -> str:
    """The nodes waiting for `eventedpleg approve` (spec.rollout.approval: Manual)."""
    more = len(names) - MAX_MESSAGE_NODES
    shown = ", ".join(names[:MAX_MESSAGE_NODES]) + (f" and {more} more" if more > 0 else "")
    return f"awaiting approval (rollout.approval: Manual; `eventedpleg approve NODE`): {shown}"


def _conflicts_text(conflicts: Sequence[OwnerConflict]) -> str:
    """Each node once, grouped by the NodeConfig that manages it."""
    owners: dict[str, list[str]] = {}
    for conflict in conflicts:
        owners.setdefault(conflict.owner, []).append(conflict.node)
    parts = []
    for owner, names in sorted(owners.items()):
        shown = ", ".join(names[:MAX_MESSAGE_NODES])
        more = f" and {len(names) - MAX_MESSAGE_NODES} more" if len(names) > MAX_MESSAGE_NODES else ""
        parts.append(
            f"{len(names)} node(s) also selected by the older NodeConfig {owner!r}, which manages them: "
            f"{shown}{more}"
        )
    return "; ".join(parts) + " (narrow spec.nodeSelector so that NodeConfigs do not overlap)"


def deleting_text(summary: Summary) -> str:
    """What a NodeConfig being deleted still waits for: the nodes it holds, by name (one line); "" when
    nothing (the finalizer may go). Every node a deletion holds has a step of its own each pass (lettinggo.py:
    failed ones are given back as they are), so this names nodes, never an opaque wait."""
    held = [n for n in summary.attention if n.state in IN_PROGRESS]
    if held:
        return f"{len(held)} node(s) still in progress: {_nodes_text(held)}"
    if summary.waiting:
        return summary.waiting
    if summary.attention and not summary.finalized:
        return f"giving back: {_nodes_text(summary.attention)}"
    if not summary.finalized:
        owned = summary.tally.owned
        return f"{owned} node(s) still marked {ANN_OWNER} to be reverted or given back"
    return ""


def _blocked_text(summary: Summary) -> str:
    """Why no remaining node can move (Summary.blocked), naming them."""
    return (
        f"no remaining node can make progress until someone acts: {_nodes_text(summary.blocked)} "
        "(remove the blocker or change drain.onBlocked; `eventedpleg retry` takes failed nodes again)"
    )


@dataclass(frozen=True, slots=True)
class Cond:
    """One condition's value before its type, generation and timestamps are attached."""

    status: bool
    reason: ConditionReason
    message: str = ""


def _kstatus(
    avail: Cond,
    prog: Cond,
    deg: Cond,
    paused: Cond,
    *,
    deleting: bool,
    budget_stalled: str = "",
) -> tuple[Cond, Cond, Cond]:
    """Ready, Reconciling, Stalled from the other four. Stalled: degraded and nothing left that can move
    (halted, or the rest is done); Reconciling: any other state short of Ready, paused included (the spec
    is not yet realised, and no human action is needed beyond unpausing)."""
    if avail.status and not prog.status and not deg.status:
        ready = Cond(True, ConditionReason.ROLLOUT_COMPLETE, avail.message)
        return ready, Cond(False, ConditionReason.ROLLOUT_COMPLETE), Cond(False, ConditionReason.AS_EXPECTED)
    if deg.status and not prog.status and not deleting:
        return Cond(False, deg.reason, deg.message), Cond(False, deg.reason), deg
    if budget_stalled:  # only nodes made unavailable outside the rollout hold its budget, for too long
        reason = ConditionReason.BUDGET_HELD_BY_OTHER_NODES
        return Cond(False, reason, budget_stalled), Cond(False, reason), Cond(True, reason, budget_stalled)
    why = prog if prog.status or not paused.status else paused
    reason = ConditionReason.DELETING if deleting else why.reason
    message = avail.message if deleting else why.message or avail.message
    return Cond(False, reason, message), Cond(True, reason, message), Cond(False, ConditionReason.AS_EXPECTED)


def _paused(summary: Summary) -> Cond:
    """The Paused condition: the spec, the maintenance window, or firing alerts hold new nodes."""
    if summary.paused:
        return Cond(True, ConditionReason.SPEC_PAUSED, "spec.rollout.paused is true: no new node starts")
    if summary.window_closed:
        return Cond(
            True,
            ConditionReason.OUTSIDE_MAINTENANCE_WINDOW,
            summary.waiting or "outside the maintenance window",
        )
    if summary.alerting:
        return Cond(True, ConditionReason.ALERTS_FIRING, summary.waiting)
    return Cond(False, ConditionReason.RUNNING)


def conditions_for(
    summary: Summary, *, enabled: bool, deleting: bool, budget_stalled: str = ""
) -> dict[ConditionType, Cond]:
    """Each condition's value by its type, in the order status lists them, before timestamps are attached.
    `budget_stalled`: why the rollout is Stalled on a budget others hold ("" when it is not)."""
    counts = summary.counts
    what = "run Evented PLEG" if enabled else "have no Evented PLEG drop-ins of ours"
    done = f"{counts.updated} of {counts.eligible} eligible node(s) {what}{skips.skipped_text(summary.tally)}"
    avail = _available(summary, done, deleting=deleting)
    prog = _progressing(summary, deleting=deleting)
    deg = _degraded(summary, avail, deleting=deleting)
    paused = _paused(summary)
    ready, reconciling, stalled = _kstatus(
        avail, prog, deg, paused, deleting=deleting, budget_stalled=budget_stalled
    )
    return {
        ConditionType.READY: ready,
        ConditionType.AVAILABLE: avail,
        ConditionType.PROGRESSING: prog,
        ConditionType.DEGRADED: deg,
        ConditionType.PAUSED: paused,
        ConditionType.RECONCILING: reconciling,
        ConditionType.STALLED: stalled,
    }


def _available(summary: Summary, done: str, *, deleting: bool) -> Cond:
    """`done`: what was done, the skipped nodes by cause. Never True when every eligible node was
    skipped for a fault (a host fault, no agent, a blocked drain): nothing runs what was asked."""
    counts = summary.counts
    none_done = (
        counts.eligible > 0 and counts.updated == 0 and skips.faulted(summary.tally) >= counts.eligible
    )
    if summary.complete and counts.failed == 0 and not summary.conflicts and not deleting:
        if none_done:
            return Cond(False, ConditionReason.NODES_SKIPPED, done)
        return Cond(True, ConditionReason.ALL_NODES_UPDATED, done)
    if deleting:
        return Cond(False, ConditionReason.DELETING, "the NodeConfig is being deleted")
    if counts.failed:
        return Cond(
            False,
            ConditionReason.NODES_FAILED,
            f"{counts.failed} node(s) failed: {_nodes_text(summary.failures)}",
        )
    if summary.conflicts and summary.complete:
        return Cond(False, ConditionReason.CONFLICT, done)
    return Cond(False, ConditionReason.ROLLOUT_IN_PROGRESS, done)


def _progressing(summary: Summary, *, deleting: bool) -> Cond:
    counts = summary.counts
    in_progress = [n for n in summary.attention if n.state in IN_PROGRESS]
    if summary.halted:  # before `complete`: a halt can leave nothing to start, which is not "done"
        return Cond(False, ConditionReason.ROLLOUT_HALTED, summary.waiting)
    if summary.blocked and not deleting:
        return Cond(False, ConditionReason.NODES_BLOCKED, _blocked_text(summary))
    if summary.complete:
        return Cond(
            False, ConditionReason.ROLLOUT_COMPLETE, f"nothing left to do for config {summary.want_hash}"
        )
    if summary.paused and not in_progress:
        return Cond(False, ConditionReason.PAUSED, summary.waiting)
    if summary.window_closed and not in_progress:
        return Cond(False, ConditionReason.OUTSIDE_MAINTENANCE_WINDOW, summary.waiting)
    if summary.alerting and not in_progress:
        return Cond(False, ConditionReason.ALERTS_FIRING, summary.waiting)
    parts = [f"{counts.updated}/{counts.eligible} updated"]
    if in_progress:
        parts.append(f"in progress: {_nodes_text(in_progress)}")
    if summary.retrying:
        parts.append(f"drain timed out, automatic retry pending: {_nodes_text(summary.retrying)}")
    if summary.waiting:
        parts.append(summary.waiting)
    if summary.awaiting_approval:
        parts.append(_awaiting_text(summary.awaiting_approval))
    idle = ConditionReason.AWAITING_APPROVAL if summary.awaiting_approval else ConditionReason.WAITING
    return Cond(True, ConditionReason.NODES_UPDATING if in_progress else idle, "; ".join(parts))


def _degraded(summary: Summary, avail: Cond, *, deleting: bool) -> Cond:
    if summary.halted:
        reason = (
            ConditionReason.CANARY_FAILED
            if summary.canary_failed
            else ConditionReason.WORKLOAD_NOT_READY
            if summary.unhealthy
            else ConditionReason.ROLLOUT_HALTED
        )
        return Cond(True, reason, f"{summary.waiting}: {_nodes_text(summary.failures)}")
    if summary.blocked and not deleting:  # names the failed nodes among the blocked ones too
        return Cond(True, ConditionReason.NODES_BLOCKED, _blocked_text(summary))
    if summary.counts.failed:
        return Cond(True, ConditionReason.NODES_FAILED, _nodes_text(summary.failures))
    if summary.conflicts:
        return Cond(True, ConditionReason.CONFLICT, _conflicts_text(summary.conflicts))
    if avail.reason is ConditionReason.NODES_SKIPPED:
        return Cond(True, ConditionReason.NODES_SKIPPED, avail.message)
    return Cond(False, ConditionReason.AS_EXPECTED)


def budget_held(
    summary: Summary, *, deleting: bool, held_since: datetime | None, stall_after: timedelta, now: datetime
) -> tuple[datetime | None, str]:
    """(since when only nodes made unavailable outside the rollout hold its budget, and the Stalled
    message once that has lasted `stall_after`). The clock starts at the first pass that sees it and
    is kept in status, so an operator restart does not reset it; anything of ours in flight stops it."""
    if deleting or not summary.budget_stuck:
        return None, ""
    since = held_since or now
    if now - since < stall_after:
        return since, ""
    minutes = int((now - since).total_seconds() // 60)
    names = " ".join(n.name for n in summary.held_by[:MAX_MESSAGE_NODES])
    message = (
        f"{summary.waiting}, for {minutes} min; nothing moves until someone acts: uncordon them "
        f"(kubectl uncordon {names}) or make them Ready, or raise spec.rollout.maxUnavailable "
        "(nodes unavailable for any reason count against it, as in OpenShift's MCO)"
    )
    return since, message


def build_status(
    summary: Summary,
    *,
    enabled: bool,
    deleting: bool,
    generation: int,
    previous: Sequence[Condition],
    now: datetime,
    held_since: datetime | None = None,
    stall_after: timedelta = DEFAULT_STALL_AFTER,
) -> NodeConfigStatus:
    """`held_since`: budgetHeldSince of the previous status; `stall_after`: spec.rollout.stallAfterSeconds."""
    now = now.replace(microsecond=0)  # RFC 3339 seconds, as Kubernetes writes conditions
    held_from, budget_stalled = budget_held(
        summary, deleting=deleting, held_since=held_since, stall_after=stall_after, now=now
    )
    conditions = _stamped(
        conditions_for(summary, enabled=enabled, deleting=deleting, budget_stalled=budget_stalled),
        previous,
        generation,
        now,
    )
    notes = summary.attention[:MAX_NODE_STATUSES]
    return NodeConfigStatus(
        observed_generation=generation,
        rendered_hash=summary.want_hash,
        conditions=conditions,
        nodes=summary.counts,
        node_statuses=[
            NodeStatus(
                name=n.name,
                state=n.state,
                reason=n.reason,
                cause=n.cause,
                since=n.since,
                evidence=evidence.for_status(n.evidence),
            )
            for n in notes
        ],
        node_statuses_truncated=summary.attention_truncated + len(summary.attention) - len(notes),
        budget_held_by=[f"{n.name} ({n.why})" for n in summary.held_by[:MAX_NODE_STATUSES]],
        budget_held_since=held_from,
    )


def _stamped(
    values: Mapping[ConditionType, Cond],
    previous: Sequence[Condition],
    generation: int,
    now: datetime,
) -> list[Condition]:
    """Conditions with observedGeneration, each keeping its lastTransitionTime while its status holds."""
    before = {cond.type: cond for cond in previous}
    conditions = []
    for kind, cond in values.items():
        status = ConditionStatus.TRUE if cond.status else ConditionStatus.FALSE
        old = before.get(kind)
        since = old.last_transition_time if old is not None and old.status == status else now
        conditions.append(
            Condition(
                type=kind,
                status=status,
                reason=cond.reason,
                message=cond.message,
                observed_generation=generation,
                last_transition_time=since,
            )
        )
    return conditions


def first_status(
    previous: NodeConfigStatus, *, generation: int, now: datetime, waiting: str
) -> NodeConfigStatus | None:
    """What a NodeConfig says from the moment the operator sees it until the first pass can plan
    (`waiting`: why not yet): Reconciling for this generation, so kstatus reads InProgress, not Current.
    None when the status already describes this generation."""
    if previous.observed_generation == generation and previous.conditions:
        return None
    values = {
        ConditionType.READY: Cond(False, ConditionReason.RECONCILING, waiting),
        ConditionType.PROGRESSING: Cond(True, ConditionReason.RECONCILING, waiting),
        ConditionType.DEGRADED: Cond(False, ConditionReason.AS_EXPECTED),
        ConditionType.RECONCILING: Cond(True, ConditionReason.RECONCILING, waiting),
        ConditionType.STALLED: Cond(False, ConditionReason.AS_EXPECTED),
    }
    now = now.replace(microsecond=0)
    conditions = _stamped(values, previous.conditions, generation, now)
    return previous.model_copy(update={"conditions": conditions, "observed_generation": generation})


def invalid_status(
    previous: NodeConfigStatus, *, problems: str, generation: int, now: datetime
) -> NodeConfigStatus:
    """A spec the operator cannot act on (it passed admission, so the CRD on the server and this
    operator disagree): Stalled and Degraded, not Ready, with the problems in one line. The node counts
    and list stay as they were: nothing is changed on a node until the spec is fixed."""
    invalid = ConditionReason.INVALID_SPEC
    values = {
        ConditionType.READY: Cond(False, invalid, problems),
        ConditionType.AVAILABLE: Cond(False, invalid, "the spec is invalid: " + problems),
        ConditionType.PROGRESSING: Cond(False, invalid, "nothing moves until the spec is fixed"),
        ConditionType.DEGRADED: Cond(True, invalid, problems),
        ConditionType.RECONCILING: Cond(False, invalid),
        ConditionType.STALLED: Cond(True, invalid, problems),
    }
    now = now.replace(microsecond=0)
    conditions = _stamped(values, previous.conditions, generation, now)
    return previous.model_copy(update={"conditions": conditions, "observed_generation": generation})

"""Draining a node we cordoned (the Drain step, and the Cordon step's first attempt): another eviction
pass, the apply request once it is empty, and the ways it ends without a change -- static pods (Skipped),
a drain that can never finish (spec.drain.onBlocked), the deadline (spec.drain.onTimeout). Pure."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass

from eventedpleg import protocol
from eventedpleg.core.rollout.actions import Drain
from eventedpleg.core.rollout.drain.pods import NEEDS_ATTENTION
from eventedpleg.core.rollout.drain.taints import NodeTaints, Taint
from eventedpleg.core.rollout.drain.takeverdict import (
    FORCE_DELETE_DISABLED,
    forced_at_timeout,
    never_finishes,
)
from eventedpleg.core.rollout.steps.marks import apply_request, give_back, state_marks, untaint
from eventedpleg.core.rollout.steps.requests import (
    Answer,
    AttemptDrain,
    Clock,
    Emit,
    FindMirrorPods,
    Marks,
    Request,
    Step,
    StepEnd,
    Write,
    as_drain_result,
    as_mirror_pods,
)
from eventedpleg.models.nodeconfig import OnDrainBlocked, OnDrainTimeout
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason

MAX_NAMED_STATIC_PODS = 3


@dataclass(frozen=True)
class Taken:
    """A node under our cordon, as every way out of its drain needs it."""

    hash: str
    agent_options: str
    include_control_plane: bool
    was_unschedulable: bool  # its cordon from before the rollout, restored when it is given back
    hold: tuple[str, ...]  # the autoscaler keys our cordon added
    taints: NodeTaints
    on_blocked: OnDrainBlocked


def drain(action: Drain, clock: Clock, allow_force_delete: bool) -> Step:
    """Another drain attempt on a node in Draining; at the deadline, `on_timeout` decides."""
    if not action.cordoned:
        return (yield from _uncordoned_by_others(action, clock))
    node = Taken(
        action.hash,
        action.agent_options,
        include_control_plane=action.include_control_plane,
        was_unschedulable=action.was_unschedulable,
        hold=action.autoscaler_hold,
        taints=action.taints,
        on_blocked=action.drain.on_blocked,
    )
    skipped = yield from skip_static_pods_after_cordon(node, clock)
    if skipped is not None:  # the Cordon step that took the node ended before its own look
        return skipped
    policy = action.drain
    force_asked = action.deadline_reached and policy.on_timeout is OnDrainTimeout.FORCE_DELETE
    force = force_asked and allow_force_delete
    result = as_drain_result((yield AttemptDrain(force_delete=force)))
    if result.done:
        return (yield from request_apply(node.hash, node.agent_options, "drained", clock))
    # Waiting for the timeout gains nothing: give the node back now (at the timeout, onTimeout decides,
    # but a forced delete leaves the pods that asked not to be disrupted: they give the node back too).
    forced = forced_at_timeout(policy, allow_force_delete)
    never = never_finishes(result, forced=forced) if forced or not action.deadline_reached else ""
    if never:
        return (yield from blocked_after_cordon(node, never, clock))
    if action.deadline_reached and not force:
        return (yield from _timed_out(action, result.waiting, force_asked, clock))
    if result.waiting != action.reason:
        # Name what blocks the drain on the node (and so in status); written only when it changes.
        yield Write({protocol.ANN_REASON: result.waiting})
        if result.blockers & NEEDS_ATTENTION:
            yield Emit("Warning", EventReason.DRAIN_BLOCKED, result.waiting)
    return StepEnd(drain_retry=True)


def request_apply(
    node_hash: str, options: str, what: str, clock: Clock
) -> Generator[Request, Answer, StepEnd]:
    """The node is empty: the agent is asked to apply `node_hash`."""
    yield Write(apply_request(node_hash, options, clock))
    yield Emit("Normal", EventReason.DRAINED, f"{what}; agent asked to apply config {node_hash}")
    return StepEnd(NodeState.APPLYING)


def skip_static_pods_after_cordon(node: Taken, clock: Clock) -> Generator[Request, Answer, StepEnd | None]:
    """Static pods on a node we cordoned (since the survey, or the Cordon step ended before its look): it
    is given back and Skipped. None when there are none, or includeControlPlane opts in."""
    mirror = as_mirror_pods((yield FindMirrorPods()))
    if not mirror or node.include_control_plane:
        return None
    return (
        yield from skip_static_pods(
            node.hash,
            mirror,
            clock,
            marks=give_back(node.hold, node.taints),
            unschedulable=node.was_unschedulable,
            taints=node.taints.without_ours(),
        )
    )


def skip_static_pods(
    node_hash: str,
    mirror: tuple[str, ...],
    clock: Clock,
    *,
    marks: Mapping[str, str | None],
    unschedulable: bool | None,
    taints: tuple[Taint, ...] | None,
) -> Generator[Request, Answer, StepEnd]:
    """Mark the node Skipped, with `marks` and `taints` (giving the node back when we took it):
    EventedPLEG duplicates static pods' containers."""
    reason = (
        f"runs static pods ({', '.join(mirror[:MAX_NAMED_STATIC_PODS])}): EventedPLEG starts duplicate "
        "containers for them (k8s#121349, #123087); set includeControlPlane: true to opt in"
    )
    yield Write(
        {
            **marks,
            protocol.ANN_DESIRED: node_hash,
            **state_marks(NodeState.SKIPPED, reason, clock, protocol.Cause.STATIC_PODS),
        },
        unschedulable,
        taints,
    )
    yield Emit("Warning", EventReason.SKIPPED, reason)
    return StepEnd(NodeState.SKIPPED)


def blocked_after_cordon(node: Taken, never: str, clock: Clock) -> Step:
    """A drain found to be one that can never finish once the node is ours: given back at once."""
    return (
        yield from drain_blocked(
            node.on_blocked,
            never,
            clock,
            node_hash=node.hash,
            marks=give_back(node.hold, node.taints),
            taken=True,
            unschedulable=node.was_unschedulable,
            taints=node.taints,
        )
    )


def drain_blocked(
    policy: OnDrainBlocked,
    never: str,
    clock: Clock,
    *,
    node_hash: str,
    marks: Marks,
    taken: bool,
    unschedulable: bool | None,
    taints: NodeTaints,
    was_blocked: str = "",
    hint: str = "",
) -> Generator[Request, Answer, StepEnd]:
    """A drain that can never finish as things are (spec.drain.onBlocked): the node is not taken, or, if
    `taken`, given back at once with `marks` (our cordon off) -- never held until the drain timeout for
    nothing. Before the cordon `marks` only claim the node (owner). Either way our taint goes (`taints`)."""
    given = "given back" if taken else "not cordoned"
    off = taints.without_ours()
    marks = {**marks, **untaint(taints)}
    if policy is OnDrainBlocked.WAIT:  # in service, as if never taken: taken once the blocker is gone
        if taken or never != was_blocked or taints.marked:  # the Event once per blocker, not per look
            gone: Marks = (
                {protocol.ANN_STATE: None, protocol.ANN_STATE_SINCE: None, protocol.ANN_REASON: None}
                if taken
                else {}
            )
            blocked = {protocol.ANN_BLOCKED: never, protocol.ANN_CAUSE: protocol.Cause.DRAIN_BLOCKED.value}
            yield Write({**marks, **gone, **blocked}, unschedulable, off)
            yield Emit(
                "Warning", EventReason.DRAIN_BLOCKED, f"{given}, waiting (drain.onBlocked: Wait): {never}"
            )
        return StepEnd(drain_retry=True)
    state = NodeState.SKIPPED if policy is OnDrainBlocked.SKIP else NodeState.FAILED
    reason = f"{given}: the drain could never finish: {never} (drain.onBlocked: {policy}){hint}"
    yield Write(
        {
            **marks,
            protocol.ANN_DESIRED: node_hash,
            protocol.ANN_BLOCKED: None,
            **state_marks(state, reason, clock, protocol.Cause.DRAIN_BLOCKED),
        },
        unschedulable,
        off,
    )
    yield Emit("Warning", EventReason.DRAIN_BLOCKED, reason)
    return StepEnd(state)


def _uncordoned_by_others(action: Drain, clock: Clock) -> Step:
    """Someone else uncordoned the node mid-drain (another tool, a person): never ask the agent to change
    a node that takes pods again (the check MCO added in 2026). Their uncordon stands; ours is over."""
    reason = "uncordoned by someone else while we drained it: not changed; `eventedpleg retry` takes it again"
    marks = {**give_back(action.autoscaler_hold, action.taints), protocol.ANN_DESIRED: action.hash}
    yield Write(
        {**marks, **state_marks(NodeState.FAILED, reason, clock)}, taints=action.taints.without_ours()
    )
    yield Emit("Warning", EventReason.UNCORDONED_BY_OTHERS, reason)
    return StepEnd(NodeState.FAILED)


def _timed_out(action: Drain, waiting: str, force_asked: bool, clock: Clock) -> Step:
    """The deadline without a forced delete: Skipped or Failed as on_timeout says, and given back -- a
    timed-out drain never leaves our cordon behind. A Failed one is retried as drain.retries says."""
    policy = action.drain
    state = NodeState.SKIPPED if policy.on_timeout is OnDrainTimeout.SKIP else NodeState.FAILED
    reason = f"drain did not finish within {policy.timeout_seconds}s: {waiting}"
    if force_asked:  # ForceDelete without `pods delete`: say so instead of a 403 on every retry
        reason += f"; {FORCE_DELETE_DISABLED}"
    timeouts: Marks = {}
    if state is NodeState.FAILED and not force_asked:  # a missing grant does not clear by itself
        count = action.drain_timeouts + 1
        timeouts[protocol.ANN_DRAIN_TIMEOUTS] = str(count)
        if policy.retried(count):  # what clears by itself (a PDB) gets another chance
            wait = policy.backoff(count)
            reason += f"; automatic retry {count} of {policy.retries} in {int(wait.total_seconds())}s"
    marks = {
        protocol.ANN_DESIRED: action.hash,
        **give_back(action.autoscaler_hold, action.taints),
        **timeouts,
        **state_marks(state, reason, clock, protocol.Cause.DRAIN_TIMEOUT),
    }
    yield Write(marks, action.was_unschedulable, action.taints.without_ours())
    yield Emit("Warning", EventReason.DRAIN_TIMEOUT, reason)
    return StepEnd(state)

"""How a Cordon or Drain step ends when the node must not be changed as things are: static pods on it
(Skipped), or a drain that can never finish (spec.drain.onBlocked). Pure."""

from __future__ import annotations

from collections.abc import Generator, Mapping

from eventedpleg import protocol
from eventedpleg.core.rollout.drain.taints import NodeTaints, Taint
from eventedpleg.core.rollout.steps.marks import state_marks, untaint
from eventedpleg.core.rollout.steps.requests import Answer, Clock, Emit, Marks, Request, StepEnd, Write
from eventedpleg.models.nodeconfig import OnDrainBlocked
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason

MAX_NAMED_STATIC_PODS = 3


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

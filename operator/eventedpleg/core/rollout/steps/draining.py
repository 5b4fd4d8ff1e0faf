"""Draining a node already taken (the Drain step): another attempt, and at the deadline what
spec.drain.onTimeout says. Pure."""

from __future__ import annotations

from eventedpleg import protocol
from eventedpleg.core.rollout.actions import Drain
from eventedpleg.core.rollout.drain.pods import NEEDS_ATTENTION
from eventedpleg.core.rollout.drain.takeverdict import (
    FORCE_DELETE_DISABLED,
    forced_at_timeout,
    never_finishes,
)
from eventedpleg.core.rollout.steps.agent import request_apply
from eventedpleg.core.rollout.steps.blocked import drain_blocked, skip_static_pods
from eventedpleg.core.rollout.steps.marks import give_back, state_marks
from eventedpleg.core.rollout.steps.requests import (
    AttemptDrain,
    Clock,
    Emit,
    FindMirrorPods,
    Step,
    StepEnd,
    Write,
    as_drain_result,
    as_mirror_pods,
)
from eventedpleg.models.nodeconfig import OnDrainTimeout
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason


def drain(action: Drain, clock: Clock, allow_force_delete: bool) -> Step:
    """Another drain attempt on a node in Draining; at the deadline, `on_timeout` decides."""
    if not action.cordoned:
        # Someone else uncordoned it mid-drain (another tool, a person): never ask the agent to change a
        # node that takes pods again (the check MCO added in 2026). Their uncordon stands; ours is over.
        reason = (
            "uncordoned by someone else while we drained it: not changed; `eventedpleg retry` takes it again"
        )
        marks = {**give_back(action.autoscaler_hold, action.taints), protocol.ANN_DESIRED: action.hash}
        yield Write(
            {**marks, **state_marks(NodeState.FAILED, reason, clock)}, taints=action.taints.without_ours()
        )
        yield Emit("Warning", EventReason.UNCORDONED_BY_OTHERS, reason)
        return StepEnd(NodeState.FAILED)
    mirror = as_mirror_pods((yield FindMirrorPods()))
    if mirror and not action.include_control_plane:
        # The Cordon step that took the node ended before its static-pod check (conflict or crash).
        back = give_back(action.autoscaler_hold, action.taints)
        return (
            yield from skip_static_pods(
                action.hash,
                mirror,
                clock,
                marks=back,
                unschedulable=action.was_unschedulable,
                taints=action.taints.without_ours(),
            )
        )
    policy = action.drain
    force_asked = action.deadline_reached and policy.on_timeout is OnDrainTimeout.FORCE_DELETE
    force = force_asked and allow_force_delete
    result = as_drain_result((yield AttemptDrain(force_delete=force)))
    if result.done:
        return (yield from request_apply(action.hash, action.agent_options, "drained", clock))
    # Waiting for the timeout gains nothing: give the node back now (at the timeout, onTimeout decides,
    # but a forced delete leaves the pods that asked not to be disrupted: they give the node back too).
    forced = forced_at_timeout(policy, allow_force_delete)
    never = never_finishes(result, forced=forced) if forced or not action.deadline_reached else ""
    if never:
        return (
            yield from drain_blocked(
                policy.on_blocked,
                never,
                clock,
                node_hash=action.hash,
                marks=give_back(action.autoscaler_hold, action.taints),
                taken=True,
                unschedulable=action.was_unschedulable,
                taints=action.taints,
            )
        )
    if action.deadline_reached and not force:
        state = NodeState.SKIPPED if policy.on_timeout is OnDrainTimeout.SKIP else NodeState.FAILED
        reason = f"drain did not finish within {policy.timeout_seconds}s: {result.waiting}"
        if force_asked:  # ForceDelete without `pods delete`: say so instead of a 403 on every retry
            reason += f"; {FORCE_DELETE_DISABLED}"
        timeouts: dict[str, str | None] = {}
        if state is NodeState.FAILED and not force_asked:  # a missing grant does not clear by itself
            count = action.drain_timeouts + 1
            timeouts[protocol.ANN_DRAIN_TIMEOUTS] = str(count)
            if policy.retried(count):  # what clears by itself (a PDB) gets another chance
                wait = policy.backoff(count)
                reason += f"; automatic retry {count} of {policy.retries} in {int(wait.total_seconds())}s"
        # Give the node back: a timed-out drain must never leave our cordon behind.
        marks = {
            protocol.ANN_DESIRED: action.hash,
            **give_back(action.autoscaler_hold, action.taints),
            **timeouts,
            **state_marks(state, reason, clock, protocol.Cause.DRAIN_TIMEOUT),
        }
        yield Write(marks, action.was_unschedulable, action.taints.without_ours())
        yield Emit("Warning", EventReason.DRAIN_TIMEOUT, reason)
        return StepEnd(state)
    if result.waiting != action.reason:
        # Name what blocks the drain on the node (and so in status); written only when it changes.
        yield Write({protocol.ANN_REASON: result.waiting})
        if result.blockers & NEEDS_ATTENTION:
            yield Emit("Warning", EventReason.DRAIN_BLOCKED, result.waiting)
    return StepEnd(drain_retry=True)

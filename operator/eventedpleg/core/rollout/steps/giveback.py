"""Giving a node back: uncordoned after its change (or without it, when its agent is gone), marked Failed,
or released by its NodeConfig. Pure."""

from __future__ import annotations

from eventedpleg import protocol
from eventedpleg.core.rollout.actions import MarkFailed, Release, Uncordon
from eventedpleg.core.rollout.steps.marks import give_back, state_marks
from eventedpleg.core.rollout.steps.requests import Clock, Emit, Marks, Step, StepEnd, Write
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason


def uncordon(action: Uncordon) -> Step:
    gone: Marks = {}
    if action.agent_gone:  # nothing was asked of the agent: the node waits in service for it
        gone = {protocol.ANN_STATE: None, protocol.ANN_STATE_SINCE: None, protocol.ANN_REASON: None}
    yield Write(
        {**give_back(action.autoscaler_hold, action.taints), **gone},
        action.was_unschedulable,
        action.taints.without_ours(),
    )
    if action.agent_gone:
        yield Emit("Warning", EventReason.AGENT_GONE, f"given back, not changed: {action.agent_gone}")
    elif action.was_unschedulable:  # never say Uncordoned about a node that stays cordoned
        yield Emit(
            "Normal",
            EventReason.KEPT_CORDONED,
            "node given back, still cordoned: it was cordoned before the rollout",
        )
    else:
        yield Emit("Normal", EventReason.UNCORDONED, "node given back")
    return StepEnd()


def mark_failed(action: MarkFailed, clock: Clock) -> Step:
    yield Write(state_marks(NodeState.FAILED, action.reason, clock, action.cause))
    yield Emit("Warning", EventReason.NODE_FAILED, action.reason)
    return StepEnd(NodeState.FAILED)


def release_write(action: Release, *, keep_host_check: bool = True) -> Write:
    """The one write that lets go of a node. The agent's host check stays by default: it is about the
    host, not about this NodeConfig, and the next NodeConfig to select the node needs it before it may
    take the node (`eventedpleg release-nodes`, with no operator left, drops it too)."""
    kept = {protocol.ANN_CURRENT} if action.keep_current else set()
    if keep_host_check:
        kept.add(protocol.ANN_HOST_CHECK)
    drop: dict[str, str | None] = {key: None for key in protocol.NODE_ANNOTATIONS if key not in kept}
    drop.update(dict.fromkeys(action.autoscaler_hold))
    unschedulable = action.was_unschedulable if action.uncordon else None
    return Write(drop, unschedulable, action.taints.without_ours())


def release(action: Release, nodeconfig: str) -> Step:
    yield release_write(action)
    undone = ""
    if action.uncordon:  # say what happened to the cordon: undone, or the one from before kept
        undone = "; still cordoned: it was before the rollout" if action.was_unschedulable else "; uncordoned"
    if action.left:
        yield Emit(
            "Warning",
            EventReason.RELEASED_AS_IS,
            f"no longer managed by NodeConfig {nodeconfig}{undone}; {action.left}",
        )
    else:
        yield Emit("Normal", EventReason.RELEASED, f"no longer managed by NodeConfig {nodeconfig}{undone}")
    return StepEnd()

"""The annotations the steps share: a node state with its time and reason, the apply request, the
autoscaler keys our cordon holds, and what giving a node back drops. Pure."""

from __future__ import annotations

from eventedpleg import protocol
from eventedpleg.core.rollout.drain.taints import NodeTaints
from eventedpleg.core.rollout.steps.requests import Clock, Marks
from eventedpleg.protocol import NodeState, format_time


def state_marks(
    state: NodeState, reason: str, clock: Clock, cause: protocol.Cause | None = None
) -> dict[str, str | None]:
    """A state the operator writes, with the kind of its reason (ANN_CAUSE; removed when it has none)."""
    return {
        protocol.ANN_STATE: state.value,
        protocol.ANN_STATE_SINCE: format_time(clock()),
        protocol.ANN_REASON: reason,
        protocol.ANN_CAUSE: None if cause is None else cause.value,
    }


def apply_request(node_hash: str, options: str, clock: Clock) -> Marks:
    """The marks that ask the agent to apply `node_hash`."""
    return {
        protocol.ANN_DESIRED: node_hash,
        protocol.ANN_AGENT_OPTIONS: options,
        protocol.ANN_DRAIN_TIMEOUTS: None,  # drained: a later timeout starts counting again
        **state_marks(NodeState.APPLYING, "drained; waiting for the agent", clock),
    }


def autoscaler_hold(user: frozenset[str]) -> tuple[tuple[str, ...], dict[str, str | None]]:
    """The autoscaler keys our cordon adds (every known one the user did not set) and the marks that add
    them, in the cordon's own patch: a node is never cordoned by us without them, and never holds them
    without our cordon (no write is added, and no crash can split the two)."""
    hold = tuple(key for key in protocol.AUTOSCALER_ANNOTATIONS if key not in user)
    marks: dict[str, str | None] = dict.fromkeys(hold, protocol.AUTOSCALER_VALUE)
    marks[protocol.ANN_AUTOSCALER_HOLD] = ",".join(hold) if hold else None
    return hold, marks


def give_back(hold: tuple[str, ...], taints: NodeTaints) -> dict[str, str | None]:
    """Drop our cordon mark, exactly the autoscaler keys our cordon added (the user's stay) and our taint's
    marks (the Write takes the taint itself off: `taints.without_ours()`)."""
    return {
        protocol.ANN_CORDONED_BY_US: None,
        protocol.ANN_AUTOSCALER_HOLD: None,
        **dict.fromkeys(hold),
        **untaint(taints),
    }


def untaint(taints: NodeTaints) -> Marks:
    """The marks of our taint (drain.taintBeforeCordon) removed, when there are any."""
    return {protocol.ANN_TAINTED_SINCE: None, protocol.ANN_TAINT: None} if taints.marked else {}

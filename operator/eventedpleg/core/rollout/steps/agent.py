"""The steps that ask the agent: apply a config (once the node is drained, or in place), new agent options,
and a person's approval first (spec.rollout.approval: Manual). Pure."""

from __future__ import annotations

from collections.abc import Generator

from eventedpleg import protocol
from eventedpleg.core.rollout.actions import AskApproval, SetAgentOptions, approval_text
from eventedpleg.core.rollout.steps.marks import state_marks
from eventedpleg.core.rollout.steps.requests import Answer, Clock, Emit, Marks, Request, Step, StepEnd, Write
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason


def ask_approval(action: AskApproval) -> Step:
    """The node waits, in service, for a person (spec.rollout.approval: Manual): said once per config."""
    yield Write({protocol.ANN_AWAITING_APPROVAL: action.hash})
    yield Emit("Normal", EventReason.AWAITING_APPROVAL, approval_text(action.node, action.hash))
    return StepEnd()


def apply_request(node_hash: str, options: str, clock: Clock) -> Marks:
    """The marks that ask the agent to apply `node_hash`."""
    return {
        protocol.ANN_DESIRED: node_hash,
        protocol.ANN_AGENT_OPTIONS: options,
        protocol.ANN_DRAIN_TIMEOUTS: None,  # drained: a later timeout starts counting again
        **state_marks(NodeState.APPLYING, "drained; waiting for the agent", clock),
    }


def request_apply(
    node_hash: str, options: str, what: str, clock: Clock
) -> Generator[Request, Answer, StepEnd]:
    yield Write(apply_request(node_hash, options, clock))
    yield Emit("Normal", EventReason.DRAINED, f"{what}; agent asked to apply config {node_hash}")
    return StepEnd(NodeState.APPLYING)


def set_agent_options(action: SetAgentOptions) -> Step:
    yield Write({protocol.ANN_AGENT_OPTIONS: action.agent_options})
    return StepEnd()

"""The step policy: what one planner action writes on its node and which Event it records (`step`). Pure.

`take` cordons (or taints, or asks in place), `draining` drains a node we cordoned, `giveback` lets it
go; `marks` holds the annotations they share, `requests` what a step may ask for and its interpreter."""

from __future__ import annotations

from eventedpleg import protocol
from eventedpleg.core.rollout.actions import (
    Action,
    AskApproval,
    Cordon,
    Drain,
    MarkFailed,
    Release,
    SetAgentOptions,
    Uncordon,
    approval_text,
)
from eventedpleg.core.rollout.steps.draining import drain
from eventedpleg.core.rollout.steps.giveback import mark_failed, release, uncordon
from eventedpleg.core.rollout.steps.requests import (
    Answer,
    Answers,
    AttemptDrain,
    Clock,
    Emit,
    FindMirrorPods,
    Request,
    Step,
    StepEnd,
    SurveyPods,
    Write,
    run,
)
from eventedpleg.core.rollout.steps.take import cordon
from eventedpleg.reasons import EventReason

__all__ = [
    "Answer",
    "Answers",
    "AttemptDrain",
    "Clock",
    "Emit",
    "FindMirrorPods",
    "Request",
    "Step",
    "StepEnd",
    "SurveyPods",
    "Write",
    "run",
    "step",
]


def step(action: Action, *, clock: Clock, nodeconfig: str, allow_force_delete: bool = False) -> Step:
    """The rules for `action`; `clock` is read at each write (state-since), `nodeconfig` names the owner,
    `allow_force_delete`: this installation grants `pods delete` (chart value drain.allowForceDelete)."""
    match action:
        case Cordon():
            return cordon(action, clock, allow_force_delete)
        case Drain():
            return drain(action, clock, allow_force_delete)
        case Uncordon():
            return uncordon(action)
        case MarkFailed():
            return mark_failed(action, clock)
        case Release():
            return release(action, nodeconfig)
        case SetAgentOptions():
            return set_agent_options(action)
        case AskApproval():
            return ask_approval(action)
    raise AssertionError(f"unknown action {action!r}")


def ask_approval(action: AskApproval) -> Step:
    """The node waits, in service, for a person (spec.rollout.approval: Manual): said once per config."""
    yield Write({protocol.ANN_AWAITING_APPROVAL: action.hash})
    yield Emit("Normal", EventReason.AWAITING_APPROVAL, approval_text(action.node, action.hash))
    return StepEnd()


def set_agent_options(action: SetAgentOptions) -> Step:
    yield Write({protocol.ANN_AGENT_OPTIONS: action.agent_options})
    return StepEnd()

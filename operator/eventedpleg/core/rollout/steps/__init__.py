"""The step policy: what one planner action writes on its node and which Event it records (`step`). Pure."""

from __future__ import annotations

from eventedpleg.core.rollout.actions import (
    Action,
    AskApproval,
    Cordon,
    Drain,
    MarkFailed,
    Release,
    SetAgentOptions,
    Uncordon,
)
from eventedpleg.core.rollout.steps.agent import ask_approval, set_agent_options
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

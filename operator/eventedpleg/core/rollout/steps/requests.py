"""What a step asks for (the effect requests), how it ends, and `run`, the interpreter that carries it
out. Pure.

A step is a generator. It yields requests -- `Write` (one conditional merge patch of the node),
`SurveyPods`, `FindMirrorPods`, `AttemptDrain`, `Emit` (a Node Event) -- receives each answer, and returns
how it ended (`StepEnd`). `run` carries a step out against an `Answers`: the executor (controller.executor)
answers from the API, the lab's world model (eventedpleg_lab.sim.rolloutworld) from a model cluster; both run
these rules through the same interpreter, nobody copies them.

A step is not atomic: each Write is its own request, and a conflict (409) or a crash between two of them
ends the step with only the earlier writes done. Every prefix is a state the planner resumes from (a
cordoned node in Draining with no drain attempt yet is drained on the next pass), and the policy re-checks
what a missing later write would have decided (static pods are looked for on every drain attempt).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from eventedpleg.core.rollout.drain.pods import DrainResult
from eventedpleg.core.rollout.drain.survey import PodSurvey
from eventedpleg.core.rollout.drain.taints import Taint
from eventedpleg.protocol import NodeState
from eventedpleg.reasons import EventReason


@dataclass(frozen=True)
class Write:
    """One merge patch of the node, conditional on the resourceVersion of the step's previous write."""

    annotations: Mapping[str, str | None]  # None removes the key
    unschedulable: bool | None = None  # None leaves spec.unschedulable alone
    taints: tuple[Taint, ...] | None = None  # the whole of spec.taints; None leaves them alone


@dataclass(frozen=True)
class SurveyPods:
    """Answer: a PodSurvey of the node's pods as they are now (a list; nothing is evicted)."""


@dataclass(frozen=True)
class FindMirrorPods:
    """Answer: the node's static (mirror) pods as "namespace/name" strings."""


@dataclass(frozen=True)
class AttemptDrain:
    """Answer: a DrainResult. One pass of evictions (or deletes when `force_delete`); never waits."""

    force_delete: bool = False


@dataclass(frozen=True)
class Emit:
    """A Node Event."""

    kind: Literal["Normal", "Warning"]
    reason: EventReason
    message: str


Request = Write | SurveyPods | FindMirrorPods | AttemptDrain | Emit
Answer = tuple[str, ...] | PodSurvey | DrainResult | None


@dataclass(frozen=True)
class StepEnd:
    transition: NodeState | None = None  # the node state this step wrote last, if any
    drain_retry: bool = False  # pods are still there: the next pass tries again


Step = Generator[Request, Answer, StepEnd]


class Answers(Protocol):
    """Who answers a step's requests. An exception from any of them ends the step there (a 409, a crash):
    only the earlier writes are done."""

    def write(self, request: Write) -> None: ...

    def survey_pods(self) -> PodSurvey: ...

    def find_mirror_pods(self) -> tuple[str, ...]: ...

    def attempt_drain(self, request: AttemptDrain) -> DrainResult: ...

    def emit(self, request: Emit) -> None: ...


def run(step: Step, answers: Answers) -> StepEnd:
    """The step interpreter: each request to `answers`, each answer back into the step, until it ends."""
    answer: Answer = None
    try:
        while True:
            request = step.send(answer)
            answer = None
            match request:
                case Write():
                    answers.write(request)
                case SurveyPods():
                    answer = answers.survey_pods()
                case FindMirrorPods():
                    answer = answers.find_mirror_pods()
                case AttemptDrain():
                    answer = answers.attempt_drain(request)
                case Emit():
                    answers.emit(request)
    except StopIteration as stop:
        end: StepEnd = stop.value
        return end


Clock = Callable[[], datetime]
Marks = dict[str, str | None]  # the annotations of one Write


def as_mirror_pods(answer: Answer) -> tuple[str, ...]:
    if not isinstance(answer, tuple):
        raise TypeError(f"FindMirrorPods answered {answer!r}")
    return answer


def as_survey(answer: Answer) -> PodSurvey:
    if not isinstance(answer, PodSurvey):
        raise TypeError(f"SurveyPods answered {answer!r}")
    return answer


def as_drain_result(answer: Answer) -> DrainResult:
    if not isinstance(answer, DrainResult):
        raise TypeError(f"AttemptDrain answered {answer!r}")
    return answer

"""What one planner action writes on its node, and which Event it records, given what the API answers. Pure.

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

from eventedpleg import constants as c
from eventedpleg.constants import NodeState
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
from eventedpleg.core.rollout.drain.pods import NEEDS_ATTENTION, DrainResult
from eventedpleg.core.rollout.drain.survey import PodSurvey
from eventedpleg.core.rollout.drain.taints import NodeTaints, Taint
from eventedpleg.core.rollout.drain.take import (
    FORCE_DELETE_DISABLED,
    NodeToTake,
    SkipCause,
    TakeKind,
    TakeVerdict,
    classify,
    forced_at_timeout,
    never_finishes,
    unsurveyed,
)
from eventedpleg.models.nodeconfig import OnDrainBlocked, OnDrainTimeout
from eventedpleg.reasons import EventReason

MAX_NAMED_STATIC_PODS = 3


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


def step(action: Action, *, clock: Clock, nodeconfig: str, allow_force_delete: bool = False) -> Step:
    """The rules for `action`; `clock` is read at each write (state-since), `nodeconfig` names the owner,
    `allow_force_delete`: this installation grants `pods delete` (chart value drain.allowForceDelete)."""
    match action:
        case Cordon():
            return _cordon(action, clock, allow_force_delete)
        case Drain():
            return _drain(action, clock, allow_force_delete)
        case Uncordon():
            return _uncordon(action)
        case MarkFailed():
            return _mark_failed(action, clock)
        case Release():
            return _release(action, nodeconfig)
        case SetAgentOptions():
            return _set_agent_options(action)
        case AskApproval():
            return _ask_approval(action)
    raise AssertionError(f"unknown action {action!r}")


def _ask_approval(action: AskApproval) -> Step:
    """The node waits, in service, for a person (spec.rollout.approval: Manual): said once per config."""
    yield Write({c.ANN_AWAITING_APPROVAL: action.hash})
    yield Emit("Normal", EventReason.AWAITING_APPROVAL, approval_text(action.node, action.hash))
    return StepEnd()


def _state(state: NodeState, reason: str, clock: Clock) -> dict[str, str | None]:
    return {
        c.ANN_STATE: state.value,
        c.ANN_STATE_SINCE: clock().isoformat(timespec="seconds"),
        c.ANN_REASON: reason,
    }


def _hold(user: frozenset[str]) -> tuple[tuple[str, ...], dict[str, str | None]]:
    """The autoscaler keys our cordon adds (every known one the user did not set) and the marks that add
    them, in the cordon's own patch: a node is never cordoned by us without them, and never holds them
    without our cordon (no write is added, and no crash can split the two)."""
    hold = tuple(key for key in c.AUTOSCALER_ANNOTATIONS if key not in user)
    marks: dict[str, str | None] = dict.fromkeys(hold, c.AUTOSCALER_VALUE)
    marks[c.ANN_AUTOSCALER_HOLD] = ",".join(hold) if hold else None
    return hold, marks


def _give_back(hold: tuple[str, ...], taints: NodeTaints) -> dict[str, str | None]:
    """Drop our cordon mark, exactly the autoscaler keys our cordon added (the user's stay) and our taint's
    marks (the Write takes the taint itself off: `taints.without_ours()`)."""
    return {
        c.ANN_CORDONED_BY_US: None,
        c.ANN_AUTOSCALER_HOLD: None,
        **dict.fromkeys(hold),
        **_untaint(taints),
    }


def _untaint(taints: NodeTaints) -> Marks:
    """The marks of our taint (drain.taintBeforeCordon) removed, when there are any."""
    return {c.ANN_TAINTED_SINCE: None, c.ANN_TAINT: None} if taints.marked else {}


def _mirror_pods(answer: Answer) -> tuple[str, ...]:
    if not isinstance(answer, tuple):
        raise TypeError(f"FindMirrorPods answered {answer!r}")
    return answer


def _survey(answer: Answer) -> PodSurvey:
    if not isinstance(answer, PodSurvey):
        raise TypeError(f"SurveyPods answered {answer!r}")
    return answer


def _drain_result(answer: Answer) -> DrainResult:
    if not isinstance(answer, DrainResult):
        raise TypeError(f"AttemptDrain answered {answer!r}")
    return answer


def _static_pod_skip(
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
        {**marks, c.ANN_DESIRED: node_hash, **_state(NodeState.SKIPPED, reason, clock)}, unschedulable, taints
    )
    yield Emit("Warning", EventReason.SKIPPED, reason)
    return StepEnd(NodeState.SKIPPED)


def _held(
    owner: str, holding: str, was_blocked: str, taints: NodeTaints
) -> Generator[Request, Answer, StepEnd]:
    """Something holds the node for now (a blocking pod, another maintenance owner): not taken, left in
    service (our taint off), looked at again; said once per cause, not once per look."""
    if holding != was_blocked or taints.marked:
        yield Write(
            {c.ANN_OWNER: owner, c.ANN_BLOCKED: holding, **_untaint(taints)}, taints=taints.without_ours()
        )
        yield Emit("Normal", EventReason.NODE_HELD, f"not cordoned, waiting: {holding}")
    return StepEnd(drain_retry=True)


def _blocked(
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
    marks = {**marks, **_untaint(taints)}
    if policy is OnDrainBlocked.WAIT:  # in service, as if never taken: taken once the blocker is gone
        if taken or never != was_blocked or taints.marked:  # the Event once per blocker, not per look
            gone: Marks = {c.ANN_STATE: None, c.ANN_STATE_SINCE: None, c.ANN_REASON: None} if taken else {}
            yield Write({**marks, **gone, c.ANN_BLOCKED: never}, unschedulable, off)
            yield Emit(
                "Warning", EventReason.DRAIN_BLOCKED, f"{given}, waiting (drain.onBlocked: Wait): {never}"
            )
        return StepEnd(drain_retry=True)
    state = NodeState.SKIPPED if policy is OnDrainBlocked.SKIP else NodeState.FAILED
    reason = f"{given}: the drain could never finish: {never} (drain.onBlocked: {policy}){hint}"
    yield Write(
        {**marks, c.ANN_DESIRED: node_hash, c.ANN_BLOCKED: None, **_state(state, reason, clock)},
        unschedulable,
        off,
    )
    yield Emit("Warning", EventReason.DRAIN_BLOCKED, reason)
    return StepEnd(state)


def _apply_request(node_hash: str, options: str, clock: Clock) -> Marks:
    """The marks that ask the agent to apply `node_hash`."""
    return {
        c.ANN_DESIRED: node_hash,
        c.ANN_AGENT_OPTIONS: options,
        c.ANN_DRAIN_TIMEOUTS: None,  # drained: a later timeout starts counting again
        **_state(NodeState.APPLYING, "drained; waiting for the agent", clock),
    }


def _request_apply(
    node_hash: str, options: str, what: str, clock: Clock
) -> Generator[Request, Answer, StepEnd]:
    yield Write(_apply_request(node_hash, options, clock))
    yield Emit("Normal", EventReason.DRAINED, f"{what}; agent asked to apply config {node_hash}")
    return StepEnd(NodeState.APPLYING)


def _cordon_marks(action: Cordon, clock: Clock) -> Marks:
    """The marks of taking the node: ours, whether it was cordoned before, cordoned by us, the autoscaler
    keys our cordon adds (`_hold`), Draining."""
    _, hold_marks = _hold(action.autoscaler_user)
    blocked: Marks = {c.ANN_BLOCKED: None} if action.blocked else {}  # no longer waiting
    return {
        **blocked,
        c.ANN_OWNER: action.owner,
        c.ANN_WAS_UNSCHEDULABLE: str(action.was_unschedulable).lower(),
        c.ANN_CORDONED_BY_US: "true",
        **hold_marks,
        **_state(NodeState.DRAINING, "evicting pods", clock),
    }


def _in_place(action: Cordon, clock: Clock) -> Step:
    """spec.drain.mode: InPlace on a node where that is safe: the apply request alone, no cordon, no
    eviction; the pods stay and keep running through the runtime and kubelet restarts."""
    what = "in place, not cordoned or drained (drain.mode: InPlace)"
    blocked: Marks = {c.ANN_BLOCKED: None} if action.blocked else {}
    taints = action.taints  # ours, should the mode have changed after a taint
    yield Write(
        {
            **blocked,
            **_untaint(taints),
            c.ANN_OWNER: action.owner,
            **_apply_request(action.hash, action.agent_options, clock),
            c.ANN_REASON: f"{what}; waiting for the agent",
        },
        taints=taints.without_ours() if taints.marked else None,
    )
    yield Emit("Normal", EventReason.IN_PLACE, f"{what}; agent asked to apply config {action.hash}")
    return StepEnd(NodeState.APPLYING)


def _not_in_place(action: Cordon, why: str, clock: Clock) -> Step:
    """spec.drain.mode: InPlace with inPlace.onIneligible: Skip on a node where that is not safe: fail
    closed, never cordoned or drained, Skipped and named."""
    reason = (
        f"not cordoned: drain.mode is InPlace, not safe on this node: {why} "
        "(drain.inPlace.onIneligible: Skip)"
    )
    taints = action.taints
    yield Write(
        {
            c.ANN_OWNER: action.owner,
            c.ANN_DESIRED: action.hash,
            **_untaint(taints),
            **_state(NodeState.SKIPPED, reason, clock),
        },
        taints=taints.without_ours(),
    )
    yield Emit("Warning", EventReason.NOT_IN_PLACE, reason)
    return StepEnd(NodeState.SKIPPED)


def _node_to_take(action: Cordon, allow_force_delete: bool) -> NodeToTake:
    """What the take classification (drain.take) reads of the Cordon action."""
    return NodeToTake(
        action.drain,
        action.include_control_plane,
        host_refusal=action.host_refusal,
        in_place=action.in_place,
        drained_because=action.drained_because,
        tainted=action.taints.since is not None,
        allow_force_delete=allow_force_delete,
    )


def _cordon(action: Cordon, clock: Clock, allow_force_delete: bool) -> Step:
    """Take the node in kubectl drain's order (cordon, list, evict), then the first drain attempt.

    Whether it is taken, and how, is drain.take's verdict (the one preflight shows); what is known
    without asking the API is decided before the pods are looked at. A node running static pods is
    marked Skipped without being cordoned at all, and so is a node whose agent said it would refuse the
    change."""
    taints = action.taints  # ours comes off again on every way out before the cordon
    node = _node_to_take(action, allow_force_delete)
    survey: PodSurvey | None = None
    verdict = unsurveyed(node)
    if verdict is None:
        survey = _survey((yield SurveyPods()))
        verdict = classify(node, survey)
    match verdict.kind:
        case TakeKind.SKIP if verdict.cause is SkipCause.HOST:
            reason = f"not cordoned: {verdict.why}"
            yield Write(
                {
                    c.ANN_OWNER: action.owner,
                    c.ANN_DESIRED: action.hash,
                    **_untaint(taints),
                    **_state(NodeState.SKIPPED, reason, clock),
                },
                taints=taints.without_ours(),
            )
            yield Emit("Warning", EventReason.UNSUPPORTED, reason)
            return StepEnd(NodeState.SKIPPED)
        case TakeKind.SKIP if verdict.cause is SkipCause.NOT_IN_PLACE:
            return (yield from _not_in_place(action, verdict.why, clock))
        case TakeKind.SKIP:
            ours = {c.ANN_OWNER: action.owner, **_untaint(taints)}
            return (
                yield from _static_pod_skip(
                    action.hash,
                    verdict.pods,
                    clock,
                    marks=ours,
                    unschedulable=None,
                    taints=taints.without_ours(),
                )
            )
        case TakeKind.HOLD:
            return (yield from _held(action.owner, verdict.why, action.blocked, taints))
        case TakeKind.IN_PLACE:
            return (yield from _in_place(action, clock))
        case TakeKind.BLOCK:
            return (
                yield from _blocked(
                    action.drain.on_blocked,
                    verdict.why,
                    clock,
                    node_hash=action.hash,
                    marks={c.ANN_OWNER: action.owner},
                    taken=False,
                    unschedulable=None,
                    taints=taints,
                    was_blocked=action.blocked,
                    hint=f"; {verdict.hint}" if verdict.hint else "",
                )
            )
        case TakeKind.TAINT if action.drain.taint is not None:
            return (yield from _taint(action, action.drain.taint, clock))
    if survey is None or verdict.kind is not TakeKind.TAKE:
        raise AssertionError(f"a Cordon step cannot act on {verdict!r}")
    return (yield from _take(action, verdict, survey, clock, forced=node.forced))


def _take(action: Cordon, verdict: TakeVerdict, survey: PodSurvey, clock: Clock, *, forced: bool) -> Step:
    """Cordon the node and make the first drain attempt (TakeKind.TAKE). The pods were looked at once
    before the cordon, so the common case costs one write: a node with nothing to evict gets the cordon
    and the apply request in one patch. The list after that write is kubectl's own list-after-cordon: a
    pod bound before the scheduler saw the cordon is evicted then (PodDisruptionBudgets respected) and a
    Warning names it."""
    taints = action.taints
    if verdict.why:  # InPlace asked, but not safe on this node
        yield Emit(
            "Normal",
            EventReason.NOT_IN_PLACE,
            f"drain.mode is InPlace, but this node is drained first: {verdict.why}",
        )
    if survey.nothing_to_evict:
        marks = _cordon_marks(action, clock) | _apply_request(action.hash, action.agent_options, clock)
        yield Write(marks, unschedulable=True)
        late = _drain_result((yield AttemptDrain()))
        if not late.done:
            yield Emit(
                "Warning",
                EventReason.PODS_BOUND_DURING_CORDON,
                f"cordoned and asked to apply; {late.waiting}",
            )
        # No "Drained" Event here: nothing was evicted, and the agent's own "Applying" Event follows at
        # once; one Event fewer per node (a write the API server pays for).
        return StepEnd(NodeState.APPLYING)
    yield Write(_cordon_marks(action, clock), unschedulable=True)
    mirror = _mirror_pods((yield FindMirrorPods()))
    if mirror and not action.include_control_plane:  # a static pod appeared since the survey
        back = _give_back(_hold(action.autoscaler_user)[0], taints)
        return (
            yield from _static_pod_skip(
                action.hash,
                mirror,
                clock,
                marks=back,
                unschedulable=action.was_unschedulable,
                taints=taints.without_ours(),
            )
        )
    result = _drain_result((yield AttemptDrain()))
    if result.done:
        return (yield from _request_apply(action.hash, action.agent_options, "cordoned and drained", clock))
    # Found only after the cordon (a pod bound since the survey): give the node back now.
    never = never_finishes(result, forced=forced)
    if never:
        return (
            yield from _blocked(
                action.drain.on_blocked,
                never,
                clock,
                node_hash=action.hash,
                marks=_give_back(_hold(action.autoscaler_user)[0], taints),
                taken=True,
                unschedulable=action.was_unschedulable,
                taints=taints,
            )
        )
    yield Write({c.ANN_REASON: result.waiting})
    yield Emit("Normal", EventReason.DRAINING, f"cordoned; {result.waiting} (PodDisruptionBudgets respected)")
    return StepEnd(NodeState.DRAINING, drain_retry=True)


def _drain(action: Drain, clock: Clock, allow_force_delete: bool) -> Step:
    """Another drain attempt on a node in Draining; at the deadline, `on_timeout` decides."""
    if not action.cordoned:
        # Someone else uncordoned it mid-drain (another tool, a person): never ask the agent to change a
        # node that takes pods again (the check MCO added in 2026). Their uncordon stands; ours is over.
        reason = (
            "uncordoned by someone else while we drained it: not changed; `eventedpleg retry` takes it again"
        )
        marks = {**_give_back(action.autoscaler_hold, action.taints), c.ANN_DESIRED: action.hash}
        yield Write({**marks, **_state(NodeState.FAILED, reason, clock)}, taints=action.taints.without_ours())
        yield Emit("Warning", EventReason.UNCORDONED_BY_OTHERS, reason)
        return StepEnd(NodeState.FAILED)
    mirror = _mirror_pods((yield FindMirrorPods()))
    if mirror and not action.include_control_plane:
        # The Cordon step that took the node ended before its static-pod check (conflict or crash).
        back = _give_back(action.autoscaler_hold, action.taints)
        return (
            yield from _static_pod_skip(
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
    result = _drain_result((yield AttemptDrain(force_delete=force)))
    if result.done:
        return (yield from _request_apply(action.hash, action.agent_options, "drained", clock))
    # Waiting for the timeout gains nothing: give the node back now (at the timeout, onTimeout decides,
    # but a forced delete leaves the pods that asked not to be disrupted: they give the node back too).
    forced = forced_at_timeout(policy, allow_force_delete)
    never = never_finishes(result, forced=forced) if forced or not action.deadline_reached else ""
    if never:
        return (
            yield from _blocked(
                policy.on_blocked,
                never,
                clock,
                node_hash=action.hash,
                marks=_give_back(action.autoscaler_hold, action.taints),
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
            timeouts[c.ANN_DRAIN_TIMEOUTS] = str(count)
            if policy.retried(count):  # what clears by itself (a PDB) gets another chance
                wait = policy.backoff(count)
                reason += f"; automatic retry {count} of {policy.retries} in {int(wait.total_seconds())}s"
        # Give the node back: a timed-out drain must never leave our cordon behind.
        marks = {
            c.ANN_DESIRED: action.hash,
            **_give_back(action.autoscaler_hold, action.taints),
            **timeouts,
            **_state(state, reason, clock),
        }
        yield Write(marks, action.was_unschedulable, action.taints.without_ours())
        yield Emit("Warning", EventReason.DRAIN_TIMEOUT, reason)
        return StepEnd(state)
    if result.waiting != action.reason:
        # Name what blocks the drain on the node (and so in status); written only when it changes.
        yield Write({c.ANN_REASON: result.waiting})
        if result.blockers & NEEDS_ATTENTION:
            yield Emit("Warning", EventReason.DRAIN_BLOCKED, result.waiting)
    return StepEnd(drain_retry=True)


def _uncordon(action: Uncordon) -> Step:
    gone: Marks = {}
    if action.agent_gone:  # nothing was asked of the agent: the node waits in service for it
        gone = {c.ANN_STATE: None, c.ANN_STATE_SINCE: None, c.ANN_REASON: None}
    yield Write(
        {**_give_back(action.autoscaler_hold, action.taints), **gone},
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


def _mark_failed(action: MarkFailed, clock: Clock) -> Step:
    yield Write(_state(NodeState.FAILED, action.reason, clock))
    yield Emit("Warning", EventReason.NODE_FAILED, action.reason)
    return StepEnd(NodeState.FAILED)


def _release(action: Release, nodeconfig: str) -> Step:
    # The agent's host check stays: it is about the host, not about this NodeConfig, and the next
    # NodeConfig to select the node needs it before it may take the node.
    kept = {c.ANN_HOST_CHECK, c.ANN_CURRENT} if action.keep_current else {c.ANN_HOST_CHECK}
    drop: dict[str, str | None] = {key: None for key in c.NODE_ANNOTATIONS if key not in kept}
    drop.update(dict.fromkeys(action.autoscaler_hold))
    unschedulable = action.was_unschedulable if action.uncordon else None
    yield Write(drop, unschedulable, action.taints.without_ours())
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


def _taint(action: Cordon, taint: Taint, clock: Clock) -> Step:
    """drain.taintBeforeCordon: the node chosen gets the taint now, and its cordon once the wait is over
    (the planner wakes then). A taint with that key already on the node is someone else's: it is kept
    and never marked ours, so it is never removed; the node waits all the same."""
    added = action.taints.with_taint(taint)
    blocked: Marks = {c.ANN_BLOCKED: None} if action.blocked else {}  # no longer waiting
    marks: Marks = {
        **blocked,
        c.ANN_OWNER: action.owner,
        c.ANN_TAINTED_SINCE: clock().isoformat(timespec="seconds"),
        c.ANN_TAINT: taint.key if added is not None else None,
    }
    yield Write(marks, taints=added)
    then = f"cordoned in {action.drain.taint_seconds}s (drain.taintBeforeCordon)"
    if added is None:
        yield Emit(
            "Normal",
            EventReason.TAINTED,
            f"already tainted {taint.key} by someone else, kept as it is; {then}",
        )
    else:
        yield Emit("Normal", EventReason.TAINTED, f"tainted {taint}; {then}")
    return StepEnd()


def _set_agent_options(action: SetAgentOptions) -> Step:
    yield Write({c.ANN_AGENT_OPTIONS: action.agent_options})
    return StepEnd()

"""Taking a node (the Cordon step): cordoned and drained, tainted first, changed in place, held, or not
taken at all, as the take verdict (drain.takeverdict) says. Pure."""

from __future__ import annotations

from collections.abc import Generator

from eventedpleg.core.rollout.actions import Cordon
from eventedpleg.core.rollout.drain.survey import PodSurvey
from eventedpleg.core.rollout.drain.taints import NodeTaints, Taint
from eventedpleg.core.rollout.drain.takeverdict import (
    NodeToTake,
    SkipCause,
    TakeKind,
    TakeVerdict,
    classify,
    never_finishes,
    unsurveyed,
)
from eventedpleg.core.rollout.steps.draining import (
    Taken,
    blocked_after_cordon,
    drain_blocked,
    request_apply,
    skip_static_pods,
    skip_static_pods_after_cordon,
)
from eventedpleg.core.rollout.steps.marks import apply_request, autoscaler_hold, state_marks, untaint
from eventedpleg.core.rollout.steps.requests import (
    Answer,
    AttemptDrain,
    Clock,
    Emit,
    Marks,
    Request,
    Step,
    StepEnd,
    SurveyPods,
    Write,
    as_drain_result,
    as_survey,
)
from eventedpleg.protocol import (
    ANN_BLOCKED,
    ANN_CAUSE,
    ANN_CORDONED_BY_US,
    ANN_DESIRED,
    ANN_OWNER,
    ANN_REASON,
    ANN_TAINT,
    ANN_TAINTED_SINCE,
    ANN_WAS_UNSCHEDULABLE,
    Cause,
    NodeState,
    format_time,
)
from eventedpleg.reasons import EventReason


def cordon(action: Cordon, clock: Clock, allow_force_delete: bool) -> Step:
    """Take the node in kubectl drain's order (cordon, list, evict), then the first drain attempt.

    Whether it is taken, and how, is the take verdict (drain.takeverdict, the one preflight shows); what
    is known without asking the API is decided before the pods are looked at. A node running static pods
    is marked Skipped without being cordoned at all, and so is a node whose agent said it would refuse the
    change."""
    taints = action.taints  # ours comes off again on every way out before the cordon
    node = _node_to_take(action, allow_force_delete)
    survey: PodSurvey | None = None
    verdict = unsurveyed(node)
    if verdict is None:
        survey = as_survey((yield SurveyPods()))
        verdict = classify(node, survey)
    match verdict.kind:
        case TakeKind.SKIP if verdict.cause is SkipCause.HOST:
            return (
                yield from _skipped(
                    action,
                    f"not cordoned: {verdict.why}",
                    EventReason.UNSUPPORTED,
                    clock,
                    Cause.HOST_REFUSED,
                )
            )
        case TakeKind.SKIP if verdict.cause is SkipCause.NOT_IN_PLACE:
            return (yield from _not_in_place(action, verdict.why, clock))
        case TakeKind.SKIP:  # static pods
            ours = {ANN_OWNER: action.owner, **untaint(taints)}
            return (
                yield from skip_static_pods(
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
            return (yield from _blocked_before_cordon(action, verdict, clock))
        case TakeKind.TAINT if action.drain.taint is not None:
            return (yield from _taint(action, action.drain.taint, clock))
    if survey is None or verdict.kind is not TakeKind.TAKE:
        raise AssertionError(f"a Cordon step cannot act on {verdict!r}")
    return (yield from _take(action, verdict, survey, clock, forced=node.forced))


def _node_to_take(action: Cordon, allow_force_delete: bool) -> NodeToTake:
    """What the take classification (drain.takeverdict) reads of the Cordon action."""
    return NodeToTake(
        action.drain,
        action.include_control_plane,
        host_refusal=action.host_refusal,
        in_place=action.in_place,
        drained_because=action.drained_because,
        tainted=action.taints.since is not None,
        allow_force_delete=allow_force_delete,
        retrying=action.retrying,
    )


def _cordon_marks(action: Cordon, clock: Clock) -> Marks:
    """The marks of taking the node: ours, whether it was cordoned before, cordoned by us, the autoscaler
    keys our cordon adds (`autoscaler_hold`), Draining."""
    _, hold_marks = autoscaler_hold(action.autoscaler_user)
    blocked: Marks = {ANN_BLOCKED: None} if action.blocked else {}  # no longer waiting
    return {
        **blocked,
        ANN_OWNER: action.owner,
        ANN_WAS_UNSCHEDULABLE: str(action.was_unschedulable).lower(),
        ANN_CORDONED_BY_US: "true",
        **hold_marks,
        **state_marks(NodeState.DRAINING, "evicting pods", clock),
    }


def _take(action: Cordon, verdict: TakeVerdict, survey: PodSurvey, clock: Clock, *, forced: bool) -> Step:
    """Cordon the node and make the first drain attempt (TakeKind.TAKE). The pods were looked at once
    before the cordon, so the common case costs one write: a node with nothing to evict gets the cordon
    and the apply request in one patch. The list after that write is kubectl's own list-after-cordon: a
    pod bound before the scheduler saw the cordon is evicted then (PodDisruptionBudgets respected) and a
    Warning names it."""
    if verdict.why:  # InPlace asked, but not safe on this node
        yield Emit(
            "Normal",
            EventReason.NOT_IN_PLACE,
            f"drain.mode is InPlace, but this node is drained first: {verdict.why}",
        )
    if survey.nothing_to_evict:
        marks = _cordon_marks(action, clock) | apply_request(action.hash, action.agent_options, clock)
        yield Write(marks, unschedulable=True)
        late = as_drain_result((yield AttemptDrain()))
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
    node = Taken(
        action.hash,
        action.agent_options,
        include_control_plane=action.include_control_plane,
        was_unschedulable=action.was_unschedulable,
        hold=autoscaler_hold(action.autoscaler_user)[0],
        taints=action.taints,
        on_blocked=action.drain.on_blocked,
    )
    skipped = yield from skip_static_pods_after_cordon(node, clock)  # a static pod since the survey
    if skipped is not None:
        return skipped
    result = as_drain_result((yield AttemptDrain()))
    if result.done:
        return (yield from request_apply(action.hash, action.agent_options, "cordoned and drained", clock))
    # Found only after the cordon (a pod bound since the survey): give the node back now.
    never = never_finishes(result, forced=forced)
    if never:
        return (yield from blocked_after_cordon(node, never, clock))
    yield Write({ANN_REASON: result.waiting})
    yield Emit("Normal", EventReason.DRAINING, f"cordoned; {result.waiting} (PodDisruptionBudgets respected)")
    return StepEnd(NodeState.DRAINING, drain_retry=True)


def _blocked_before_cordon(action: Cordon, verdict: TakeVerdict, clock: Clock) -> Step:
    """A drain that could never finish, found before the cordon: the node is not taken (drain.onBlocked)."""
    return (
        yield from drain_blocked(
            action.drain.on_blocked,
            verdict.why,
            clock,
            node_hash=action.hash,
            marks={ANN_OWNER: action.owner},
            taken=False,
            unschedulable=None,
            taints=action.taints,
            was_blocked=action.blocked,
            hint=f"; {verdict.hint}" if verdict.hint else "",
        )
    )


def _taint(action: Cordon, taint: Taint, clock: Clock) -> Step:
    """drain.taintBeforeCordon: the node chosen gets the taint now, and its cordon once the wait is over
    (the planner wakes then). A taint with that key already on the node is someone else's: it is kept
    and never marked ours, so it is never removed; the node waits all the same."""
    added = action.taints.with_taint(taint)
    blocked: Marks = {ANN_BLOCKED: None} if action.blocked else {}  # no longer waiting
    marks: Marks = {
        **blocked,
        ANN_OWNER: action.owner,
        ANN_TAINTED_SINCE: format_time(clock()),
        ANN_TAINT: taint.key if added is not None else None,
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


def _in_place(action: Cordon, clock: Clock) -> Step:
    """spec.drain.mode: InPlace on a node where that is safe: the apply request alone, no cordon, no
    eviction; the pods stay and keep running through the runtime and kubelet restarts."""
    what = "in place, not cordoned or drained (drain.mode: InPlace)"
    blocked: Marks = {ANN_BLOCKED: None} if action.blocked else {}
    taints = action.taints  # ours, should the mode have changed after a taint
    yield Write(
        {
            **blocked,
            **untaint(taints),
            ANN_OWNER: action.owner,
            **apply_request(action.hash, action.agent_options, clock),
            ANN_REASON: f"{what}; waiting for the agent",
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
    return (yield from _skipped(action, reason, EventReason.NOT_IN_PLACE, clock, Cause.NOT_IN_PLACE))


def _skipped(action: Cordon, reason: str, event: EventReason, clock: Clock, cause: Cause) -> Step:
    """Skipped before the cordon: owned and named, our taint (if any) off again, one Warning."""
    yield Write(
        {
            ANN_OWNER: action.owner,
            ANN_DESIRED: action.hash,
            **untaint(action.taints),
            **state_marks(NodeState.SKIPPED, reason, clock, cause),
        },
        taints=action.taints.without_ours(),
    )
    yield Emit("Warning", event, reason)
    return StepEnd(NodeState.SKIPPED)


def _held(
    owner: str, holding: str, was_blocked: str, taints: NodeTaints
) -> Generator[Request, Answer, StepEnd]:
    """Something holds the node for now (a blocking pod, another maintenance owner): not taken, left in
    service (our taint off), looked at again; said once per cause, not once per look."""
    if holding != was_blocked or taints.marked:
        yield Write(
            {ANN_OWNER: owner, ANN_BLOCKED: holding, ANN_CAUSE: None, **untaint(taints)},
            taints=taints.without_ours(),
        )
        yield Emit("Normal", EventReason.NODE_HELD, f"not cordoned, waiting: {holding}")
    return StepEnd(drain_retry=True)

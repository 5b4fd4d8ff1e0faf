"""The whole-cluster half of a pass, over the nodes' decisions: halt, pause, window, canary and budget
gates on starting nodes, then the Summary. A node already started always finishes (its decision holds
its step), so no gate ever leaves a node cordoned."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from eventedpleg.core.rollout import window
from eventedpleg.core.rollout.actions import Action
from eventedpleg.core.rollout.planner import healthgate
from eventedpleg.core.rollout.planner.decider import Inputs, NodeDecision
from eventedpleg.core.rollout.planner.start import Candidates, Start
from eventedpleg.core.rollout.planner.summary import (
    HeldNode,
    NodeNote,
    OwnerConflict,
    Plan,
    Summary,
    int_or_percent,
)
from eventedpleg.core.rollout.planner.tally import Tally
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.models.nodeconfig import OnNoAgent, Rollout
from eventedpleg.protocol import Cause, NodeState

MAX_ATTENTION = 50
ALERT_RECHECK = timedelta(seconds=15)  # how often a rollout held by alerts asks Prometheus again


@dataclass(slots=True)
class _Gathered:
    """The nodes' decisions of one pass, collected; the gates add actions, notes and wakes."""

    actions: list[Action] = field(default_factory=list)
    notes: list[NodeNote] = field(default_factory=list)
    failures: list[NodeNote] = field(default_factory=list)
    retrying: list[NodeNote] = field(default_factory=list)
    conflicts: list[OwnerConflict] = field(default_factory=list)
    foreign: list[HeldNode] = field(default_factory=list)
    wakes: list[datetime] = field(default_factory=list)
    no_agent: list[NodeNote] = field(default_factory=list)  # the notes of nodes waiting for their agent


def _gather(decisions: Iterable[NodeDecision]) -> _Gathered:
    got = _Gathered()
    for decision in decisions:
        got.notes.extend(decision.notes)
        got.failures.extend(decision.failures)
        got.retrying.extend(decision.retrying)
        got.conflicts.extend(decision.conflicts)
        got.foreign.extend(decision.foreign)
        got.wakes.extend(decision.wakes)
        if decision.action is not None:
            got.actions.append(decision.action)
    got.no_agent = [n for n in got.notes if n.cause is Cause.NO_AGENT]
    return got


@dataclass(frozen=True, slots=True)
class _Halt:
    """Whether failures halt the rollout (a deletion never halts: it gives back every node it holds,
    failed ones included, lettinggo.py), and why."""

    halted: bool
    canary_failed: bool
    unhealthy: bool
    why: str


def _halt(inputs: Inputs, tally: Tally, done: Sequence[NodeView], failures: Sequence[NodeNote]) -> _Halt:
    target, rollout = inputs.target, inputs.target.spec.rollout
    if target.deleting:
        return _Halt(halted=False, canary_failed=False, unhealthy=False, why="")
    canary_failed = tally.failed > 0 and not _canaries_passed(done, tally, target)
    max_failed = int_or_percent(rollout.max_failed_nodes, tally.total)
    unhealthy = tally.unhealthy > 0
    if not (tally.failed >= max_failed or canary_failed or unhealthy):
        return _Halt(halted=False, canary_failed=canary_failed, unhealthy=unhealthy, why="")
    why = _halt_text(rollout, tally, max_failed, canary_failed=canary_failed, unhealthy=unhealthy)
    return _Halt(
        halted=True, canary_failed=canary_failed, unhealthy=unhealthy, why=why + _guard_text(failures)
    )


# The gates that hold every new node, in the order they are named: each says why ("" when it is open).
def _hold_for_no_agent(inputs: Inputs, got: _Gathered) -> str:
    hold = inputs.target.spec.rollout.on_no_agent is OnNoAgent.HOLD and not inputs.target.deleting
    return (
        f"holding (rollout.onNoAgent: Hold) while {_no_agent_text(got.no_agent)}"
        if hold and got.no_agent
        else ""
    )


def _paused(target: Target) -> bool:
    return target.spec.rollout.paused and not target.deleting


def _hold_for_pause(inputs: Inputs, got: _Gathered) -> str:
    return "paused (spec.rollout.paused)" if _paused(inputs.target) else ""


def _window_closed(inputs: Inputs) -> bool:
    return not window.any_open(inputs.target.spec.rollout, inputs.now)


def _hold_for_window(inputs: Inputs, got: _Gathered) -> str:
    if not _window_closed(inputs):
        return ""
    return f"outside the maintenance window ({window.describe_all(inputs.target.spec.rollout)})"


def _alerting(target: Target) -> bool:
    return bool(target.alerts) and not target.deleting


def _hold_for_alerts(inputs: Inputs, got: _Gathered) -> str:
    if not _alerting(inputs.target):
        return ""
    got.wakes.append(inputs.now + ALERT_RECHECK)  # asked again: the alert has no event of ours to wake us
    return f"no new node while {inputs.target.alerts} (rollout.alertGate)"


HOLDS: tuple[Callable[[Inputs, _Gathered], str], ...] = (
    _hold_for_no_agent,
    _hold_for_pause,
    _hold_for_window,
    _hold_for_alerts,
)


def finish(
    inputs: Inputs,
    tally: Tally,
    decisions: Iterable[NodeDecision],
    done: Sequence[NodeView],
    candidates: Candidates,
) -> Plan:
    """`decisions` in rollout order (those without notes, actions or wakes may be left out); `done`: the
    nodes Done at the wanted hash. Gather the decisions, then: halted, or held by a gate, or start nodes."""
    target = inputs.target
    got = _gather(decisions)
    halt = _halt(inputs, tally, done, got.failures)
    watch = healthgate.after(done, target, inputs.now, got.actions, got.wakes)  # None: the gate is off
    waiting, held_by = halt.why, tuple[HeldNode, ...]()
    holding = bool(_hold_for_no_agent(inputs, got))
    if not halt.halted and (candidates or holding):
        waiting = next((why for hold in HOLDS if (why := hold(inputs, got))), "")
        if not waiting:
            start = Start(inputs, tally, got.actions, got.notes, got.wakes, watch)
            waiting, held_by = start.start(done, candidates, got.foreign)
    if got.no_agent and not waiting:
        waiting = _no_agent_text(got.no_agent)
    summary = _summary(inputs, tally, got, halt, (waiting, held_by), watch, left=bool(candidates))
    return Plan(actions=tuple(got.actions), summary=summary)


def _summary(
    inputs: Inputs,
    tally: Tally,
    got: _Gathered,
    halt: _Halt,
    why: tuple[str, tuple[HeldNode, ...]],
    watch: list[str] | None,
    *,
    left: bool,
) -> Summary:
    """`why`: why new nodes wait, and the nodes held outside the rollout that hold its budget; `left`: a
    node may still be started."""
    target, (waiting, held_by) = inputs.target, why
    paused, window_closed = _paused(target), _window_closed(inputs)
    attention = got.notes[:MAX_ATTENTION]
    complete = (
        not left
        and tally.in_flight == 0
        and not tally.retry_pending
        and not tally.no_agent
        and not tally.awaiting_approval
    )
    return Summary(
        tally=tally,
        want_hash=inputs.want,
        complete=complete,
        halted=halt.halted,
        canary_failed=halt.canary_failed,
        paused=paused,
        window_closed=window_closed,
        alerting=_alerting(target),
        waiting=waiting,
        conflicts=tuple(got.conflicts),
        attention=tuple(attention),
        attention_truncated=len(got.notes) - len(attention),
        failures=tuple(got.failures),
        finalized=target.deleting and not tally.owned and complete,
        next_wake=min(got.wakes, default=None),
        held_by=held_by,
        budget_stuck=bool(held_by) and tally.in_flight == 0,
        retrying=tuple(got.retrying[:MAX_ATTENTION]),
        blocked=_blocked_for_good(
            tally, got.notes, got.failures, moving=halt.halted or paused or window_closed
        ),
        awaiting_approval=tuple(n.name for n in got.notes if n.state == NodeState.AWAITING_APPROVAL),
        unhealthy=halt.unhealthy,
        health_watch=tuple(dict.fromkeys(watch or ())),
    )


def _blocked_for_good(
    tally: Tally, notes: Sequence[NodeNote], failures: Sequence[NodeNote], *, moving: bool
) -> tuple[NodeNote, ...]:
    """The remaining nodes when every one is blocked in a way waiting will not fix: each node that may be
    taken is left in service by a drain that could never finish, the others failed, and nothing is in
    flight, retried, waiting for its agent or for approval; () otherwise, or when a gate (`moving`: halt,
    pause, window) says why nothing starts already."""
    if moving or not tally.stuck or tally.stuck != tally.offered:
        return ()
    if tally.in_flight or tally.retry_pending or tally.no_agent or tally.awaiting_approval:
        return ()
    return tuple(n for n in notes if n.stuck) + tuple(failures)


def _canaries_passed(done: Sequence[NodeView], tally: Tally, target: Target) -> bool:
    """True once enough nodes are Done at the wanted config to cover the canary count (or there is no
    canary phase). Until then every node that starts is a canary, so any failure is a canary's."""
    nodes = target.spec.rollout.canary.nodes
    if nodes == 0 or target.deleting:
        return True
    return len(done) >= min(nodes, tally.eligible)


def _halt_text(
    rollout: Rollout, tally: Tally, max_failed: int, *, canary_failed: bool, unhealthy: bool
) -> str:
    """`max_failed`: rollout.maxFailedNodes as a count of this pass's nodes (resolved once, in the pass)."""
    if canary_failed:
        return (
            f"halted: a canary node failed ({tally.failed} failed before the canaries passed; "
            "a failed canary halts the rollout whatever rollout.maxFailedNodes says)"
        )
    if unhealthy:
        return (
            f"halted: {tally.unhealthy} node(s) had pods not Ready {rollout.health_gate.after_seconds}s "
            "after they were given back (rollout.healthGate)"
        )
    value = rollout.max_failed_nodes
    limit = f"{value} ({max_failed} of {tally.total} node(s))" if isinstance(value, str) else value
    return f"halted after {tally.failed} failed node(s) (rollout.maxFailedNodes={limit})"


def _guard_text(failures: Sequence[NodeNote]) -> str:
    """The failed nodes the guard rolled back (by their typed cause), named: the gate misbehaved there."""
    guarded = [n.name for n in failures if n.cause is Cause.GUARD_ROLLBACK]
    if not guarded:
        return ""
    names = ", ".join(guarded[:5]) + (f" and {len(guarded) - 5} more" if len(guarded) > 5 else "")
    return (
        f"; {len(guarded)} of them ({names}) rolled back to generic PLEG by the guard after repeated PLEG "
        "incidents (spec.guard)"
    )


def _no_agent_text(notes: Sequence[NodeNote]) -> str:
    """The nodes waiting, not cordoned, for a live agent (each note's reason says why)."""
    names = ", ".join(n.name for n in notes[:5])
    more = f" and {len(notes) - 5} more" if len(notes) > 5 else ""
    return f"{len(notes)} node(s) wait, not cordoned, for a live eventedpleg agent: {names}{more}"

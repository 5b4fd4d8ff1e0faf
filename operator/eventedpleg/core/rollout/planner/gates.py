"""The whole-cluster half of a pass, over the nodes' decisions: halt, pause, window, canary and budget
gates on starting nodes, then the Summary. A node already started always finishes (its decision holds
its step), so no gate ever leaves a node cordoned."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from eventedpleg.constants import NodeState
from eventedpleg.core.rollout import window
from eventedpleg.core.rollout.actions import Action
from eventedpleg.core.rollout.planner import healthgate
from eventedpleg.core.rollout.planner.decider import Inputs, NodeDecision
from eventedpleg.core.rollout.planner.summary import (
    HeldNode,
    NodeNote,
    OwnerConflict,
    Plan,
    Summary,
    held_text,
    int_or_percent,
)
from eventedpleg.core.rollout.planner.taking import BLOCKED, cordon
from eventedpleg.core.rollout.planner.tally import Tally
from eventedpleg.core.rollout.snapshot import NodeView, Target
from eventedpleg.models.nodeconfig import OnNoAgent, Rollout
from eventedpleg.protocol import Cause, format_time

MAX_ATTENTION = 50
ALERT_RECHECK = timedelta(seconds=15)  # how often a rollout held by alerts asks Prometheus again
Candidate = tuple[NodeView, str]  # a node that may start, and the hash it should get


HELD_BY_CORDON = (
    "waiting, not taken: cordoned by someone else (another maintenance may own it); uncordon it, or set "
    "rollout.takeCordonedNodes: true"
)


class Candidates(Protocol):
    def __bool__(self) -> bool: ...

    def starting_order(self, room: int | None, budget: int) -> Sequence[Candidate]:
        """The candidates the gates walk, in rollout order; an implementation may leave out the ones
        that cannot make a difference (see PassMemo)."""
        ...


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
            start = _Start(inputs, tally, got.actions, got.notes, got.wakes, watch)
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


class _Start:
    """Cordons as many candidates as the canary phase and the budget allow."""

    def __init__(
        self,
        inputs: Inputs,
        tally: Tally,
        actions: list[Action],
        notes: list[NodeNote],
        wakes: list[datetime],
        watch: list[str] | None = None,
    ) -> None:
        self.inputs, self.tally, self.actions, self.notes, self.wakes = inputs, tally, actions, notes, wakes
        self.watch = watch  # rollout.healthGate is on: the nodes it looked at, to read for the next pass
        self.reading = 0  # candidates the gate has not read yet
        self.gated: list[str] = []  # candidates whose pods are not Ready, "node (pods)"
        self.stage = ""  # the step (rollout.steps) whose nodes in progress hold the rest, "" for the canary

    def start(
        self, done: Sequence[NodeView], candidates: Candidates, foreign: list[HeldNode]
    ) -> tuple[str, tuple[HeldNode, ...]]:
        """(why the rest wait, the nodes made unavailable outside the rollout that hold the budget)."""
        target, tally = self.inputs.target, self.tally
        spec = target.spec
        held, room = self._canary_gate(done)
        if held:
            return held, ()
        settling = self._post_node_delay(done)
        if settling:
            return settling, ()
        total = tally.total
        allowed = int_or_percent(spec.rollout.max_unavailable, total)  # resolved once per pass
        budget = allowed - tally.unavailable
        started = 0
        blocked: list[str] = []  # started, but only to look again at a drain that could never finish
        # rollout.healthGate may pass over a candidate without taking budget: walk as many more as it holds.
        extra = sum(1 for pods in target.health.values() if pods) if self.watch is not None else 0
        for node, want in candidates.starting_order(room, budget + extra):
            if not node.ready:
                marks = node.marks
                self.notes.append(
                    NodeNote(
                        node.name, NodeState.PENDING, "waiting: node is NotReady", marks.since, marks.evidence
                    )
                )
                continue
            if node.unschedulable and not spec.rollout.take_cordoned_nodes:  # someone else's maintenance
                marks = node.marks
                self.notes.append(
                    NodeNote(node.name, NodeState.PENDING, HELD_BY_CORDON, marks.since, marks.evidence)
                )
                continue
            if room is not None and started + self.reading >= room:
                break
            free = node.unschedulable  # already unavailable: processing it costs no capacity
            if not free and budget < 1:
                continue
            cost = self._health_gate(node, free)
            if cost is not None:
                budget -= cost
                continue
            self.actions.append(cordon(node, target, want, self.inputs.policy))
            if node.marks.blocked:  # left in service (its note is decide's); the Cordon step looks again
                blocked.append(f"{node.name}: {node.marks.blocked}")
            started += 1
            budget -= 0 if free else 1
        health = self._health_waiting(started)
        if health:
            return health, ()
        if started:
            if blocked:
                return BLOCKED + "; ".join(blocked), ()
            return "", ()
        if room == 0:
            if self.stage:
                return f"{self.stage}: waiting for its node(s) in progress to finish", ()
            return "canary: waiting for the canary node(s) in progress to finish", ()
        held_by = tuple(foreign)
        return _budget_text(spec.rollout.max_unavailable, allowed, total, tally.unavailable, held_by), held_by

    def _health_gate(self, node: NodeView, free: bool) -> int | None:
        """rollout.healthGate before a node is taken: None when it may be; else the budget it keeps (a
        node not read yet keeps its place until the next pass has read it; one whose pods are not Ready
        keeps none: the rollout goes on without it)."""
        target = self.inputs.target
        if self.watch is None:
            return None
        kept = healthgate.held(node, target)
        if not kept:
            return None
        marks = node.marks
        self.notes.append(NodeNote(node.name, NodeState.PENDING, kept, marks.since, marks.evidence))
        self.watch.append(node.name)
        if node.name in target.health:
            self.gated.append(f"{node.name} ({healthgate.names(target.health[node.name])})")
            return 0
        self.reading += 1
        return 0 if free else 1

    def _health_waiting(self, started: int) -> str:
        """Why no node started because of rollout.healthGate ("" when one did, or the gate did not hold
        any); a node being read wakes the next pass soon."""
        if self.reading:
            self.wakes.append(self.inputs.now + healthgate.RECHECK)
        if started:
            return ""
        if self.reading:
            return f"reading the readiness of the pods on {self.reading} node(s) to take (rollout.healthGate)"
        if self.gated:
            more = f" and {len(self.gated) - 5} more" if len(self.gated) > 5 else ""
            return (
                f"{len(self.gated)} node(s) wait, not cordoned, for their pods to be Ready "
                f"(rollout.healthGate): {'; '.join(self.gated[:5])}{more}"
            )
        return ""

    def _post_node_delay(self, done: Sequence[NodeView]) -> str:
        """Why no node starts yet after the last one was Done (spec.rollout.postNodeDelaySeconds), or ""."""
        delay, now = self.inputs.target.spec.rollout.post_node_delay_seconds, self.inputs.now
        if not delay or self.inputs.target.deleting:
            return ""
        last = max(done, key=lambda n: n.marks.since or now, default=None)
        if last is None or last.marks.since is None:
            return ""
        until = last.marks.since + timedelta(seconds=delay)
        if now >= until:
            return ""
        self.wakes.append(until)
        return (
            f"{last.name} was Done at {format_time(last.marks.since)}; the next node starts "
            f"at {format_time(until)} (rollout.postNodeDelaySeconds: {delay})"
        )

    def _canary_gate(self, done: Sequence[NodeView]) -> tuple[str, int | None]:
        """(why starts are held, how many more nodes may start) for the canary and the steps after it
        (spec.rollout.steps): each must be Done and soaked before the next starts; ("", None) after them."""
        target, now = self.inputs.target, self.inputs.now
        rollout = target.spec.rollout
        if target.deleting:
            return "", None
        soak = timedelta(seconds=rollout.canary.soak_seconds)
        for number, needed, name in stages(rollout, self.tally.eligible, self.tally.total):
            if len(done) < needed:
                self.stage = name if number else ""
                return "", max(0, needed - len(done) - self.tally.in_flight)
            soaked = [n for n in done if n.marks.since is not None and now - n.marks.since >= soak]
            if len(soaked) >= needed:
                continue
            ends = sorted((n.marks.since or now) + soak for n in done)
            until = ends[needed - 1]
            self.wakes.append(until)
            what = "canary" if number == 0 else f"{name} ({needed} node(s) Done)"
            return f"{what} soaking until {format_time(until)}", 0
        return "", None


def stages(rollout: Rollout, eligible: int, total: int) -> list[tuple[int, int, str]]:
    """(number, nodes Done in all once it is over, name) of the canary (number 0, when it has nodes) and of
    each step of spec.rollout.steps that adds nodes; a percentage is of the selected nodes (`total`), as
    maxUnavailable's is. Nodes Done in all never shrink and never exceed the eligible nodes."""
    out: list[tuple[int, int, str]] = []
    reached = 0
    if rollout.canary.nodes:
        reached = min(rollout.canary.nodes, eligible)
        out.append((0, reached, "canary"))
    for i, step in enumerate(rollout.steps, start=1):
        needed = min(int_or_percent(step, total), eligible)
        if needed > reached:
            reached = needed
            out.append((i, needed, f"step {i} of {len(rollout.steps)} (rollout.steps[{i - 1}]: {step})"))
    return out


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


def _budget_text(
    value: int | str, allowed: int, total: int, unavailable: int, held: tuple[HeldNode, ...]
) -> str:
    """`value`: maxUnavailable as written, `allowed`: as resolved against `total`."""
    text = (
        f"waiting for capacity: {unavailable} of {total} node(s) unavailable, "
        f"maxUnavailable={value} ({allowed})"
    )
    if held:
        text += f"; made unavailable outside this rollout: {held_text(held)}"
    return text
